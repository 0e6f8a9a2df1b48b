"""A capacity plan: what each upgrade route costs for a gallery of N items (N up to 10⁹ and past it), multiplied out
of per-item rates (:mod:`flows.backfill.rates`: measured, or cited and marked so) — ``bctflow backfill --plan
--items N [--workers W] [--device cpu|cuda]``, the ``bench scale`` report's projection, docs/scale.md.

The arithmetic is pure and vectorised over N (:func:`route_costs`); a route's time is in two parts:

* **on the workers** — the embedding, W workers each at the per-worker rate, scaling linearly (measured: 2 Dask
  workers at 1.98× one, ``scaling_2``; past 2 not measured);
* **in one process** — what bctflow runs in the command's process: the paired items and the bridge's fit
  (``bctflow upgrade``), carrying the stored vectors through a transform, the index build of the published version.

Wall time is their sum; worker-hours count the W workers while they embed and one process for the rest (with one
worker, the workspace plan's ``worker_hours``: the wall time). The routes:

* **full backfill** — N items re-embedded, the index built over N;
* **partial backfill to a target** — f·N items re-embedded (at the partial rate: the selected items are sought), the
  index built over all N (the published version holds every item);
* **gallery transform** — P paired items and the fit, N stored vectors carried, the index built over N;
* **adapter** — P paired items and the fit; the gallery and its index stay as they are (each query pays the map).

P = ⌈``upgrade.paired_fraction``·N⌉, at least the map's two per dimension (:func:`components.bridges.base.min_pairs`;
the training split is assumed to hold them). Memory: the stored vectors (float32 rows of the index's width), the
index file for each FAISS type (:func:`index_bytes_per_item`) and the store that holds it: one machine while the
index fits :data:`NODE_RAM_GB`, else a sharded store of that many nodes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from components.bridges.base import min_pairs
from components.errors import ConfigError
from components.indexing.stores.faiss import INDEX_TYPES, IndexConfig
from flows.backfill.rates import DEVICES, Rate, number

__all__ = [
    "NODE_RAM_GB",
    "Capacity",
    "RouteCost",
    "backfill_costs",
    "capacity_lines",
    "check_request",
    "index_bytes_per_item",
    "paired_items",
    "project",
    "route_costs",
]

#: one node's memory for an index: the machine the DiskANN anchor served 10⁹ vectors from (64 GB, cited)
NODE_RAM_GB = 64.0
#: GPUs in the node of the clip-retrieval anchor (its rate is per node)
CLIP_NODE_GPUS = 8


def check_request(items: int, workers: int, fraction: float) -> None:
    """ConfigError in one line for a projection that means nothing: fewer than one item or worker, a fraction
    outside (0, 1]."""
    if items < 1:
        raise ConfigError(f"--items must be at least 1 (got {items}); give the gallery's size, e.g. --items 1000000000")
    if workers < 1:
        raise ConfigError(f"--workers must be at least 1 (got {workers}); it is the processes (or GPUs) that embed")
    if not 0.0 < fraction <= 1.0:
        raise ConfigError(f"--fraction must be in (0, 1] (got {fraction}); 1 re-embeds the whole gallery")


def index_bytes_per_item(config: IndexConfig, width: int) -> float:
    """Bytes per item of the FAISS index file ``config`` builds over float32 rows ``width`` wide (its growth per
    item; the coarse quantizer and PQ codebooks, constant in N, left out): the row (4·width; IVF-PQ: ⌈pq_m·pq_nbits
    / 8⌉ code bytes instead, IVF-SQ8 one byte per coordinate) and IDMap2's 8-byte id; IVF adds its list's 8-byte id
    and the direct map's 8 bytes; HNSW its level-0 links (2M int32), its level and offset (4 + 8 bytes) and the upper
    levels' M links at an expected 1/(M−1) levels. Matches the files FAISS writes
    (tests/flows/backfill/test_capacity.py)."""
    row = 4.0 * width
    if config.type == "flat":
        return row + 8
    if config.type == "ivf":
        return row + 24
    if config.type == "hnsw":
        m = config.hnsw_m
        return row + 8 + 4 * 2 * m + 12 + 4 * m / (m - 1)
    if config.type == "ivfsq":
        return width + 24
    return math.ceil(config.resolved_pq_m(width) * config.pq_nbits / 8) + 24  # ivfpq


def paired_items(items: np.ndarray, paired_fraction: float, map_width: int) -> np.ndarray:
    """Paired items a bridge of ``map_width``-wide vectors is fitted on for galleries of ``items``: ⌈fraction·N⌉,
    at least two per dimension (as ``bctflow upgrade`` draws them, the training split assumed large enough)."""
    return np.maximum(np.ceil(paired_fraction * np.asarray(items, dtype=np.float64)), min_pairs(map_width))


@dataclass(frozen=True)
class RouteCost:
    """One route's cost for each gallery size: ``items`` embedded or carried, ``pairs`` embedded by both models,
    seconds on the ``workers`` (``parallel_s``) and in one process (``serial_s``)."""

    route: str
    items: np.ndarray
    pairs: np.ndarray
    parallel_s: np.ndarray
    serial_s: np.ndarray
    workers: int

    @property
    def wall_s(self) -> np.ndarray:
        return self.parallel_s + self.serial_s

    @property
    def worker_hours(self) -> np.ndarray:
        """The workers while they embed, one process for the rest."""
        return (self.parallel_s * self.workers + self.serial_s) / 3600.0


def backfill_costs(
    items: np.ndarray | float, *, workers: int, fraction: float, embed: float, partial: float, index_build: float
) -> tuple[RouteCost, RouteCost]:
    """The full and the partial backfill's costs for galleries of ``items`` (module docstring): ``embed`` /
    ``partial`` items/s per worker, ``index_build`` items/s in one process, ``fraction`` of the partial one."""
    n = np.asarray(items, dtype=np.float64)
    zero, index, some = np.zeros_like(n), n / index_build, np.round(fraction * n)
    return (
        RouteCost("full backfill", n, zero, n / (embed * workers), index, workers),
        RouteCost("partial backfill", some, zero, some / (partial * workers), index, workers),
    )


def route_costs(
    items: np.ndarray | float,
    *,
    workers: int,
    fraction: float,
    pairs: np.ndarray | float,
    embed: float,
    partial: float,
    transform: float,
    pair_s: float,
    index_build: float,
) -> tuple[RouteCost, ...]:
    """Each route's cost (module docstring) for galleries of ``items`` (an array: one cost per size): the two
    backfills (:func:`backfill_costs`), then the transform (``pairs`` at ``pair_s`` seconds each, the vectors at
    ``transform`` items/s, the index) and the adapter (the pairs only)."""
    n = np.asarray(items, dtype=np.float64)
    p = np.broadcast_to(np.asarray(pairs, dtype=np.float64), n.shape)
    zero, index = np.zeros_like(n), n / index_build
    return (
        *backfill_costs(n, workers=workers, fraction=fraction, embed=embed, partial=partial, index_build=index_build),
        RouteCost("gallery transform", n, p, zero, p * pair_s + n / transform + index, workers),
        RouteCost("adapter", zero, p, zero, p * pair_s, workers),
    )


@dataclass(frozen=True)
class Capacity:
    """A projection for galleries of ``items``: the ``routes``, the index bytes per item of each FAISS type at the
    stored ``width``, and every rate it used (``rates``, in the order they are printed)."""

    items: np.ndarray
    workers: int
    device: str
    fraction: float
    fraction_why: str
    index_type: str
    width: int
    pairs: np.ndarray
    routes: tuple[RouteCost, ...]
    index_bytes: Mapping[str, float]
    rates: Mapping[str, Rate]
    index_rate: Rate
    anchors: tuple[Rate, ...] = field(default=())

    @property
    def vector_bytes(self) -> np.ndarray:
        """The stored vectors: float32 rows of the index's width."""
        return self.items * 4.0 * self.width

    def index_size(self, kind: str | None = None) -> np.ndarray:
        return self.items * self.index_bytes[kind or self.index_type]

    def nodes(self, kind: str | None = None) -> np.ndarray:
        """Machines of :data:`NODE_RAM_GB` the index needs in memory (1: it fits one)."""
        return np.maximum(1, np.ceil(self.index_size(kind) / (NODE_RAM_GB * 1e9)))


def _derived(name: str, value: float, unit: str, what: str, *parts: Rate) -> Rate:
    kind = "cited" if any(p.kind == "cited" for p in parts) else "measured"
    return Rate(
        name=name, value=value, unit=unit, kind=kind, what=what, source="from " + ", ".join(p.name for p in parts)
    )


def project(
    items: np.ndarray | int,
    rates: Mapping[str, Rate],
    *,
    index: IndexConfig,
    width: int,
    map_width: int,
    paired_fraction: float,
    workers: int = 1,
    device: str = "cpu",
    fraction: float | None = None,
    fraction_why: str = "",
) -> Capacity:
    """The capacity plan of galleries of ``items`` from ``rates`` (:func:`flows.backfill.rates.committed_rates`, a
    workspace's measurement merged over them): ``device`` picks the embedding rate (cpu: ``embed`` / ``partial``;
    cuda: ``gpu_embed``, its partial rate at the CPU's measured partial ÷ full ratio); ``fraction`` of the partial
    route (None: the committed ``partial_fraction``); ``index`` the params' index (its type is the store's), ``width``
    its rows' width, ``map_width`` the bridge's."""
    if device not in DEVICES:
        raise ConfigError(f"unknown --device {device!r}; use one of {', '.join(DEVICES)}")
    if fraction is None:
        fraction = rates["partial_fraction"].value
        fraction_why = "the 1M scale run's partial backfill; --fraction sets another"
    n = np.asarray(items, dtype=np.float64)
    if not 0.0 <= fraction <= 1.0:  # 0: a workspace's target reached before any item is re-embedded
        raise ValueError(f"a partial backfill's fraction is in [0, 1], got {fraction}")
    check_request(int(n.min()), workers, 1.0)
    embed, partial = rates["embed"], rates["partial"]
    if device == "cuda":
        ratio = partial.value / embed.value
        embed = rates["gpu_embed"]
        partial = _derived("gpu_partial", embed.value * ratio, embed.unit,
                           f"the GPU rate × the CPU's partial ÷ full ratio {ratio:.3f}", rates["gpu_embed"],
                           rates["partial"], rates["embed"])  # fmt: skip
    build = rates.get(f"index_build_{index.type}")
    if build is None:  # no committed build of this type: the HNSW build's rate, said so
        hnsw = rates["index_build_hnsw"]
        build = hnsw.model_copy(update={"name": "index_build", "what": f"no {index.type} build measured: {hnsw.what}"})
    pairs = paired_items(n, paired_fraction, map_width)
    routes = route_costs(n, workers=workers, fraction=fraction, pairs=pairs, embed=embed.value,
                         partial=partial.value, transform=rates["transform"].value, pair_s=rates["pair_s"].value,
                         index_build=build.value)  # fmt: skip
    used = {r.name: r for r in (embed, partial, rates["transform"], rates["pair_s"], build,
                                rates["store_ingest"], rates["store_bulk_ingest"], rates["worker_ram"],
                                rates["scaling_2"], rates["adapter_query"])}  # fmt: skip
    cited = tuple(r for r in rates.values() if r.kind == "cited" and r.name not in used)
    sizes = {kind: index_bytes_per_item(IndexConfig(**{**vars(index), "type": kind}), width) for kind in INDEX_TYPES}
    return Capacity(items=n, workers=workers, device=device, fraction=fraction, fraction_why=fraction_why,
                    index_type=index.type, width=width, pairs=pairs, routes=routes, index_bytes=sizes, rates=used,
                    index_rate=build,
                    anchors=cited)  # fmt: skip


def _time(s: float) -> str:
    """Seconds as s / min / h, with days past two."""
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:,.1f} h" + (f" ({s / 86400:,.1f} days)" if s > 2 * 86400 else "")


def _bytes(b: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if b >= size:
            return f"{b / size:,.1f} {unit}"
    return f"{b:,.0f} B"


def capacity_lines(cap: Capacity) -> list[str]:
    """The plan of one gallery size (``cap.items`` a scalar) in lines: the rates with their provenance, each route's
    wall time and worker-hours, memory and the store, and the full backfill beside the cited anchors."""
    if cap.items.ndim:
        raise ValueError("capacity_lines prints one gallery size; project a scalar --items")
    n, w = float(cap.items), cap.workers
    r = cap.rates
    who = "GPU" if cap.device == "cuda" else "worker"
    lines = [
        f"capacity plan: {n:,.0f} items, {w} {who}{'s' if w > 1 else ''} ({cap.device}), index {cap.index_type} "
        f"(params index.type), rows {cap.width} float32 wide",
        "  rates (measured: committed reports of this repository's runs, or this workspace; cited: published "
        "elsewhere, never measured here):",
    ]
    lines += [f"    {x.name}: {x.line()}" for x in r.values()]
    lines.append(
        f"  routes — wall time (on the {who}s + in one process) and {who}-hours ({who}s while they embed, one "
        f"process for the rest); {who}s scale linearly (measured {r['scaling_2'].value:.2f}× at 2, past 2 not "
        "measured):"
    )
    for c in cap.routes:
        par, ser, wall, wh = (float(x) for x in (c.parallel_s, c.serial_s, c.wall_s, c.worker_hours))
        items, pairs = float(c.items), float(c.pairs)
        index = n / cap.index_rate.value
        if c.route == "full backfill":
            what = f"{items:,.0f} items re-embedded in {_time(par)} + the index built in {_time(index)}"
        elif c.route == "partial backfill":
            what = (f"fraction {cap.fraction:g} ({cap.fraction_why}): {items:,.0f} items re-embedded in {_time(par)} "
                    f"+ the index over all {n:,.0f} built in {_time(index)}")  # fmt: skip
        elif c.route == "gallery transform":
            what = (f"{pairs:,.0f} paired items and the fit in {_time(pairs * r['pair_s'].value)} + {items:,.0f} "
                    f"vectors carried in {_time(n / r['transform'].value)} (one process, as bctflow carries them) + "
                    f"the index built in {_time(index)}")  # fmt: skip
        else:
            what = (f"{pairs:,.0f} paired items and the fit in {_time(ser)}; the gallery and its index stay as they "
                    f"are, each query pays {r['adapter_query'].value:.1f} µs for the map")  # fmt: skip
        lines.append(f"    {c.route}: {what} → {_time(wall)}, {wh:,.1f} {who}-hours")
    lines.append("  memory and store (N × bytes per item; constants left out):")
    ram = r["worker_ram"].value
    lines.append(
        f"    per-worker RAM: {ram:,.0f} MB (the 1M CPU backfill's peak, index build included)"
        + ("; a GPU worker's is not measured" if cap.device == "cuda" else "")
    )
    lines.append(
        f"    stored vectors: {n:,.0f} × {cap.width} float32 = {_bytes(float(cap.vector_bytes))} (+ "
        f"{_bytes(8 * n)} of int64 ids)"
    )
    sizes = " · ".join(
        f"{k} {_bytes(float(cap.index_size(k)))}" + (" (params)" if k == cap.index_type else "") for k in INDEX_TYPES
    )
    lines.append(f"    FAISS index file: {sizes} ({', '.join(f'{k} {b:,.0f} B' for k, b in cap.index_bytes.items())} "
                 "per item)")  # fmt: skip
    size, nodes = float(cap.index_size()), int(cap.nodes())
    if nodes == 1:
        store = f"the {cap.index_type} index ({_bytes(size)}) fits one {NODE_RAM_GB:g} GB machine: FAISS files"
    else:
        store = (f"the {cap.index_type} index ({_bytes(size)}) needs {nodes} machines of {NODE_RAM_GB:g} GB: a "
                 f"sharded store (a Milvus cluster, {nodes} query nodes)")  # fmt: skip
        if cap.index_type != "ivfpq":
            pq = int(cap.nodes("ivfpq"))
            store += f", or ivfpq in {_bytes(float(cap.index_size('ivfpq')))} ({pq} machine{'s' if pq > 1 else ''})"
    ingest, bulk = r["store_ingest"].value, r["store_bulk_ingest"].value
    lines.append(f"    store: {store}; written row by row at {number(ingest)} rows/s: {_time(n / ingest)} (one "
                 f"writer), or by a bulk path at {number(bulk)} rows/s: {_time(n / bulk)}")  # fmt: skip
    lines.append("  beside the anchors (cited, never measured here) — the full backfill's embedding of these items on "
                 f"{w} GPU{'s' if w > 1 else ''}:")  # fmt: skip
    for a in cap.anchors:
        if "GPU" in a.unit or "A100" in a.unit:
            per = a.value / CLIP_NODE_GPUS if "node" in a.unit else a.value
            lines.append(
                f"    {a.name}: {_time(n / (per * w))} at {number(per)} items/s per GPU — cited: {a.what}; {a.source}"
            )
        else:
            lines.append(f"    {a.name}: {a.line()}")
    return lines
