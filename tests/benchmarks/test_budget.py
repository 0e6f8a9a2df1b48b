"""The budget study (benchmarks/budget.py, budget_report.py): a real tiny run on digits, its summary against one
common φ* per point and seed, the points not run here, and its refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from bctflow.cli import app
from benchmarks.budget import _order, budget_points, run_budget, summarise_budget
from benchmarks.budget_report import render, write_budget
from benchmarks.profile import load_profile
from components.errors import ConfigError
from components.evaluation import p_com, p_up
from tests.conftest import REPO

ARCH = {"backbone": "resnet18", "backbone_kwargs": {"channels": [8, 8, 16, 16]}}
PROFILE = {
    "description": "tiny budget study",
    "params": {
        "data": {"dataset": "digits", "max_test_per_class": 15},
        "model": {"backbone_kwargs": {"channels": [8, 8, 16, 16]}, "embed_dim": 16},
        "train": {"batch_size": 128},
    },
    "bench": {
        "seeds": [0],
        "extra_seed_methods": ["all"],
        "old_arch": ARCH,
        "new_arch": ARCH,
        "train_criterion": 0.3,
        "criterion_roles": ["old"],
        "methods": [
            {"name": "bct", "method": "bct", "weight": 1.0},
            {"name": "hbct", "method": "hbct", "geometry": "lorentz", "weight": 0.3},
        ],
    },
    "budget": {
        "scenario": "ext_class",
        "points": [
            {"per_class": 30, "epochs": 1, "seeds": [0, 1]},
            {"per_class": 40, "epochs": 2, "where": "gpu"},
        ],
    },
}


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The tiny profile's CPU point trained for real (2 seeds × old, φ* of 2 heads + 2 methods); (profile, out)."""
    root = tmp_path_factory.mktemp("budget")
    profile = root / "tiny_budget.yaml"
    profile.write_text(yaml.safe_dump(PROFILE, allow_unicode=True))
    out = root / "results"
    kw = dict(out=out, home=root / "home", params_path=REPO / "params.yaml", command="test", log=lambda _m: None)
    written = run_budget(str(profile), where="cpu", **kw)
    assert [p.parent.name for p in written] == ["ext_class-n30-e1"]
    return profile, out


def test_every_entry_is_measured_against_the_best_validation_phi_star_of_its_point_and_seed(tiny_study):
    profile, out = tiny_study
    doc = summarise_budget(out, str(profile), REPO / "params.yaml", "test")
    table = json.loads((out / "tiny_budget" / "ext_class-n30-e1" / "results.json").read_text())
    rows = table["rows"]
    assert {(e["budget"], e["method"]) for e in doc["entries"]} == {("n30-e1", "bct"), ("n30-e1", "hbct")}
    measured, gpu = doc["points"]
    assert measured["status"] == "measured" and gpu["status"] == "not run: needs a lent GPU: scripts/gpu_budget.sh"
    for seed in (0, 1):
        mine = [r for r in rows if r["seed"] == seed]
        best = max(mine, key=lambda r: r["val"]["ref_self"]["map"])  # the heads' φ* by validation mAP
        ref = measured["references"][str(seed)]
        assert (ref["head"], ref["geometry"], ref["test"]) == (best["head"], best["geometry"], best["ref_self"]["map"])
        for e in doc["entries"]:
            (r,) = [r for r in mine if r["name"] == e["method"]]
            i = e["seeds"].index(seed)
            want = p_com(r["cross"]["map"], r["old_self"]["map"], ref["test"])[0]
            assert e["p_com_common"]["values"][i] == pytest.approx(want)
            assert e["p_up_common"]["values"][i] == pytest.approx(p_up(r["self"]["map"], ref["test"]))
            assert e["abs_gain"]["values"][i] == pytest.approx(r["cross"]["map"] - r["old_self"]["map"])
            assert e["p_com_common_denominator"]["values"][i] == pytest.approx(ref["test"] - r["old_self"]["map"])
            assert e["steps"] == r["roles"]["new"]["steps"]
    for r in rows:  # the old model is held to the criterion (or trained to 8x its epochs), φ* keeps the budget
        assert r["roles"]["old"]["train_accuracy"] >= 0.3 or r["roles"]["old"]["epochs"] == 8
        assert r["roles"]["ref"]["epochs"] == r["roles"]["new"]["epochs"] == 1
    assert measured["roles"]["old"]["min_train_accuracy"] == min(r["roles"]["old"]["train_accuracy"] for r in rows)
    dens = [e["p_com_common_denominator"]["mean"] for e in doc["entries"]]
    one = max(dens) - min(dens) <= 1e-9 and min(dens) >= 0.05  # one denominator, a φ* better than the old models
    by = "p_com_common" if one else "abs_gain"
    want_order = sorted(doc["entries"], key=lambda e: -e[by]["mean"])
    assert doc["ordering"] == {"n30-e1": {"by": by, "methods": [e["method"] for e in want_order]}}


def test_the_report_shows_each_point_and_says_which_could_not_run(tiny_study):
    profile, out = tiny_study
    md = write_budget(out, str(profile), REPO / "params.yaml", "bctflow bench budget")
    text = md.read_text()
    doc = json.loads((md.parent / "budget.json").read_text())
    assert (md.parent / "budget.png").stat().st_size > 0
    assert "provenance: code" in text and doc["provenance"]["commit"]
    e = next(e for e in doc["entries"] if e["method"] == "bct")
    assert f"{e['p_com_common']['mean']:.3f} ± {e['p_com_common']['std']:.3f}" in text
    assert "n40-e2 (seeds [0]): not run: needs a lent GPU" in text
    assert "- n30-e1 (seeds [0, 1], " in text


def test_a_point_whose_further_seeds_have_not_run_says_which_it_holds(tiny_study, tmp_path: Path):
    """The profile asks three seeds of a point whose table holds two: the summary measures the two and says so."""
    _, out = tiny_study
    more = {**PROFILE, "budget": {**PROFILE["budget"], "points": [{"per_class": 30, "epochs": 1, "seeds": [0, 1, 2]}]}}
    profile = tmp_path / "tiny_budget.yaml"  # the same name: the same tables under out
    profile.write_text(yaml.safe_dump(more, allow_unicode=True))
    doc = summarise_budget(out, str(profile), REPO / "params.yaml", "test")
    (point,) = doc["points"]
    assert (point["seeds"], point["seeds_measured"]) == ([0, 1, 2], [0, 1])
    assert all(e["seeds"] == [0, 1] for e in doc["entries"])
    assert "- n30-e1 (seeds [0, 1] of [0, 1, 2] asked, " in "\n".join(render(doc))


def test_the_ordering_names_the_pairs_that_swap_between_budgets():
    def entry(budget: str, method: str, value: float) -> dict:
        stats = {"mean": value, "std": None, "values": [value]}
        config = {"head": "h", "weight": 1.0, "options": {}}
        return {"budget": budget, "method": method, "steps": 10, "config": config, "seeds": [0],
                "p_com_common": stats, "p_up_common": stats, "abs_gain": stats,
                "p_com_common_denominator": stats}  # fmt: skip

    doc = {
        "profile": "p",
        "scenario": "ext_class",
        "command": "c",
        "reference_rule": "r",
        "points": [],
        "entries": [entry("a", "x", 0.3), entry("a", "y", 0.2), entry("b", "x", 0.1), entry("b", "y", 0.4)],
        "ordering": {
            "a": {"by": "p_com_common", "methods": ["x", "y"]},
            "b": {"by": "abs_gain", "methods": ["y", "x"]},
        },
    }
    lines = render(doc)
    assert "- a → b: swapped: x / y" in lines and "- b: y > x (by abs_gain)" in lines
    doc["ordering"]["b"]["methods"] = ["x", "y"]
    assert "- a → b: the same order" in render(doc)


def test_a_profile_without_budget_points_and_an_unknown_where_are_refused():
    prof, _ = load_profile("cpu_equal")
    with pytest.raises(ConfigError, match="has no budget: section; use --profile cpu_budget"):
        budget_points(prof, "cpu")
    prof, _ = load_profile("cpu_budget")
    with pytest.raises(ConfigError, match="--where 'tpu': use one of cpu, gpu, all"):
        budget_points(prof, "tpu")
    assert [p.tag for p in budget_points(prof, "gpu")] == ["n1000-e12", "n3000-e24", "n6000-e48"]
    assert [p.tag for p in budget_points(prof, "cpu")] == ["n100-e12", "n100-e24", "n200-e12"]
    result = CliRunner().invoke(app, ["bench", "budget", "--profile", "cpu_equal", "--report-only"])
    assert result.exit_code == 2
    assert "has no budget: section" in result.output and "Traceback" not in result.output


def test_a_table_without_validation_scores_is_refused_before_anything_is_written(tiny_study, tmp_path: Path):
    profile, out = tiny_study
    copy = tmp_path / "results" / "tiny_budget" / "ext_class-n30-e1"
    copy.mkdir(parents=True)
    doc = json.loads((out / "tiny_budget" / "ext_class-n30-e1" / "results.json").read_text())
    for r in doc["rows"]:
        r.pop("val")
    (copy / "results.json").write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="row bct seed 0 has no validation scores .* run bctflow bench budget again"):
        write_budget(tmp_path / "results", str(profile), REPO / "params.yaml", "test")
    assert not (tmp_path / "results" / "tiny_budget" / "budget").exists()


def test_rows_over_two_denominators_are_ordered_by_their_gain():
    """Two geometries' old models give two denominators: P_com (the ratio) and the gain (its numerator) then disagree,
    and only the gain orders the methods; with one denominator P_com orders them."""

    def entry(method: str, gain: float, den: float) -> dict:
        stat = lambda v: {"mean": v}
        return {"budget": "b", "method": method, "abs_gain": stat(gain), "p_com_common": stat(gain / den),
                "p_com_common_denominator": stat(den)}  # fmt: skip

    two = [entry("paper", -0.257, 0.0717), entry("best", -0.192, 0.0511)]  # P_com -3.58 > -3.75; gains the other way
    assert _order(two, "b") == {"by": "abs_gain", "methods": ["best", "paper"]}
    one = [entry("x", 0.05, 0.1), entry("y", 0.04, 0.1)]
    assert _order(one, "b") == {"by": "p_com_common", "methods": ["x", "y"]}
