"""``bctflow bench scale --workers-sweep 1,2``: the full backfill on a Dask cluster of each worker count, in one run
(docs/design.md §7.6 "On a cluster"), and one worker killed mid-backfill.

Runs after the scale benchmark's own backfills, on its workspace (generation 1 already embeds the gallery): one full
backfill per worker count ``n`` (``backfill.workers=n``, ``backfill.threads=1``: a LocalCluster of n processes × one
torch thread), one after another, each a request of its own (``--seed``; a full backfill re-embeds every item whatever
the seed, and the same request again would be "already done"). Keys:

* ``backfill_items_per_s_workers_<n>``: the corpus embedding rate of the run with n workers (its own log line);
* ``scaling_2_vs_1``: 2 workers' rate ÷ 1 worker's (both swept);
* ``worker_kill_rows`` / ``worker_kill_items`` / ``worker_kill_duplicates``: a 2-worker backfill in which one
  worker process was killed (SIGKILL) once half the corpus's parts were written — rows in the published corpus store,
  the corpus's items, ids stored twice;
* ``cluster_kill_*``: a 2-worker backfill whose whole command (scheduler and workers) was killed once half the
  corpus's parts were written, then the same command: items in finished parts at the kill, items the rerun embedded
  and the items outside finished parts (expected: equal; the chunks the workers were writing are all that is lost),
  rows and ids stored twice in the published corpus.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from components.indexing.live import LivePointer
from components.indexing.parts import GalleryParts
from components.indexing.version import GalleryVersion
from flows.runtime import Workspace

__all__ = ["items_in_parts", "past_half", "workers_sweep"]

Run = Callable[..., dict[str, Any]]


def _dask_workers(pid: int) -> list[psutil.Process]:
    """The Dask worker processes under the command ``pid`` (a LocalCluster's nannies spawn them)."""
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [k for k in kids if "spawn_main" in " ".join(_cmdline(k))]


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def past_half(parts: Path, items: int, chunk_size: int) -> bool:
    """Whether the part folder ``parts`` of a store of ``items`` items holds half its parts of ``chunk_size``
    (at least one): where the benchmark kills a backfill."""
    return parts.is_dir() and len(list(parts.glob("part-*.npz"))) >= max(1, items // chunk_size // 2)


def items_in_parts(parts: Path) -> int:
    """The items the finished parts in the part folder ``parts`` hold."""
    return sum(len(np.load(f)["ids"]) for f in parts.glob("part-*.npz"))


def _duplicates(ids: np.ndarray) -> int:
    """Ids held by more than one row."""
    return int(len(ids) - len(np.unique(ids)))


def _live_corpus(home: Path) -> GalleryParts:
    """The part store the live gallery version serves from (its corpus)."""
    index = LivePointer(Workspace(home).live_dir).pointer()["index"]  # paths resolved by the pointer
    return GalleryParts(GalleryVersion.of_index(index).serving().gallery)


def workers_sweep(
    common: list[str],
    home: Path,
    counts: list[int],
    chunk_size: int,
    items: int,
    run: Run,
    reembedded: Callable[[str], tuple[int, float]],
    log: Callable[[str], None],
) -> dict[str, Any]:
    """The sweep and the worker kill (module docstring); ``run``: the scale benchmark's ``_bctflow``."""
    res: dict[str, Any] = {}
    rates = {}
    for i, n in enumerate(counts):
        args = ["backfill", *common, "--generation", "1", "--seed", str(100 + i)]
        out = run([*args, "--set", f"backfill.workers={n}", "--set", "backfill.threads=1"], log)
        rates[n] = reembedded(out["out"])[1]
        res[f"backfill_items_per_s_workers_{n}"] = rates[n]
    if 1 in rates and 2 in rates:
        res["scaling_2_vs_1"] = rates[2] / rates[1]
    parts = GalleryVersion(home / "backfills" / "in_progress").corpus_store / "parts"
    killed: list[int] = []

    def kill_one_worker(pid: int) -> bool:
        if not killed and past_half(parts, items, chunk_size):
            victims = _dask_workers(pid)
            if victims:
                victims[0].send_signal(signal.SIGKILL)
                killed.append(victims[0].pid)
        return False  # the command itself runs on

    args = ["backfill", *common, "--generation", "1", "--seed", "199", "--set", "backfill.workers=2"]
    run([*args, "--set", "backfill.threads=1"], log, kill_when=kill_one_worker)
    ids = _live_corpus(home).column("ids")
    res["worker_killed"] = bool(killed)
    res["worker_kill_rows"], res["worker_kill_items"] = len(ids), items
    res["worker_kill_duplicates"] = _duplicates(ids)
    res.update(_command_kill(common, home, chunk_size, items, run, reembedded, log, parts))
    return res


def _command_kill(
    common: list[str],
    home: Path,
    chunk_size: int,
    items: int,
    run: Run,
    reembedded: Callable[[str], tuple[int, float]],
    log: Callable[[str], None],
    parts: Path,
) -> dict[str, Any]:
    """A 2-worker backfill whose whole command (its LocalCluster's scheduler and workers with it) is SIGKILLed once
    half the corpus's parts are written, then the same command: what it re-embedded against the items outside the
    finished parts."""
    args = ["backfill", *common, "--generation", "1", "--seed", "299", "--set", "backfill.workers=2"]
    args += ["--set", "backfill.threads=1"]
    killed = run(args, log, kill_when=lambda _pid: past_half(parts, items, chunk_size))
    if not killed["killed"]:  # it finished before half its parts were seen: nothing to resume
        return {"cluster_command_killed": False}
    done = items_in_parts(parts)
    again = run(args, log)
    ids = _live_corpus(home).column("ids")
    return {
        "cluster_command_killed": True,
        "cluster_kill_done_before": done,
        "cluster_kill_reembedded": reembedded(again["out"])[0],
        "cluster_kill_expected": items - done,
        "cluster_kill_rows": len(ids),
        "cluster_kill_duplicates": _duplicates(ids),
    }
