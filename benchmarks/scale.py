"""``bctflow bench scale``: the production-gallery path at N items, measured end to end (docs/design.md §7.10).

1. builds (once, cached) a synthetic labelled corpus of N images as WebDataset shards
   (:func:`benchmarks.scale_corpus.build_scale_corpus`, Fashion-MNIST under shifts, flips, noise);
2. ``bctflow run`` generation 0 with ``gallery:`` pointing at it (a subprocess: its peak RSS is
   measured), so the corpus is embedded in parts and indexed with ``--index``;
3. embedding speed of the project's path against a bare no-grad forward loop over the same
   DataLoader batches, in this process, one after the other (``embed_vs_bare``);
4. the index, in the gallery store ``--store`` (params ``gallery.store``: FAISS files, a Milvus Lite file or a
   LanceDB folder in the workspace; :mod:`benchmarks.scale_store`): build seconds, ingest rate and recall@10 from
   its manifest, queries/s against an exact flat index over the same vectors, on the same queries, in this
   process; then the same index type, built by the same store, over the cosine space of the same corpus (each
   item's spatial coordinates, unit-normalised), so both geometries are measured at N;
5. a full backfill killed with SIGKILL half-way through the corpus, then resumed: the resumed run's re-embedded item
   count against the items left in unfinished parts; on a database store the resumed run kills itself half-way
   through writing the corpus's rows (crash point ``store.half_written.scale_g1_v1_corpus``) and is run once more;
   then what the store holds is read back from it, and its live alias is moved to generation 0 and back;
6. a 10% uncertainty-ordered partial backfill;
7. exact evaluation of 10k × 10k against a float32 matmul (:func:`benchmarks.eval_speed.measure_exact_eval`).

Writes ``DIR/scale.json`` and ``DIR/report.md``. Keys (seconds ``_s``, megabytes ``_mb``):

* ``run_g0_s`` / ``run_g0_peak_rss_mb``: the generation-0 ``bctflow run`` (train, embed and index the corpus);
  ``gen0_corpus_items_per_s``: its corpus embedding rate, from the part files' times (first part excluded);
* ``store``: the gallery store (params ``gallery.store``); ``index_build_s``, ``recall_at_10``, ``index_factory``:
  from generation 0's corpus index's manifest (FAISS: recall on the held-out half the search-effort tuning never
  saw; a database store: on ``index.recall_queries`` corpus items, each one's own id dropped, against exact search;
  ``index_factory``: the FAISS factory string, or the store's index type and options);
  ``ingest_items_per_s``: rows written into the store per second during that build, from the store's own timing
  (a database store's ``write_seconds`` in its manifest's ``extra``; FAISS files: items over the index build);
  ``search_qps`` / ``flat_search_qps`` / ``qps_vs_flat``: the same 2000 corpus queries, k = 10, through the store's
  index (its own search and re-scoring) and an exact FAISS flat index over the same vectors; ``cosine_*``: the same
  for the unit-normalised spatial coordinates (a cosine gallery of the same corpus, built by the same store);
* ``embed_items_per_s`` / ``bare_items_per_s`` / ``embed_vs_bare``: the project's corpus embedding (loader, model,
  parts written to disk) against a bare no-grad forward loop over the same DataLoader batches, best of two each;
* ``resume_*``: items in finished parts when the backfill was killed, items the rerun embedded, the items outside
  finished parts (expected), the chunk size (at most lost); ``store_write_killed``: the rerun killed itself
  half-way through writing the corpus's rows into the database store (FAISS: false, no such write);
  ``resume_final_reembedded``: items the run after that embedded (0: every part was kept; FAISS: none, no such
  run); ``backfill_items_per_s``: the rerun's own embedding rate (its log line); ``peak_rss_mb``: the largest peak
  RSS of the backfill runs; ``backfill_resumed_s``: the runs after the first kill together;
* ``rows_after_resume`` / ``duplicates_after_resume`` / ``unstamped_rows``: read from the store itself after the
  resumed backfill (:meth:`~components.indexing.backend.Collection.audit`): the live corpus's rows, rows whose id
  another row has too, rows without a generation stamp (or, a database store, without the model mark);
* ``alias_flip_s``: the median of 10 moves of the store's live alias (``VectorStore.point_alias``), from the
  backfill's corpus collection to generation 0's and back (FAISS files: null, their alias is ``live/CURRENT``);
  ``rollback_s``: ``bctflow rollback`` to generation 0's version and forward again, the slower of the two as the
  command reports it (the gate's checks of the restored version, then the switch); ``rollback_switch_s``: the
  slower switch alone (the lineage row, ``live/CURRENT``, the store's alias, the MLflow aliases);
  ``rollback_checked``: how the gate showed the restored versions unchanged (``by its seal``: nothing read that grows
  with the gallery; ``in full: …``: verified, its seconds growing with it); ``switch_check_s`` /
  ``switch_check_files`` / ``switch_check_sealed``: the gate's seal check alone on the live version, the files it
  stats, and whether it showed the version unchanged (:func:`benchmarks.scale_store.switch_check`);
* ``partial_*``: the 10% uncertainty-ordered partial backfill (wall seconds, peak RSS, items, items/s);
  ``partial_vs_full_items_per_s``: its embedding items/s over the full backfill's (``backfill_items_per_s``), same run
  (both rates from the log lines, which leave out the start-up before the first batch: the same for 10% and 100%);
* ``plan_*``: that partial backfill's plan (``bctflow backfill --plan``, which it logs before it starts) against
  what it then took: ``plan_predicted_s`` / ``plan_actual_s``, the embedding phase (every gallery's re-embedding:
  predicted from the rate measured on a sample; actual from its log lines, items ÷ items/s);
  ``plan_predicted_total_s`` (the whole command: before the plan, the plan, the embedding, and Prefect's start-up
  and the publish step as the full backfill's last run took them) / ``plan_actual_total_s`` (its wall seconds);
  ``plan_predicted_map`` / ``plan_actual_map``: the served mAP@R of the evaluation split the plan predicted at 10%
  and the one the backfill's publish step measured (the lineage's backfill event);
* with ``--workers-sweep 1,2``: the full backfill per Dask worker count, one worker killed mid-run, the whole command
  killed on a cluster (:mod:`benchmarks.scale_workers`: ``backfill_items_per_s_workers_<n>``, ``scaling_2_vs_1``,
  ``worker_kill_*``, ``cluster_kill_*``);
* ``eval_10k_s`` / ``eval_10k_matmul_s`` / ``eval_10k_vs_matmul``: exact leave-one-out evaluation of 10k × 10k × 128
  against the float32 matmul of the same scores, in this process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from benchmarks.eval_speed import measure_exact_eval
from benchmarks.profile import load_profile
from benchmarks.report import provenance_lines, write_run_report
from benchmarks.scale_corpus import build_scale_corpus
from benchmarks.scale_store import (
    NAME,
    alias_flip,
    cosine_index,
    ingest_rate,
    search_speed,
    store_gallery,
    switch_check,
)
from benchmarks.scale_workers import items_in_parts, past_half
from benchmarks.scale_workers import workers_sweep as workers_sweep_run
from components.data.catalog import create_dataset
from components.data.sources import WebDatasetSource
from components.faults import KILL_ENV
from components.indexing.backend import collection_at, vector_store
from components.indexing.live import LivePointer
from components.indexing.parts import GalleryParts
from components.indexing.version import GalleryVersion
from components.models import load_model
from flows.backfill import backfill_costs
from flows.gallery import embed_gallery, open_corpus
from flows.params import index_options, params_from_dict
from flows.runtime import Workspace

__all__ = [
    "PROJECT_TO",
    "corpus_rate",
    "fresh_workspace",
    "projection",
    "rollback_said",
    "run_child",
    "run_scale",
    "scale_params",
    "write_scale_report",
]

_BARE_ITEMS = 40_000  # items timed for embed_vs_bare
#: the gallery sizes a report projects its run's own rates to (:func:`projection`)
PROJECT_TO = (10**7, 10**8, 10**9)


def run_child(
    args: list[str],
    log: Callable[[str], None],
    *,
    kill_when: Callable[[int], bool] | None = None,
    kill_at: str | None = None,
) -> dict:
    """Run ``bctflow ARGS`` as a child; returns its wall seconds, peak RSS (MB), whether it was killed and its
    output. Killed by SIGKILL once ``kill_when(pid)`` (asked twice a second; it may act on the child's processes and
    says whether to kill it), or by itself at the crash point ``kill_at``."""
    cmd = [sys.executable, "-m", "bctflow.cli", *args]
    env = {k: v for k, v in os.environ.items() if k != KILL_ENV} | ({KILL_ENV: kill_at} if kill_at else {})
    log("$ " + (f"{KILL_ENV}={kill_at} " if kill_at else "") + "bctflow " + " ".join(args))
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env)
        killed = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if kill_when is not None and not killed and kill_when(proc.pid):
                os.killpg(proc.pid, signal.SIGKILL)
                killed = True
            time.sleep(0.5)
        proc.returncode = os.waitstatus_to_exitcode(status)
        sink.seek(0)
        out = sink.read()
    killed = killed or (kill_at is not None and proc.returncode == -signal.SIGKILL)
    if not killed and proc.returncode != 0:
        raise RuntimeError(f"bctflow {' '.join(args)} failed (exit {proc.returncode}):\n{out[-4000:]}")
    return {"seconds": time.perf_counter() - t0, "peak_rss_mb": usage.ru_maxrss / 1024, "killed": killed, "out": out}


def _parts_rate(folder: Path) -> float:
    """Steady-state items/s from the part files' modification times (first part excluded: start-up)."""
    parts = sorted((folder / "parts").glob("part-*.npz"), key=lambda p: p.stat().st_mtime)
    if len(parts) < 3:
        return float("nan")
    items = sum(len(np.load(p)["ids"]) for p in parts[1:])
    return items / (parts[-1].stat().st_mtime - parts[0].stat().st_mtime)


def _embed_vs_bare(ckpt: Path, raw: dict[str, Any], home: Path, source: WebDatasetSource) -> dict[str, float]:
    """The project's corpus embedding (loader → model → parts on disk) vs a bare no-grad forward loop over the same
    DataLoader batches, interleaved in this process."""
    p = params_from_dict(raw, "scale benchmark params")
    ws = Workspace(home)
    model = load_model(ckpt).eval()
    positions = np.arange(min(_BARE_ITEMS, len(source)))
    size = p.data.image_size

    def bare() -> float:
        t0 = time.perf_counter()
        loader = source.loader(
            positions, batch_size=p.train.eval_batch_size, workers=p.gallery.workers, image_size=size
        )
        with torch.no_grad():
            for images, _, _ in loader:
                model(images.float().div_(255.0))
        return len(positions) / (time.perf_counter() - t0)

    def project(i: int) -> float:
        folder = home / f"embed-check-{i}"
        t0 = time.perf_counter()
        corpus = open_corpus(p, ws)
        assert corpus is not None  # the scale params name the corpus
        embed_gallery(p, corpus, ckpt, folder, generation=0, positions=positions)
        rate = len(positions) / (time.perf_counter() - t0)
        shutil.rmtree(folder)
        return rate

    rates: dict[str, list[float]] = {"bare": [], "project": []}
    for i in range(2):  # interleaved: both see the same machine state
        rates["bare"].append(bare())
        rates["project"].append(project(i))
    b, pr = max(rates["bare"]), max(rates["project"])
    return {"embed_items_per_s": pr, "bare_items_per_s": b, "embed_vs_bare": pr / b}


def fresh_workspace(work: Path, raw: dict) -> tuple[Path, list[str]]:
    """An empty workspace ``work/ws`` and ``work/params.yaml`` holding ``raw``: (home, the CLI's --home/--params)."""
    home = work / "ws"
    subprocess.run(["rm", "-rf", str(home)], check=True)
    home.mkdir(parents=True)
    params_path = work / "params.yaml"
    params_path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return home, ["--home", str(home), "--params", str(params_path)]


def scale_params(
    profile: str, corpus: Path, index_type: str, chunk: int, epochs: int, workers: int | None, store: str
) -> dict[str, Any]:
    _, base = load_profile(profile)
    raw = base.as_dict()
    raw["train"]["epochs"] = epochs
    raw["gallery"] = {**raw["gallery"], "source": "webdataset", "path": str(corpus), **store_gallery(store, index_type)}
    if workers is not None:
        raw["gallery"]["workers"] = workers
    raw["index"] = {**raw["index"], "type": index_type}
    raw["backfill"] = {**raw["backfill"], "chunk_size": chunk}
    raw["generations"] = [
        {"name": "g0", "classes": "all"},
        {"name": "g1", "classes": "all", "alignment": "hbct", "reference": False},
    ]
    params_from_dict(raw, "scale benchmark params")  # fail before any work
    return raw


def run_scale(
    items: int,
    index_type: str,
    out: Path,
    *,
    work: Path,
    corpus_dir: Path | None = None,
    profile: str = "cpu",
    chunk_size: int = 8192,
    epochs: int = 2,
    workers: int | None = None,
    store: str = "faiss",
    workers_sweep: list[int] | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    """Measure the scale path at ``items`` items in the gallery store ``store`` (params ``gallery.store``); write
    ``out/scale.json`` and ``out/report.md``. Returns the md."""
    vector_store(store)  # an unknown store: one line before any work
    out.mkdir(parents=True, exist_ok=True)
    corpus_dir = corpus_dir or work.parent / f"corpus-{items}"
    t0 = time.perf_counter()
    base = create_dataset("fashion_mnist", work.parent / "datasets", download=False).train.decode()
    corpus = build_scale_corpus(corpus_dir, items, base_images=base.images, base_labels=base.labels, image_size=16)
    corpus_s = time.perf_counter() - t0
    log(f"corpus: {len(corpus)} items in {corpus_dir} ({corpus_s:.0f}s)")
    raw = scale_params(profile, corpus_dir, index_type, chunk_size, epochs, workers, store)
    home, common = fresh_workspace(work, raw)
    res: dict[str, Any] = {
        "items": items,
        "store": store,
        "index_type": index_type,
        "chunk_size": chunk_size,
        "profile": profile,
        "workers": raw["gallery"]["workers"],
        "epochs": epochs,
        "workers_sweep": ",".join(map(str, workers_sweep or [])) or None,
    }
    g0 = run_child(["run", *common, "--generation", "g0"], log)
    res["run_g0_s"], res["run_g0_peak_rss_mb"] = g0["seconds"], g0["peak_rss_mb"]
    gen0 = GalleryVersion(home / "generations" / "gen_000")
    res["gen0_corpus_items_per_s"] = _parts_rate(gen0.corpus_store)
    manifest = json.loads((gen0.corpus_index / "manifest.json").read_text())
    res["index_build_s"] = manifest.get("build_seconds")
    res["ingest_items_per_s"] = ingest_rate(manifest)
    res["recall_at_10"] = manifest.get("recall_at_10")
    res["index_factory"] = manifest.get("factory") or f"{manifest['index_type']} {manifest['params']}"
    parts = GalleryParts(gen0.corpus_store)
    res.update(search_speed(gen0.corpus_index, parts))
    res["qps_vs_flat"] = res["search_qps"] / res["flat_search_qps"]
    options = index_options(params_from_dict(raw, "scale benchmark params"))
    res.update(cosine_index(gen0.corpus_index, parts, options, work))
    res["cosine_qps_vs_flat"] = res["cosine_search_qps"] / res["cosine_flat_search_qps"]
    collection_at(gen0.corpus_index).store.close()  # a Milvus Lite file serves one process: the children's turn
    res.update(_embed_vs_bare(gen0.root / "model.pt", raw, home, corpus))
    g1 = run_child(["run", *common, "--generation", "g1"], log)
    res["run_g1_s"] = g1["seconds"]
    # a full backfill with g1, killed half-way through the corpus, then resumed
    work_corpus = GalleryVersion(home / "backfills" / "in_progress").corpus_store / "parts"

    def half(_pid: int) -> bool:
        return past_half(work_corpus, items, chunk_size)

    killed = run_child(["backfill", *common, "--generation", "1"], log, kill_when=half)
    done = items_in_parts(work_corpus)
    # a database store: the resumed run killed by itself half-way through writing the corpus's rows, then run again
    in_write = f"store.half_written.{NAME}_g1_v1_corpus" if store != "faiss" else None
    resumed = run_child(["backfill", *common, "--generation", "1"], log, kill_at=in_write)
    last = run_child(["backfill", *common, "--generation", "1"], log) if in_write else resumed
    res["resume_done_before_kill"] = done
    res["resume_reembedded"], resumed_rate = corpus_rate(resumed["out"])
    res["store_write_killed"] = bool(in_write) and resumed["killed"]
    res["resume_final_reembedded"] = corpus_rate(last["out"])[0] if in_write else None
    res.update(_after_resume(home))
    res.update(_rollback_s(common, log))
    res["resume_expected"] = items - done
    res["resume_lost_at_most"] = chunk_size
    res["backfill_killed"] = killed["killed"]
    res["backfill_items_per_s"] = resumed_rate
    res["peak_rss_mb"] = max(killed["peak_rss_mb"], resumed["peak_rss_mb"], last["peak_rss_mb"])
    res["backfill_resumed_s"] = resumed["seconds"] + (last["seconds"] if in_write else 0.0)
    partial = run_child(["backfill", *common, "--generation", "1", "--fraction", "0.1", "--order", "uncertainty"], log)
    res["partial_backfill_s"] = partial["seconds"]
    res["partial_backfill_peak_rss_mb"] = partial["peak_rss_mb"]
    res["partial_reembedded"], res["partial_backfill_items_per_s"] = corpus_rate(partial["out"])
    res["partial_vs_full_items_per_s"] = res["partial_backfill_items_per_s"] / res["backfill_items_per_s"]
    res.update(_plan_vs_actual(partial["out"]), plan_actual_total_s=partial["seconds"])
    res.update(_planned_map(home, raw))
    if workers_sweep:
        res.update(workers_sweep_run(common, home, workers_sweep, chunk_size, items, run_child, corpus_rate, log))
    ev = measure_exact_eval(10_000, 128)
    res["eval_10k_s"], res["eval_10k_matmul_s"], res["eval_10k_vs_matmul"] = ev["eval_s"], ev["matmul_s"], ev["ratio"]
    res["corpus_build_s"] = corpus_s
    res["torch_threads"] = torch.get_num_threads()
    return write_scale_report(res, out)


def write_scale_report(res: dict[str, Any], out: Path) -> Path:
    """``out/scale.json`` (``res`` and its provenance) and ``out/report.md``; returns the md."""
    return write_run_report(out, "scale.json", res, _report)


def _after_resume(home: Path) -> dict[str, Any]:
    """Read from the store after the killed and resumed backfill: its serving corpus's rows, ids held twice, rows
    without a stamp (:meth:`Collection.audit <components.indexing.backend.Collection.audit>`); then the live alias
    moved to generation 0's corpus and back."""
    pointer = LivePointer(Workspace(home).live_dir)
    live = pointer.serving_index()
    collection = collection_at(live)
    audit = collection.audit()
    flip = alias_flip(live, GalleryVersion(home / "generations" / "gen_000").corpus_index, [0, 1])
    checked = switch_check(GalleryVersion.of_index((pointer.pointer() or {})["index"]).root)
    collection.store.close()
    return {
        "rows_after_resume": audit["rows"],
        "duplicates_after_resume": audit["duplicates"],
        "unstamped_rows": audit["unstamped"],
        "alias_flip_s": flip,
        **checked,
    }


def _rollback_s(common: list[str], log: Callable[[str], None]) -> dict[str, Any]:
    """``bctflow rollback`` to generation 0's gallery version (``--promote 0``) and forward again to the backfill's
    (``--promote 1``): ``rollback_s``, the larger of the two rollbacks' seconds as the command reports them — the
    gate's checks of the restored version and the switch —, ``rollback_switch_s``, the larger of the two switches'
    alone (the lineage row, ``live/CURRENT``, the store's alias, the MLflow aliases); not the process start-up; and
    ``rollback_checked``, how the gates showed the restored versions unchanged (``by its seal`` both times, or the
    first other answer: ``in full: <why not by its seal>``, whose seconds grow with the gallery)."""
    seconds, switch, checked = [], [], []
    for version in (0, 1):
        out = run_child(["rollback", *common, "--to", str(version), "--promote", str(version), "--by", "bench"], log)
        took, switched, how = rollback_said(out["out"])
        seconds.append(took)
        switch.append(switched)
        checked.append(how)
    first = next((c for c in checked if c != "by its seal"), "by its seal")
    return {"rollback_s": max(seconds), "rollback_switch_s": max(switch), "rollback_checked": first}


def rollback_said(output: str) -> tuple[float, float, str]:
    """(seconds, the switch's seconds, how the gate checked the version) from ``bctflow rollback``'s line ``… in place
    of version K; S s (the switch W s); checked HOW[; generation G is production]``, however the console wrapped it."""
    said = " ".join(output.split())
    found = re.search(
        r"; ([\d.]+) s \(the switch ([\d.]+) s\); checked (.*?)(?:; generation \d+ is production)?$", said
    )
    if found is None:
        raise RuntimeError(f"bctflow rollback printed no seconds and check:\n{output[-2000:]}")
    return float(found[1]), float(found[2]), found[3]


def _planned_map(home: Path, raw: dict[str, Any]) -> dict[str, float | None]:
    """The newest backfill's served mAP@R as its plan predicted it and as its publish step then measured it on the
    evaluation split (the lineage's backfill event keeps both)."""
    p = params_from_dict(raw, "scale benchmark params")
    with Workspace(home).lineage(p, readonly=True) as lineage:
        metrics = lineage.backfills()[-1].metrics or {}
    return {"plan_predicted_map": metrics.get("plan_predicted_map"), "plan_actual_map": metrics.get("served_map")}


def corpus_rate(output: str) -> tuple[int, float]:
    """(items a backfill run embedded itself, their items/s), from its log line
    ``serving corpus: N of M selected items embedded now (… at R items/s; …)``."""
    for line in output.splitlines():
        if "serving corpus:" in line and "embedded now" in line:
            rate = line.rsplit(" at ", 1)[1].split()[0] if " at " in line else "nan"
            return int(line.split("serving corpus:")[1].split()[0]), float(rate)
    raise RuntimeError("the backfill printed no 'serving corpus: … embedded now' line:\n" + output[-2000:])


def _plan_vs_actual(output: str) -> dict[str, float]:
    """The plan a backfill logged before it started (``predicted wall time T s (embedding E s + …``) and its embedding
    phase's actual seconds (each gallery's ``N of M selected items embedded now (… at R items/s after S s of
    start-up``: S + N ÷ R)."""
    plan = re.search(r"predicted wall time ([\d.]+) s \(embedding ([\d.]+) s", output)
    done = re.findall(
        r"(?:evaluation gallery|serving corpus): (\d+) of \d+ selected items embedded now .*? at ([\d.]+) items/s "
        r"after ([\d.]+) s of start-up",
        output,
    )
    if plan is None or not done:
        raise RuntimeError("the backfill logged no plan or no 'embedded now' line:\n" + output[-2000:])
    return {  # the actual embedding phase: each gallery's start-up + its items at its rate (the plan predicts both)
        "plan_predicted_s": float(plan[2]),
        "plan_actual_s": sum(float(s) + int(n) / float(r) for n, r, s in done if float(r) > 0),
        "plan_predicted_total_s": float(plan[1]),
    }


def _report(r: dict[str, Any]) -> str:
    rows = [(k, f"{v:.4g}" if isinstance(v, float) else str(v)) for k, v in r.items() if k != "provenance"]
    body = "".join(f"| `{k}` | {v} |\n" for k, v in rows)
    sweep = f" --workers-sweep {r['workers_sweep']}" if r.get("workers_sweep") else ""
    return (
        f"# Scale benchmark: {r['items']:,} items, index {r['index_type']}, store {r['store']}\n\n"
        f"Command: `bctflow bench scale --items {r['items']} --index {r['index_type']} --store {r['store']} "
        f"--chunk-size {r['chunk_size']} --epochs {r['epochs']} --workers {r['workers']}{sweep} --out DIR`\n\n"
        + "".join(f"{line}\n\n" for line in provenance_lines(r, prefix=""))
        + f"| key | value |\n|---|---|\n{body}"
        + projection(r)
    )


def projection(r: dict[str, Any]) -> str:
    """The report's section projecting this run's own rates to :data:`PROJECT_TO` items on one worker
    (:func:`flows.backfill.backfill_costs`): the full backfill at ``backfill_items_per_s``, the partial one at
    ``partial_backfill_items_per_s`` over the same fraction, the index at ``items`` ÷ ``index_build_s``; "" where
    the run lacks one of them. Every route, other worker counts and GPUs: ``bctflow backfill --plan --items N``."""
    need = ("backfill_items_per_s", "partial_backfill_items_per_s", "partial_reembedded", "index_build_s")
    if not all(r.get(k) for k in need):
        return ""
    fraction = r["partial_reembedded"] / r["items"]
    full, partial = backfill_costs(np.array(PROJECT_TO, dtype=np.float64), workers=1, fraction=fraction,
                                   embed=r["backfill_items_per_s"], partial=r["partial_backfill_items_per_s"],
                                   index_build=r["items"] / r["index_build_s"])  # fmt: skip
    rows = "".join(
        f"| {n:,} | {f / 3600:,.1f} | {p / 3600:,.1f} | {b / 3600:,.1f} |\n"
        for n, f, p, b in zip(PROJECT_TO, full.wall_s, partial.wall_s, full.serial_s)
    )
    return (
        f"\n## This run's rates projected to 10⁹ items\n\nOne worker, linear in N (`backfill_items_per_s`, "
        f"`partial_backfill_items_per_s` at fraction {fraction:g}, the index at `items` ÷ `index_build_s`); every "
        "route, W workers and GPUs: `bctflow backfill --plan --items N` (docs/scale.md).\n\n"
        f"| items | full backfill, h | partial backfill ({fraction:g}), h | of which the index build, h |\n"
        f"|---:|---:|---:|---:|\n{rows}"
    )
