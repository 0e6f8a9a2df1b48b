"""params ``gallery:`` and ``index:``: the corpus the live gallery serves, the store its vectors live in, the FAISS
index every gallery gets.

In their own module so that flows/params/schema.py stays one screenful per section.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from flows.params.tags import Output, RunOption

__all__ = ["GalleryParams", "IndexParams"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IndexParams(_Strict):
    """The FAISS index of every gallery (docs/design.md §8): exact ``flat``, or the approximate ``ivf`` / ``hnsw`` /
    ``ivfpq`` / ``ivfsq``."""

    type: Output[Literal["flat", "ivf", "hnsw", "ivfpq", "ivfsq"]] = "flat"
    nlist: Output[int | None] = Field(None, gt=0)  # IVF lists (None: about 4·sqrt(N))
    nprobe: Output[int] = Field(16, gt=0)  # IVF lists visited per query
    hnsw_m: Output[int] = Field(32, gt=1)  # hnsw graph degree
    ef_construction: Output[int] = Field(80, gt=0)
    ef_search: Output[int] = Field(96, gt=0)
    pq_m: Output[int | None] = Field(None, gt=0)  # ivfpq sub-quantisers (None: chosen from the width)
    pq_nbits: Output[int] = Field(8, gt=0, le=16)
    train_size: Output[int] = Field(100_000, gt=0)  # training sample of the IVF types
    #: held-out sample on which the build measures recall@10 against exact search
    recall_queries: Output[int] = Field(1000, gt=0)
    shards: Output[int] = Field(1, gt=0)  # faiss.IndexShards over this many sub-indexes
    #: ivf / hnsw: the build picks the cheapest nprobe / ef_search reaching this recall@10 (null: fixed values)
    target_recall: Output[float | None] = Field(0.95, gt=0.0, le=1.0)
    #: publishing a live index (generation 0, a backfill) whose measured recall@10 is below this fails (null: any)
    min_recall: Output[float | None] = Field(None, gt=0.0, le=1.0)


class GalleryParams(_Strict):
    """The corpus the live index serves (docs/design.md §7.10): by default the labelled evaluation split; the store that
    holds its searchable vectors (docs/design.md §8.4).

    ``source``: ``eval_split`` | ``webdataset`` (a folder of ``*.tar`` shards) | ``manifest`` (a Parquet or CSV
    file: path, id, optional label) | ``folder`` (an image folder). Labels are optional; generation 0 and every
    backfill embed it in resumable chunks of ``backfill.chunk_size`` items.
    """

    source: Output[Literal["eval_split", "webdataset", "manifest", "folder"]] = "eval_split"
    path: Output[str | None] = None  # shards folder / manifest file / image folder (relative to the working directory)
    workers: Output[int] = Field(2, ge=0)  # DataLoader worker processes decoding the corpus
    #: retrieval metrics of a labelled corpus larger than evaluation.exact_max_items: top-k on this many sampled queries
    metric_queries: Output[int] = Field(10_000, gt=0)
    #: where the galleries' searchable vectors live (components/indexing/stores/), checked at plan time
    store: Output[str] = "faiss"
    #: the store's address: a Milvus Lite file / LanceDB folder (relative: in the workspace), a server or s3:// URI
    uri: Output[str | None] = None
    #: the prefix of the store's collection names (<name>_g<N>_v<k>): letters, digits and underscores
    name: Output[str] = Field("bctflow", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    #: the database store's own index options (docs/design.md §8.4); the faiss store uses params index:
    index_options: Output[dict[str, Any]] = Field(default_factory=dict)
    #: backfilled gallery versions kept (files and store collections) for `bctflow rollback`; the live one always
    keep_versions: RunOption[int] = Field(2, ge=1)

    @model_validator(mode="after")
    def _path_given(self) -> GalleryParams:
        if self.source != "eval_split" and not self.path:
            raise ValueError(f"gallery.source {self.source} needs gallery.path (the corpus on disk); set it")
        return self
