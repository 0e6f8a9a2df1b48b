"""``bctflow bench store``: the gallery store layer at N rows of synthetic vectors, no model (docs/scale.md).

The model path is measured end to end at 1M items (``bench scale``); what grows past it is the store's work, which
does not need a model to be measured. N labelled points of the shipped geometry (params ``model.geometry`` and
``embed_dim``: Lorentz, d = 128, tangent radii up to ζ0 — :func:`benchmarks.index_speed.clustered_source`) fill two
gallery versions, each a part store of ``--chunk-size`` rows and an index in the store ``--store``, laid out as a
workspace's (``generations/gen_000`` and ``live/index-v1``). Every heavy step runs in a child process
(``python -m benchmarks.store_scale STEP``), whose peak RSS is measured:

1. ``corpus``: generation 0's rows, written chunk by chunk; then **the transform's carry**: a Procrustes bridge
   g0 → g1 fitted on paired rows (g1: the same items rotated, at a larger radius, with noise) carries every row into
   generation 1's part store (:meth:`components.bridges.base.Bridge.map_gallery`, what ``backfill --transform``
   applies per window; ``carry_items_per_s``);
2. ``build`` of version 0, killed with SIGKILL half-way (a database store: ``store.half_written``, after the write
   that takes the rows past half; FAISS: ``index.half_added``, half-way through the adding pass) and run again:
   ``rows_after_resume`` / ``duplicates_after_resume`` read from the store (its audit), ``rows_resumed`` (kept);
3. ``build`` of version 1, uninterrupted: ``index_build_s``, ``recall_at_10`` (its manifest: against exact search,
   on ``recall_queries`` items) and the ingest rate of the store's default path — ``bulk_ingest_items_per_s``
   (LanceDB: Arrow batches, one commit per group of parts; FAISS files: the adding pass, items over the build) —
   and, LanceDB, ``ingest_items_per_s`` by the row path (``rows``: parts upserted one by one into a scratch table
   for at most ``--row-seconds``; Milvus Lite's only path is the row path, so its build's rate is that key);
4. here: both versions sealed (:func:`components.indexing.seal.seal_version`, as a publish step does); ``search_qps``
   of version 1 on 1000 of its rows, k = 10; ``alias_flip_s``: the median of 10 moves of the live alias between the
   versions (a database store's own alias; FAISS files: ``live/CURRENT``, their alias); ``rollback_s``: the slower
   median (back to version 0, forward to version 1; 5 each) of what ``bctflow rollback`` does that touches the
   gallery — the gate's check of the restored version (:func:`flows.backfill.rollback.check_version`: the seal
   pinned at publish, the index's digest) and the moves (``live/CURRENT``, the store's alias). The lineage row and
   MLflow aliases a real rollback also writes do not touch the gallery (``rollback_switch_s`` of ``bench scale``).

Writes ``DIR/scale.json`` (``synthetic``: true) and ``DIR/report.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.index_speed import clustered_source
from benchmarks.report import provenance_lines, write_run_report
from benchmarks.scale_store import URIS, ingest_rate, queries_per_s
from components.bridges.base import Bridge
from components.errors import ConfigError
from components.faults import KILL_ENV
from components.geometry import create_space
from components.indexing.backend import IndexOptions, collection_at, open_index, vector_store
from components.indexing.gallery import GalleryEmbeddings
from components.indexing.live import LivePointer
from components.indexing.parts import GalleryParts, PartWriter, StoredPart
from components.indexing.seal import seal_version
from components.indexing.stores.db_rows import facts_of, model_of
from components.indexing.version import EVAL_SPLIT, GalleryVersion
from flows.backfill import check_version
from registry.orm import GalleryPointer

__all__ = ["STORES", "run_store_scale"]

#: each store's index for the synthetic run: compressed codes in inverted lists (the index that fits 10⁹ rows) for
#: FAISS (IVF-SQ8) and LanceDB (IVF-PQ), Milvus Lite HNSW (its IVF-PQ is not served by Milvus Lite). FAISS re-ranks
#: its candidates with the decoded codes, so its codes are one byte per coordinate: IVF-PQ with the default 43
#: sub-quantisers of 3 coordinates stopped at recall@10 0.879 at 1M rows whatever the nprobe, and IVF-PQ with one
#: coordinate per sub-quantiser (the same 129 bytes per row) built 10.3× slower than SQ8 for the same recall at 200k
#: rows — 32 minutes to the half-way kill at 10M (docs/scale.md, "Why IVF-SQ8"). LanceDB re-ranks with the stored
#: vectors (``refine_factor``) and keeps its default sub-vectors
STORES = {
    "faiss": {"type": "ivfsq", "target_recall": 0.95},
    "lancedb": {"index_type": "IVF_PQ", "nprobes": 32, "refine_factor": 10},
    "milvus": {"index_type": "HNSW"},
}
#: the smallest corpus the run takes (IVF-PQ trains 256 codes per sub-vector; the recall sample is 1000 rows)
MIN_ITEMS = 5_000
_KILL = {"faiss": "index.half_added"}  # a database store: store.half_written
_ZETA0, _ZETA1 = 1.0, 1.2  # the clip radii of the two generations (params geometry.zeta0, + delta_zeta)
_PAIRED = 20_000  # rows the bridge is fitted on


def _versions(work: Path) -> tuple[GalleryVersion, GalleryVersion]:
    return GalleryVersion(work / "generations" / "gen_000"), GalleryVersion(work / "live" / "index-v1")


def _collection_name(store: str, generation: int) -> str | None:
    return None if store == "faiss" else f"scale_g{generation}_v{generation}"


def _store(store: str, work: Path) -> Any:
    options = dict(STORES[store]) if store != "faiss" else None
    return vector_store(store, str(work / URIS[store]) if store in URIS else None, options)


# ------------------------------------------------------------------ child steps
def _rows(labels: np.ndarray, z: np.ndarray, points: np.ndarray, ids: np.ndarray) -> GalleryEmbeddings:
    """Rows of a Lorentz (K = 1) gallery: tangent vectors ``z`` (n, d), points (n, d+1), ``ids`` / ``labels`` (n,)."""
    n = len(ids)
    return GalleryEmbeddings(
        "lorentz", 1.0, z.astype(np.float32), points.astype(np.float32), ids, labels,
        np.zeros(n, bool), np.zeros((n, 0), np.float32),
    )  # fmt: skip


def corpus_step(work: Path, items: int, dim: int, chunk: int) -> dict[str, Any]:
    """Generation 0's N rows (part store of version 0), the bridge g0 → g1 fitted on ``_PAIRED`` of them, and every
    row carried into version 1's part store. Returns the seconds and rates."""
    space = create_space("lorentz", 1.0)
    make = clustered_source(dim, space, median_norm=0.6 * _ZETA0, max_norm=_ZETA0)
    v0, v1 = _versions(work)
    for v in (v0, v1):
        shutil.rmtree(v.root, ignore_errors=True)
    t0 = time.perf_counter()
    writer = PartWriter(v0.evaluation_store, chunk)
    for i, start in enumerate(range(0, items, chunk)):
        labels, z, points = make(min(chunk, items - start), i + 1)
        ids = np.arange(start, start + len(labels), dtype=np.int64)
        writer.add(StoredPart(_rows(labels, z, points, ids), np.zeros(len(ids), np.int64)))
    live = writer.finish()
    written = time.perf_counter() - t0
    # generation 1's view of the paired items: rotated, at a larger radius, with noise (a model trained again)
    rng = np.random.default_rng(1)
    q, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    x = next(live.parts()).gallery.take(np.arange(min(_PAIRED, chunk)))
    zy = (x.z.astype(np.float64) @ q) * (_ZETA1 / _ZETA0) + 0.02 * rng.normal(size=x.z.shape)
    y = _rows(x.labels, zy, space.points(zy, zy), x.ids)
    t1 = time.perf_counter()
    bridge = Bridge.fit("procrustes", 0, 1, x, y)
    fitted = time.perf_counter() - t1
    t2 = time.perf_counter()
    carried = PartWriter(v1.evaluation_store, chunk)
    for part in live.parts():
        n = len(part)
        carried.add(StoredPart(bridge.map_gallery(part.gallery), np.ones(n, np.int64), np.ones(n, np.int64)))
    carried.finish()
    carry = time.perf_counter() - t2
    return {
        "corpus_write_s": written,
        "bridge_fit_s": fitted,
        "bridge_fit_error": bridge.fit_error,
        "carry_s": carry,
        "carry_items_per_s": items / carry,
    }


def build_step(work: Path, store: str, generation: int) -> dict[str, Any]:
    """Build version ``generation``'s index in ``store`` from its part store and record that it serves."""
    v = _versions(work)[generation]
    parts = GalleryParts(v.evaluation_store)
    coll = _store(store, work).collection(_collection_name(store, generation), v.evaluation_index)
    settings = STORES[store] if store == "faiss" else {}
    if store == "lancedb":  # about ten commits at every size, at most one per 1M rows
        type(coll).bulk_rows = min(1 << 20, max(len(parts) // 10, 1))
    built = coll.build(parts, generation=generation, options=IndexOptions(settings, recall_queries=1000))
    v.record_serving(EVAL_SPLIT)
    m = json.loads((v.evaluation_index / "manifest.json").read_text())
    return {"manifest": m, "audit": coll.audit(), "ntotal": built.ntotal}


def rows_step(work: Path, store: str, seconds: float) -> dict[str, Any]:
    """The row path (parts upserted one by one, :meth:`~components.indexing.stores.database.DatabaseCollection.write`)
    into a scratch holder beside the versions, for at most ``seconds``; the holder is dropped after."""
    parts = GalleryParts(_versions(work)[1].evaluation_store)
    coll = _store(store, work).collection("scale_rows", work / "rows" / "index")
    coll.create(facts_of(parts, 1))
    model, written, t0 = model_of(parts), 0, time.perf_counter()
    for part in parts.parts():
        coll.write(part, model)
        written += len(part)
        if time.perf_counter() - t0 >= seconds:
            break
    took = time.perf_counter() - t0
    coll.drop()
    return {"ingest_rows_measured": written, "ingest_items_per_s": written / took}


def _child(argv: list[str], kill_at: str | None = None) -> tuple[dict[str, Any] | None, float, float]:
    """Run ``python -m benchmarks.store_scale ARGV``; (its JSON result — None when it was killed at ``kill_at`` —,
    its wall seconds, its peak RSS in MB)."""
    env = {k: v for k, v in os.environ.items() if k != KILL_ENV} | ({KILL_ENV: kill_at} if kill_at else {})
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as sink:
        cmd = [sys.executable, "-m", "benchmarks.store_scale", *argv]
        proc = subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        sink.seek(0)
        out = sink.read()
    wall, rss = time.perf_counter() - t0, usage.ru_maxrss / 1024
    if kill_at and proc.returncode == -signal.SIGKILL:
        return None, wall, rss
    if proc.returncode != 0:
        raise RuntimeError(f"benchmarks.store_scale {' '.join(argv)} failed (exit {proc.returncode}):\n{out[-3000:]}")
    return json.loads(out.strip().splitlines()[-1]), wall, rss


# ------------------------------------------------------------------ switches, here
def _median_s(fn: Callable[[], Any], rounds: int) -> float:
    took = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        took.append(time.perf_counter() - t0)
    return statistics.median(took)


def switches(work: Path, store: str, rounds: int = 5) -> dict[str, Any]:
    """Seal both versions (as their publish steps do), then time the alias flip and the rollback's gate and moves
    (module docstring). Ends with version 1 live."""
    versions = _versions(work)
    rows, seals = [], []
    for v in versions:
        seal, pinned = seal_version(v)
        digest = collection_at(v.evaluation_index).digest()
        rows.append(GalleryPointer(index_path=str(v.evaluation_index), seal_sha256=pinned, index_sha256=digest))
        seals.append(seal)
    live = LivePointer(work / "live")
    gens = [0, 1]

    def move(k: int) -> None:
        index = versions[k].evaluation_index
        live.switch(index, serving_index=str(index))
        collection_at(index).point_alias(gens)

    move(1)

    def flip() -> None:
        for k in (0, 1):
            if store == "faiss":
                live.switch(versions[k].evaluation_index, serving_index=str(versions[k].evaluation_index))
            else:
                collection_at(versions[k].evaluation_index).point_alias(gens)

    checked: list[str] = []

    def rollback(k: int) -> float:
        """Seconds of one rollback to version ``k``: its gate, then the moves."""
        t0 = time.perf_counter()
        checked.append(check_version(k, rows[k]))
        move(k)
        return time.perf_counter() - t0

    alias = _median_s(flip, 2 * rounds) / 2
    back, forward = [], []
    for _ in range(rounds):
        back.append(rollback(0))
        forward.append(rollback(1))
    assert live.serving_index() == versions[1].evaluation_index.resolve()
    return {
        "alias_flip_s": alias,
        "rollback_s": max(statistics.median(back), statistics.median(forward)),
        "rollback_back_s": statistics.median(back),
        "rollback_forward_s": statistics.median(forward),
        "rollback_checked": sorted(set(checked)),
        "seal_files": [len(seal.files) for seal in seals],
    }


# ------------------------------------------------------------------ the run
def run_store_scale(
    items: int,
    store: str,
    out: Path,
    *,
    work: Path,
    dim: int = 128,
    chunk_size: int = 8192,
    row_seconds: float = 300.0,
    log: Callable[[str], None] = print,
) -> Path:
    """The synthetic store run (module docstring) at ``items`` rows in ``store``; returns the report's path.
    ConfigError, one line, for a store it does not know or too few items."""
    if store not in STORES:
        raise ConfigError(f"bench store --store {store!r} is not a gallery store; use one of {', '.join(STORES)}")
    if items < MIN_ITEMS:
        raise ConfigError(
            f"bench store --items {items} is too few for an IVF-PQ index; use --items {MIN_ITEMS} or more"
        )
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    args = ["--work", str(work), "--store", store]
    res: dict[str, Any] = {"items": items, "store": store, "synthetic": True, "dim": dim, "chunk_size": chunk_size}
    res["row_seconds"] = row_seconds
    peak = []
    log(f"corpus: {items} synthetic rows of generation 0, carried into generation 1")
    got, wall, rss = _child(["corpus", *args, "--items", str(items), "--dim", str(dim), "--chunk", str(chunk_size)])
    res |= got | {"corpus_step_s": wall, "corpus_peak_rss_mb": rss}
    peak.append(rss)
    kill = _KILL.get(store, "store.half_written")
    log(f"build version 0, killed at {kill}, then again")
    _, killed_s, rss0 = _child(["build", *args, "--generation", "0"], kill_at=kill)
    got, resumed_s, rss1 = _child(["build", *args, "--generation", "0"])
    extra = got["manifest"].get("extra") or {}
    res |= {
        "resume_killed_at": kill,
        "resume_killed_s": killed_s,
        "resume_s": resumed_s,
        "rows_resumed": extra.get("rows_resumed", 0),
        "rows_after_resume": got["audit"]["rows"],
        "duplicates_after_resume": got["audit"]["duplicates"],
        "unstamped_after_resume": got["audit"]["unstamped"],
    }
    peak += [rss0, rss1]
    log("build version 1")
    got, wall, rss = _child(["build", *args, "--generation", "1"])
    peak.append(rss)
    m = got["manifest"]
    extra = m.get("extra") or {}
    rate = ingest_rate(m)
    res |= {
        "index_build_s": m["build_seconds"],
        "build_step_s": wall,
        "recall_at_10": m["recall_at_10"],
        "recall_queries": m.get("recall_queries"),
        "index": m.get("factory") or {"index_type": m.get("index_type"), **(m.get("params") or {})},
        "write_path": extra.get("write_path", "files"),
    }
    if extra.get("write_path") == "rows":  # Milvus Lite: no bulk path
        res |= {"ingest_items_per_s": rate, "bulk_ingest_items_per_s": None}
    else:
        res |= {"bulk_ingest_items_per_s": rate, "ingest_items_per_s": rate if store == "faiss" else None}
    if store == "lancedb":
        log(f"the row path, at most {row_seconds:.0f} s")
        got, _, rss = _child(["rows", *args, "--seconds", str(row_seconds)])
        peak.append(rss)
        res |= got
    res["peak_rss_mb"] = max(peak)
    log("seal both versions; alias flips and rollbacks")
    q = next(GalleryParts(_versions(work)[1].evaluation_store).parts()).gallery.emb[:1000]
    res["search_qps"] = queries_per_s(open_index(_versions(work)[1].evaluation_index), q)
    res |= switches(work, store)
    store_obj = collection_at(_versions(work)[1].evaluation_index).store
    store_obj.close()
    return write_run_report(out, "scale.json", res, _report)


def _report(r: dict[str, Any]) -> str:
    def f(key: str, fmt: str = "{:.3g}") -> str:
        v = r.get(key)
        return "—" if v is None else fmt.format(v)

    lines = [
        f"# Store benchmark: {r['items']:,} synthetic rows, store {r['store']}",
        "",
        f"Command: `bctflow bench store --items {r['items']} --store {r['store']} --chunk-size {r['chunk_size']} "
        f"--row-seconds {r['row_seconds']:g} --out DIR`",
        "",
        *provenance_lines(r, prefix=""),
        "",
        f"{r['items']:,} synthetic rows (Lorentz, d = {r['dim']}) in {r['store']}; index {r['index']}.",
        "",
        "| measure | value |",
        "|---|---|",
        f"| bulk ingest, items/s | {f('bulk_ingest_items_per_s', '{:,.0f}')} |",
        f"| row-path ingest, items/s | {f('ingest_items_per_s', '{:,.0f}')} |",
        f"| index build, s | {f('index_build_s', '{:.1f}')} |",
        f"| recall@10 (against exact, {r.get('recall_queries')} queries) | {f('recall_at_10')} |",
        f"| search, queries/s (k = 10) | {f('search_qps', '{:,.0f}')} |",
        f"| alias flip, s | {f('alias_flip_s', '{:.4f}')} |",
        f"| rollback (gate + moves), s | {f('rollback_s', '{:.4f}')} ({', '.join(r['rollback_checked'])}) |",
        f"| transform's carry, items/s | {f('carry_items_per_s', '{:,.0f}')} |",
        f"| rows / duplicates after kill -9 at {r['resume_killed_at']} and resume | {r['rows_after_resume']:,} / "
        f"{r['duplicates_after_resume']} (kept {r['rows_resumed']:,}) |",
        f"| peak RSS of a step, MB | {f('peak_rss_mb', '{:,.0f}')} |",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """A child step (module docstring); prints its JSON result as the last line."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.store_scale")
    ap.add_argument("step", choices=["corpus", "build", "rows"])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--items", type=int)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--chunk", type=int, default=8192)
    ap.add_argument("--generation", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=300.0)
    a = ap.parse_args(argv)
    if a.step == "corpus":
        got = corpus_step(a.work, a.items, a.dim, a.chunk)
    elif a.step == "build":
        got = build_step(a.work, a.store, a.generation)
    else:
        got = rows_step(a.work, a.store, a.seconds)
    print(json.dumps(got, default=str))


if __name__ == "__main__":
    main()
