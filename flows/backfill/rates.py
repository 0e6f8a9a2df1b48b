"""The per-item rates a capacity plan multiplies out (``bctflow backfill --plan --items N``, docs/scale.md), each a
typed record: its value and unit, what was measured or published, where it comes from, and which of the two it is.

* **measured** — read from the benchmark reports committed under ``benchmarks/results`` (:data:`MEASURED` names
  the file and key of each; the source line adds the commit that last changed the file, as git knows it), or
  measured now on a sample of this workspace's own items by the backfill's plan (:func:`workspace_rates`, from
  :mod:`flows.backfill.forecast`), which then replaces the committed rate of the route it measured;
* **cited** — published elsewhere (:data:`CITED`: public anchors a 10⁹-item deployment is set beside, with their
  sources): never measured here, printed as cited.

A key path reads nested reports: ``embedding.project_img_s``; ``mean[route=adapter,fraction=0.3].query_us`` picks
the entry of the list ``mean`` whose fields have those values.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from components.errors import ConfigError
from flows.runtime.provenance import file_commit

if TYPE_CHECKING:
    from flows.backfill.forecast import BackfillForecast
    from flows.backfill.plan import BackfillPlan

__all__ = [
    "CITED",
    "DEVICES",
    "MEASURED",
    "RESULTS",
    "Rate",
    "committed_rates",
    "number",
    "repository_root",
    "workspace_rates",
]

#: where a capacity plan's workers may embed: the devices an embedding rate is known for (``embed``, ``gpu_embed``)
DEVICES = ("cpu", "cuda")
#: where the committed reports lie, relative to the repository root
RESULTS = Path("benchmarks") / "results"


def number(v: float) -> str:
    """A rate as printed: whole with thousands separators from 100 up, else three significant digits."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


class Rate(BaseModel):
    """One number a projection uses: ``value`` in ``unit``; ``what`` was measured or published (the conditions);
    ``source``: the report file, key and commit, the workspace sample, or the citation; ``kind``: measured or cited."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    value: float
    unit: str
    kind: Literal["measured", "cited"]
    what: str
    source: str

    def line(self) -> str:
        """``value unit — kind: what; source``."""
        return f"{number(self.value)} {self.unit} — {self.kind}: {self.what}; {self.source}"


@dataclass(frozen=True)
class _Pick:
    """A committed rate: ``key`` of the report ``path`` (under :data:`RESULTS`), divided by ``per`` (another key of
    the same report) when given."""

    name: str
    path: str
    key: str
    unit: str
    what: str
    per: str | None = None


_SCALE_1M = "scale/n1000000-hnsw/scale.json"
_TRANSFORM_1M = "scale/transform-n1000000-flat/transform.json"

#: the committed rates the plan reads (the 2-core CPU machines' runs of the cpu profile's model: narrow ResNet-18,
#: 16×16 grey images, 128-d Lorentz head; each report's command and load in benchmarks/results/README.md)
MEASURED: tuple[_Pick, ...] = (
    _Pick("embed", _SCALE_1M, "backfill_items_per_s", "items/s per worker",
          "the 1M-item full backfill's re-embedding, one process × 2 torch threads on a 2-core CPU"),
    _Pick("partial", _SCALE_1M, "partial_backfill_items_per_s", "items/s per worker",
          "the same corpus's 10% uncertainty-ordered partial backfill (seeking its items), same run"),
    _Pick("partial_fraction", _SCALE_1M, "partial_reembedded", "of the gallery",
          "the fraction that partial backfill re-embedded", per="items"),
    _Pick("transform", _TRANSFORM_1M, "transform_items_per_s", "items/s",
          "1M stored vectors carried through a procrustes transform, one process on a 2-core CPU"),
    _Pick("pair_s", _TRANSFORM_1M, "bridge_fit_s", "s per paired item",
          "`bctflow upgrade --route transform` over its paired items (both models' embeddings of them, the fit, "
          "the routes measured), whole command over its pairs", per="paired_items"),
    _Pick("index_build_hnsw", _SCALE_1M, "ingest_items_per_s", "items/s",
          "the 1M-item HNSW32 index built by FAISS in one process (items over the build's seconds)"),
    _Pick("index_build_ivf", "scale/n100000-ivf/scale.json", "items", "items/s",
          "a 100k-item IVF1265 index built by FAISS in one process (trained on its items)", per="index_build_s"),
    _Pick("index_build_ivfsq", "scale/synthetic-n10000000-faiss/scale.json", "items", "items/s",
          "a 10M-row IVF2564,SQ8 index built by FAISS in one process (trained on 100k rows, nprobe tuned), "
          "synthetic rows (bctflow bench store)", per="index_build_s"),
    _Pick("store_ingest", "scale/n1000000-hnsw-milvus/scale.json", "ingest_items_per_s", "rows/s",
          "1M rows written row by row into Milvus Lite (its own write timing; the clean-clone CI ran beside it)"),
    _Pick("store_bulk_ingest", "scale/synthetic-n10000000-lancedb/scale.json", "bulk_ingest_items_per_s", "rows/s",
          "10M rows appended into LanceDB by its bulk path (Arrow batches, one commit per 1M rows), synthetic rows "
          "(bctflow bench store)"),
    _Pick("worker_ram", _SCALE_1M, "peak_rss_mb", "MB",
          "peak RSS of the 1M-item backfill's process (the embedding, then the 1M index built in it)"),
    _Pick("scaling_2", "scale/n100000-hnsw-faiss/scale.json", "scaling_2_vs_1", "× one worker",
          "a 100k-item backfill on 2 Dask workers × 1 thread against 1 worker, one 2-core machine"),
    _Pick("gpu_embed", "perf/cuda-b512/perf.json", "embedding.project_img_s", "images/s per GPU",
          "the same model's embedding on one H200 in bf16, images already in memory (no decoding, no parts "
          "written): an upper bound for a GPU worker"),
    _Pick("adapter_query", "cpu/routes-ext_class/results.json", "mean[route=adapter,fraction=0.3].query_us",
          "µs per query", "a query adapter's map applied to one query (ext_class, 30% pairs, mean of 3 seeds)"),
)  # fmt: skip

#: the published anchors a 10⁹-item plan is set beside (docs/scale.md), never measured here
CITED: tuple[Rate, ...] = (
    Rate(name="gpu_resnet50_int8", value=88_714, unit="images/s per GPU", kind="cited",
         what="ResNet-50 on one H100, INT8, images pre-decoded (model only)",
         source="MLPerf Inference v4.0 datacenter results, MLCommons (mlcommons.org/benchmarks/inference-datacenter)"),
    Rate(name="gpu_vitb16_bf16", value=5_059, unit="images/s per GPU", kind="cited",
         what="ViT-B/16 at 224 px in bf16 on one workstation GPU (model only)",
         source="timm's inference benchmarks (github.com/huggingface/pytorch-image-models, results/)"),
    Rate(name="gpu_clip_node", value=7_000, unit="images/s per node of 8 A100s", kind="cited",
         what="CLIP ViT-B/16 end to end (read, decode, resize, embed, write), resizing setting the pace; 4 nodes "
         "4×", source="clip-retrieval, docs/distributed_clip_inference.md (github.com/rom1504/clip-retrieval)"),
    Rate(name="ivfpq_1b", value=54, unit="GiB per 10⁹ vectors", kind="cited",
         what="a cuVS IVF-PQ index of DEEP-1B (96-d float32, 360 GiB raw) in one GPU's memory",
         source="NVIDIA technical blog, Accelerating Vector Search: NVIDIA cuVS IVF-PQ Deep Dive, part 1"),
    Rate(name="diskann_1b", value=5_000, unit="queries/s", kind="cited",
         what="10⁹ SIFT vectors served from 64 GB of RAM and an SSD on 16 cores, < 3 ms mean latency, ≥ 95% "
         "1-recall@1", source="DiskANN, Subramanya et al., NeurIPS 2019"),
)  # fmt: skip


def repository_root() -> Path:
    """The folder holding this code's packages: a checkout's root, where ``benchmarks/results`` is."""
    import components

    return Path(components.__file__).resolve().parent.parent


def _resolve(doc: Any, path: str) -> Any:
    """``path``'s value in the JSON ``doc`` (module docstring); KeyError naming the missing step."""
    for step in re.split(r"\.(?![^\[]*\])", path):  # dots outside brackets
        m = re.fullmatch(r"([\w@]+)(?:\[(.+)\])?", step)
        if m is None or not isinstance(doc, dict) or m[1] not in doc:
            raise KeyError(step)
        doc = doc[m[1]]
        if m[2]:
            want = dict(kv.split("=", 1) for kv in m[2].split(","))
            doc = next((r for r in doc if all(str(r.get(k)) == v for k, v in want.items())), None)
            if doc is None:
                raise KeyError(step)
    return doc


def _measured(pick: _Pick, root: Path) -> Rate:
    rel = RESULTS / pick.path
    file = root / rel
    try:
        doc = json.loads(file.read_text())
    except (OSError, ValueError):
        raise ConfigError(
            f"the committed benchmark report {rel} is missing or unreadable under {root}: the capacity plan reads its "
            "measured rates from benchmarks/results; run it from a bctflow checkout (git clone, pip install -e .)"
        ) from None
    try:
        value = _resolve(doc, pick.key) / (_resolve(doc, pick.per) if pick.per else 1)
    except (KeyError, TypeError, ZeroDivisionError):
        raise ConfigError(
            f"{rel} holds no number at `{pick.key}`" + (f" / `{pick.per}`" if pick.per else "") + "; restore the "
            "committed report (git checkout -- benchmarks/results) or point the capacity plan at a report that has it"
        ) from None
    commit = file_commit(rel, root)
    key = f"`{pick.key}`" + (f" / `{pick.per}`" if pick.per else "")
    where = f"commit {commit}" if commit else "not a git checkout: no commit known"
    return Rate(name=pick.name, value=float(value), unit=pick.unit, kind="measured", what=pick.what,
                source=f"{rel} {key} ({where})")  # fmt: skip


def committed_rates(root: Path | None = None) -> dict[str, Rate]:
    """Every rate of :data:`MEASURED` read from the reports under ``root`` (default: this code's checkout) and every
    anchor of :data:`CITED`, by name. ConfigError in one line when a report or a key is missing."""
    base = root if root is not None else repository_root()
    return {p.name: _measured(p, base) for p in MEASURED} | {r.name: r for r in CITED}


def workspace_rates(plan: BackfillPlan, fc: BackfillForecast, device: str) -> dict[str, Rate]:
    """The rate ``fc`` (the workspace's own plan, its embedding on ``device``) measured, as the committed rate it
    replaces: the carrying rate of a gallery transform (``transform``), else the target's embedding rate on this
    machine — ``embed`` and ``partial`` on a CPU (the plan measures one rate for both), ``gpu_embed`` on a GPU."""
    sample = sum(g.sample for g in fc.galleries)
    where = f"measured now on a sample of {sample} of this workspace's items ({plan.home}), the plan's own measurement"
    if plan.bridge is not None:
        what = f"the live gallery's vectors carried through bridge v{plan.bridge.version} ({plan.bridge.kind})"
        return {"transform": Rate(name="transform", value=fc.items_per_s, unit="items/s", kind="measured",
                                  what=what, source=where)}  # fmt: skip
    what = (
        f"generation {plan.target}'s model re-embedding this workspace's items on this machine ({device}), one process"
    )
    names, unit = (
        (("gpu_embed",), "images/s per GPU") if device == "cuda" else (("embed", "partial"), "items/s per worker")
    )
    return {n: Rate(name=n, value=fc.items_per_s, unit=unit, kind="measured", what=what, source=where) for n in names}
