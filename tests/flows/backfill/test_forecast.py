"""The backfill's plan (flows/backfill/forecast.py, ``bctflow backfill --plan``): it writes nothing and prints its
lines; its predicted served mAP is what real backfills then measure (100%: a full backfill's gallery; 10% and 50%:
partial backfills' mixed galleries), within 0.02; the lineage's backfill event keeps the prediction beside the
actual; a plan with nothing to re-embed and a ``backfill.target_map`` outside (0, 1] are one line each."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bctflow.cli import app
from components.errors import ConfigError
from flows.backfill.forecast import RUN_KEYS, STEPS, forecast_backfill, forecast_lines, record_command
from flows.backfill.make import plan_backfill
from flows.params import apply_overrides, load_params
from flows.runtime.workspace import Workspace
from tests.helpers import copy_workspace, run_backfill, run_generation

#: the backfills measured against the plan: partial (10%, 50%, uncertainty order) and full
MEASURED = (0.1, 0.5, 1.0)


@pytest.fixture(scope="module")
def story(g0_template, tmp_path_factory) -> tuple[Path, Path]:
    """g0 (classes 0–4, live) and g1 (every class, HBCT-aligned to g0): the plan's workspace. One tiny epoch leaves
    g1 short of the compatibility criterion, so its partial backfills are forced (as an operator would)."""
    home, params = copy_workspace(g0_template, tmp_path_factory.mktemp("plan"))
    run_generation(home, params, {"name": "g1", "classes": "all", "alignment": "hbct", "reference": False})
    return home, params


@pytest.fixture(scope="module")
def backfilled(story, tmp_path_factory) -> dict[float, Path]:
    """Copies of the story's workspace, each after one real backfill with g1 at each fraction of :data:`MEASURED`."""
    home, params = story
    out = {}
    for f in MEASURED:
        out[f] = _copy(home, tmp_path_factory.mktemp(f"backfilled-{f}") / "ws")
        run_backfill(out[f], params, target=1, fraction=f, order="uncertainty", force=f < 1)
    return out


def _files(home: Path) -> dict[str, int]:
    return {str(p.relative_to(home)): p.stat().st_mtime_ns for p in home.rglob("*") if p.is_file()}


def _copy(home: Path, to: Path) -> Path:
    subprocess.run(["cp", "-a", str(home), str(to)], check=True)
    return to


def _plan(home: Path, params: Path, *options: str) -> tuple[int, str]:
    res = CliRunner().invoke(
        app, ["backfill", "--plan", "--generation", "1", "--home", str(home), "--params", str(params), *options]
    )
    return res.exit_code, " ".join(res.output.split())


def test_the_plan_writes_nothing_and_prints_its_lines(story):
    home, params = story
    before = _files(home)
    code, out = _plan(home, params, "--set", "backfill.target_map=0.01")
    assert code == 0, out
    assert _files(home) == before and not (home / "backfills").exists()  # no work folder, the lineage untouched
    assert "backfill plan: generation 1 (full, fraction 1)" in out
    assert "evaluation gallery: 539 items to re-embed at" in out and "items/s (measured on 539," in out
    assert "predicted wall time" in out and "worker-hours on 1 worker" in out
    assert "predicted served mAP@R (uncertainty order, serve.merge none): 0% " in out and " · 100% " in out
    assert "backfill.target_map 0.01: reached at 0%" in out
    code, out = _plan(home, params, "--fraction", "0.25", "--force", "--set", "backfill.target_map=1")
    assert code == 0 and "backfill.target_map 1: not reached (best predicted " in out, out
    assert "at this backfill's 25%: " in out


def test_the_predicted_served_map_is_what_real_backfills_then_measure(story, backfilled):
    home, params = story
    p = load_params(params)
    fc = forecast_backfill(plan_backfill(p, Workspace(home), target=1, fraction=0.5, order="uncertainty", force=True))
    assert fc.fractions == STEPS and fc.order == "uncertainty" and None not in fc.served_map
    g = fc.galleries[0]
    assert (g.name, g.items, g.sample) == ("evaluation", 270, 270) and g.items_per_s > 0 and fc.predicted_s > 0
    predicted = dict(zip(fc.fractions, fc.served_map))
    assert fc.own_map == predicted[0.5] and fc.reaches is None  # no target_map
    for f, ws in backfilled.items():
        with Workspace(ws).lineage(p, readonly=True) as store:
            (event,) = store.backfills()
        m = event.metrics
        # what the backfill measured on the gallery it published (full: the ζ-restarted one), and the lineage keeps
        # the prediction (made on that workspace before it started) beside it and beside its duration
        assert predicted[f] == pytest.approx(m["served_map"], abs=0.02), (f, predicted, m)
        assert m["plan_predicted_map"] == pytest.approx(m["served_map"], abs=0.02)
        assert m["plan_predicted_s"] > 0 and m["plan_items_per_s"] > 0 and event.duration_s > 0
        # and this run's own seconds, which the next plan reads
        assert set(RUN_KEYS) <= set(m) and m["run_items"] == 539 and m["run_publish_s"] > 0, m
    # no earlier backfill in the story's workspace: the rest is the index builds, and the plan says what is left out
    assert fc.rest_s is None and "no earlier backfill run timed them" in fc.rest_note
    assert fc.predicted_s == pytest.approx(fc.before_s + fc.plan_s + fc.work_s) and fc.plan_s > 0


def test_the_next_plan_predicts_the_whole_command_from_the_last_timed_run(story, backfilled):
    """A plan in a workspace whose last backfill timed itself: the whole command is the seconds before the plan (the
    command's start given), the plan's own, the embedding, and that run's Prefect start-up and publish step."""
    import time

    _, params = story
    p = load_params(params)
    ws = backfilled[0.1]
    with Workspace(ws).lineage(p, readonly=True) as store:
        (event,) = store.backfills()
    m = event.metrics
    started = time.time() - 2.0
    plan = plan_backfill(p, Workspace(ws), target=1, fraction=0.5, order="random", force=True)
    fc = forecast_backfill(plan, started)
    assert fc.rest_s == pytest.approx(m["run_startup_s"] + m["run_publish_s"])  # no command.json: run by the flow
    assert f"end 0.0 s as backfill {event.id}'s run took them" in fc.rest_note and "scaled" not in fc.rest_note
    assert 2.0 <= fc.before_s < 60 and fc.plan_s > 0
    assert fc.predicted_s == pytest.approx(fc.before_s + fc.plan_s + fc.embed_s + fc.rest_s)
    line = next(x for x in forecast_lines(plan, fc) if "predicted wall time" in x)
    assert f"the rest {fc.rest_s:.1f} s: Prefect's start-up {m['run_startup_s']:.1f} s, the publish step" in line
    # the command that ran it kept its wall seconds (as `bctflow backfill` does): what followed the publish step too
    timed = sum(m[k] for k in ("run_before_s", "run_startup_s", "run_embed_s", "run_publish_s"))
    record_command(plan, int(event.id), time.time() - timed - 5.0)
    again = forecast_backfill(plan, started)
    assert again.rest_s == pytest.approx(fc.rest_s + 5.0, abs=0.5), (again.rest_s, fc.rest_s)
    assert "and the switch to the command's end 5.0 s as backfill" in again.rest_note


def test_a_plan_with_nothing_to_re_embed_is_one_line(story, backfilled):
    _, params = story
    ws = backfilled[1.0]
    before = _files(ws)
    code, out = _plan(ws, params)
    assert code == 0 and out == (
        "backfill 1 (generation 1, full) is already done: the live gallery is the version it published; nothing to plan"
    )
    assert _files(ws) == before


@pytest.mark.parametrize("value", ["0", "1.5", "-0.2"])
def test_a_target_map_outside_0_1_is_refused(value: str, tiny_params_file: Path):
    with pytest.raises(ConfigError, match=r"backfill\.target_map: target_map must be in \(0, 1\] \(got "):
        apply_overrides(load_params(tiny_params_file), [f"backfill.target_map={value}"])
