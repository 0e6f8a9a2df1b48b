"""``bctflow bench serve``'s workspace up to the backfill's switch — g0 and g1 run, g1's full backfill re-embedded
and published — kept in ``--work``/prepared and, with ``--reuse``, copied back by a later run with the same params
(about 50 minutes of the standard-width profile's run against 2–3 minutes of measurements;
benchmarks/results/serve/README.md)."""

from __future__ import annotations

import datetime
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.scale import fresh_workspace, run_child
from flows.params import params_from_dict

__all__ = ["prepare"]


def _prepare_backfill(home: Path, raw: dict[str, Any]) -> tuple[Any, str, dict[str, float]]:
    """A full backfill with g1: re-embedded and published, not switched. Returns (plan, index dir, metrics)."""
    from flows.backfill import plan_backfill, publish, reembed, start
    from flows.runtime import Workspace

    p = params_from_dict(raw, "serve benchmark params")
    plan = start(plan_backfill(p, Workspace(home), target=1, fraction=1.0))
    reembed(plan, lambda n: None)
    index_dir, metrics = publish(plan)
    return plan, str(index_dir), metrics


def _preparing(raw: dict[str, Any]) -> dict[str, Any]:
    """The params a prepared workspace depends on: all but ``serve:`` (the service's own settings, read from the
    params file when it starts)."""
    return {k: v for k, v in raw.items() if k != "serve"}


def prepare(work: Path, raw: dict[str, Any], reuse: bool, res: dict[str, Any], log: Callable[[str], None]) -> tuple:
    """The workspace up to the backfill's switch (step 1): g0 and g1 run, g1's full backfill published. A copy of it
    is kept in ``work/prepared`` (its plan and timings in ``prepared.json``); with ``reuse``, a kept copy prepared with
    the same params (:func:`_preparing`) is copied back instead of building it again (the paths inside it are the
    workspace's own, so it goes back to the same place). Returns (home, plan, index dir, metrics)."""
    from flows.backfill import BackfillPlan

    kept, info = work / "prepared", work / "prepared" / "prepared.json"
    home, common = fresh_workspace(work, raw)
    if reuse and info.is_file():
        saved = json.loads(info.read_text())
        if _preparing(saved["raw"]) == _preparing(json.loads(json.dumps(raw, default=str))):
            shutil.rmtree(home)
            shutil.copytree(kept / "ws", home, symlinks=True)
            res.update(saved["timings"], prepared_at=saved["prepared_at"], reused_preparation=True)
            log(f"reusing the workspace prepared at {saved['prepared_at']} ({kept})")
            return home, BackfillPlan.model_validate_json(saved["plan"]), saved["index_dir"], saved["metrics"]
        log(f"{kept} was prepared with other params: preparing again")
    timings = {
        "run_g0_s": run_child(["run", *common, "--generation", "g0"], log)["seconds"],
        "run_g1_s": run_child(["run", *common, "--generation", "g1"], log)["seconds"],
    }
    t = time.perf_counter()
    plan, index_dir, metrics = _prepare_backfill(home, raw)
    timings["backfill_prepare_s"] = time.perf_counter() - t
    res.update(timings, reused_preparation=False)
    shutil.rmtree(kept, ignore_errors=True)
    shutil.copytree(home, kept / "ws", symlinks=True)
    body = {
        "raw": raw,
        "plan": plan.model_dump_json(),
        "index_dir": index_dir,
        "metrics": metrics,
        "timings": timings,
        "prepared_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    info.write_text(json.dumps(body, default=str))
    return home, plan, index_dir, metrics
