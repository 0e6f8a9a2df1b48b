"""params ``serve:``: how ``bctflow serve`` answers queries (limits, batching, the merge of a mixed gallery).

None of these shape a generation (all are run options); they live in their own module so that flows/params/schema.py
stays
one screenful per section.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from flows.params.tags import RunOption

__all__ = ["ServeParams"]


class ServeParams(BaseModel):
    """``serve:`` of params.yaml (docs/serving.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: a mixed gallery (partial backfill): ``none`` searches it with the query of the generation the lineage allows;
    #: ``rank`` embeds an image query with every generation in the gallery and merges the lists by rank
    merge: RunOption[Literal["none", "rank"]] = "none"
    max_batch: RunOption[int] = Field(64, gt=0)  # queries per forward pass / FAISS call (dynamic batching)
    max_wait_ms: RunOption[float] = Field(2.0, ge=0.0)  # how long an image query waits for others (vectors: none)
    max_k: RunOption[int] = Field(1000, gt=0)  # the largest k a query may ask for
    max_queries: RunOption[int] = Field(256, gt=0)  # queries in one POST /search/batch
    max_body_bytes: RunOption[int] = Field(8 << 20, gt=0)  # the largest request body
    max_pixels: RunOption[int] = Field(4096 * 4096, gt=0)  # the largest query image (width × height)
    watch_interval_s: RunOption[float] = Field(1.0, gt=0.0)  # how often the live pointer is checked for a swap
    #: how long live/CURRENT may lag the lineage's newest pointer row (a switch between its commit and its
    #: roll-forward) before the service reports the lag as a failed reload; meanwhile it keeps serving and looks again
    switch_grace_s: RunOption[float] = Field(10.0, ge=0.0)
    device: RunOption[Literal["auto", "cpu", "cuda"]] = "auto"  # where the query models run
