"""The committed common-denominator analysis (benchmarks/common_reference.py) is what the committed records
give: every number of results.json's ``common_reference`` block, report.md's lead section and frontier.md is made
again from the committed rows and records and compared; the per-method numbers are also recomputed here, one scalar
at a time with the library's own :func:`components.evaluation.p_com` / :func:`~components.evaluation.p_up`, and the
floors with the one selection rule — so a hand-edited number, or a wrong vectorised formula, fails."""

from __future__ import annotations

import copy
import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest

from benchmarks.common_reference import FLOORS, KEY, analyse_profile, p_com_common, p_up_common
from benchmarks.common_reference_report import frontier_lines, lead_lines
from benchmarks.report_stats import compared_by
from benchmarks.selection import Scored, select_configuration
from components.evaluation import p_com, p_up
from tests.conftest import REPO

OUT = REPO / "benchmarks" / "results"
#: the profiles whose tables carry the block
PROFILES = sorted({p.parent.parent.name for p in OUT.glob("*/*/results.json") if KEY in json.loads(p.read_text())})


def _plain(x):
    """``x`` as results.json holds it (a JSON round trip)."""
    return json.loads(json.dumps(x, default=str))


def mismatches(committed: dict, made: dict, where: str = "") -> list[str]:
    """Where two JSON values differ (floats within 1e-12 relative: the file holds them to the last digit)."""
    if isinstance(made, dict) and isinstance(committed, dict):
        if set(made) != set(committed):
            return [f"{where}: keys {sorted(set(made) ^ set(committed))}"]
        return [m for k in made for m in mismatches(committed[k], made[k], f"{where}.{k}")]
    if isinstance(made, list) and isinstance(committed, list):
        if len(made) != len(committed):
            return [f"{where}: length {len(committed)} != {len(made)}"]
        return [m for i, (a, b) in enumerate(zip(committed, made)) for m in mismatches(a, b, f"{where}[{i}]")]
    if isinstance(made, float) and isinstance(committed, float):
        return [] if math.isclose(made, committed, rel_tol=1e-12, abs_tol=1e-15) else [f"{where}: {committed}≠{made}"]
    return [] if made == committed else [f"{where}: {committed!r} != {made!r}"]


@pytest.fixture(scope="module", params=PROFILES)
def made(request) -> tuple[str, dict[str, dict]]:
    return request.param, analyse_profile(OUT, request.param, REPO / "params.yaml")


def test_the_equal_budget_tables_carry_the_analysis():
    assert "cpu_equal" in PROFILES


def test_every_committed_number_is_what_the_records_give(made):
    profile, analyses = made
    for scenario, cr in analyses.items():
        d = OUT / profile / scenario
        doc = json.loads((d / "results.json").read_text())
        committed = doc[KEY]
        body = {k: v for k, v in committed.items() if k not in ("command", "provenance")}
        assert mismatches(body, _plain(cr)) == [], scenario
        full = _plain({"command": committed["command"], "provenance": committed["provenance"], **cr})
        report = (d / "report.md").read_text()
        assert "\n".join(lead_lines(full)) in report, f"{scenario}/report.md's lead is not the analysis"
        assert (d / "frontier.md").read_text() == "\n".join(frontier_lines(scenario, full)) + "\n"
        assert (d / "frontier.png").stat().st_size > 10_000


def test_a_hand_edited_number_is_caught(made):
    profile, analyses = made
    scenario, cr = next(iter(analyses.items()))
    committed = json.loads((OUT / profile / scenario / "results.json").read_text())[KEY]
    edited = copy.deepcopy(committed)
    name = next(iter(edited["methods"]))
    edited["methods"][name]["p_com_common"]["mean"] += 1e-6
    assert mismatches(edited, committed) != []
    body = {k: v for k, v in edited.items() if k not in ("command", "provenance")}
    assert mismatches(body, _plain(cr)) != []
    edited["methods"][name]["p_com_common"]["mean"] += 0.01  # a change the report's 3 decimals show
    report = (OUT / profile / scenario / "report.md").read_text()
    assert "\n".join(lead_lines(edited)) not in report


def test_the_per_method_numbers_one_scalar_at_a_time(made):
    """φ* per seed and geometry is the best validation φ* of the pool; each seed's P_com / P_up against it is the
    library's scalar formula on the committed row; mean and sample std as statistics computes them."""
    profile, analyses = made
    for scenario, cr in analyses.items():
        doc = json.loads((OUT / profile / scenario / "results.json").read_text())
        refs = cr["references"]
        for by_geo in refs.values():
            assert by_geo["overall"]["val_map"] == max(r["val_map"] for r in by_geo.values())
        for n, m in cr["methods"].items():
            rows = [r for r in doc["rows"] if r["name"] == n]
            assert m["seeds"] == [r["seed"] for r in rows]
            for i, r in enumerate(rows):
                phi = refs[str(r["seed"])][r["geometry"]]["test_map"]
                assert m["reference"][i]["test_map"] == phi
                pc, _ = p_com(r["cross"]["map"], r["old_self"]["map"], phi)
                assert m["p_com_common"]["values"][i] == pytest.approx(pc, rel=1e-12)
                assert m["p_up_common"]["values"][i] == pytest.approx(p_up(r["self"]["map"], phi), rel=1e-12)
                assert m["abs_gain"]["values"][i] == pytest.approx(r["cross"]["map"] - r["old_self"]["map"])
                phi_o = refs[str(r["seed"])]["overall"]["test_map"]
                pco, _ = p_com(r["cross"]["map"], r["old_self"]["map"], phi_o)
                assert m["p_com_common_overall"]["values"][i] == pytest.approx(pco, rel=1e-12)
            v = m["p_com_common"]["values"]
            assert m["p_com_common"]["mean"] == pytest.approx(statistics.mean(v), rel=1e-12)
            assert m["p_com_common"]["std"] == pytest.approx(statistics.stdev(v), rel=1e-9)


def test_each_paired_test_is_against_the_best_ranked_mean_of_what_the_methods_are_compared_by(made):
    _, analyses = made
    for scenario, cr in analyses.items():
        ranked = {n: m for n, m in cr["methods"].items() if m["ranked"]}
        by = cr["compared_by"]
        assert by == compared_by([m["p_com_common_denominator"]["mean"] for m in ranked.values()])
        for n, m in cr["methods"].items():
            t = m["paired_test"]
            if t is None:
                continue
            mine = dict(zip(m["seeds"], m[by]["values"]))
            means = {o: statistics.mean(dict(zip(r["seeds"], r[by]["values"]))[s] for s in t["seeds"])
                     for o, r in ranked.items() if o != n and set(t["seeds"]) <= set(r["seeds"])}  # fmt: skip
            assert t["other"] == max(means, key=means.get), (scenario, n)
            theirs = dict(zip(ranked[t["other"]]["seeds"], ranked[t["other"]][by]["values"]))
            diff = statistics.mean(mine[s] - theirs[s] for s in t["seeds"])
            assert t["mean_diff"] == pytest.approx(diff, rel=1e-9, abs=1e-12), (scenario, n)


def test_the_floors_re_apply_the_one_rule(made):
    _, analyses = made
    for cr in analyses.values():
        by: dict[str, list[dict]] = {}
        for f in cr["frontier"]:
            by.setdefault(f["method"], []).append(f)
        for floor in FLOORS:
            picks = cr["floors"]["none" if floor is None else f"{floor:g}"]
            for n, cfgs in by.items():
                scored = [Scored(c["val_p_com_common"], c["val_p_up_common"]) for c in cfgs]
                i, rule = select_configuration(scored, -math.inf if floor is None else floor)
                c = cfgs[i]
                assert (picks[n]["head"], picks[n]["weight"], picks[n]["options"], picks[n]["rule"]) == (
                    c["head"],
                    c["weight"],
                    c["options"],
                    rule,
                )
        # the committed choice at floor −0.01 on per-head scores stays the one the table reports
        for n, cfgs in by.items():
            i, _ = select_configuration([Scored(c["val_p_com"], c["val_p_up"]) for c in cfgs], -0.01)
            assert cfgs[i]["chosen"], n


def test_the_vectorised_formulas():
    cross, old, ref = np.array([0.7, 0.6, 0.5]), np.array([0.6, 0.6, 0.5]), np.array([0.8, 0.6, 0.7])
    np.testing.assert_allclose(p_com_common(cross, old, ref), [0.5, np.nan, 0.0])
    np.testing.assert_allclose(p_up_common(np.array([0.88, 0.5]), np.array([0.8, 0.0])), [0.1, np.nan])


def test_a_path_that_is_not_a_profile_folder_is_refused(tmp_path: Path):
    from components.errors import ConfigError

    with pytest.raises(ConfigError):
        analyse_profile(tmp_path, "cpu_equal", REPO / "params.yaml")


def test_another_profiles_references_join_the_pool_and_a_key_that_scored_differently_is_refused():
    from benchmarks.common_reference import Reference, _pooled, _Tables
    from components.errors import ConfigError

    clip = Reference("lorentz", "clip", "k-clip", 0.70, 0.69)
    tanh = Reference("lorentz", "tanh", "k-tanh", 0.79, 0.77)
    lin = Reference("euclidean", "linear", "k-lin", 0.81, 0.79)
    mine = _Tables({}, {}, {}, {(0, "lorentz", "clip"): clip}, {"k-clip": ["ext_class"]})
    pool = {(0, "lorentz", "clip"): clip, (0, "lorentz", "tanh"): tanh, (0, "euclidean", "linear"): lin}
    other = _Tables({}, {}, {}, pool, {"k-clip": ["ext_class"], "k-tanh": ["ext_data"], "k-lin": ["ext_class"]})
    pooled = _pooled(mine, other, "cpu_equal")
    assert pooled.pool == other.pool and pooled.seen["k-clip"] == ["ext_class", "cpu_equal/ext_class"]
    drifted = _Tables({}, {}, {}, {(0, "lorentz", "clip"): Reference("lorentz", "clip", "k-clip", 0.70, 0.68)}, {})
    with pytest.raises(ConfigError, match="φ\\* k-clip scores 0.700000 / 0.690000 here and 0.700000 / 0.680000"):
        _pooled(mine, drifted, "cpu_equal")


def test_tables_without_their_records_are_refused_in_one_line(tmp_path: Path):
    from components.errors import ConfigError

    params = REPO / "params.yaml"
    with pytest.raises(ConfigError, match="no method table with configurations tried under .*; run `bctflow bench"):
        analyse_profile(tmp_path, "cpu_equal", params)
    table = tmp_path / "cpu_equal" / "ext_class"
    table.mkdir(parents=True)
    (table / "results.json").write_text((OUT / "cpu_equal" / "ext_class" / "results.json").read_text())
    (tmp_path / "cpu_equal" / "records").mkdir()
    with pytest.raises(ConfigError, match="0 records match \\(expected exactly one\\); .* rerun the table's command"):
        analyse_profile(tmp_path, "cpu_equal", params)
    # every record, one configuration's with another φ* test score than its siblings': two runs' records mixed
    for f in sorted((OUT / "cpu_equal" / "records").glob("*.json")):
        rec = json.loads(f.read_text())
        if rec["label"] == "l2/linear/λ=0.1/seed=0":
            rec["test"]["ref_self"]["map"] += 0.01
        (tmp_path / "cpu_equal" / "records" / f.name).write_text(json.dumps(rec))
    with pytest.raises(ConfigError, match="φ\\* of seed .* in one record, .* in another; the records under"):
        analyse_profile(tmp_path, "cpu_equal", params)


def test_the_roles_block_lists_seed_0s_old_models_and_phi_star_against_the_criterion():
    """The roles on the committed cpu_equal ext_data table: every seed-0 old model and φ* of each head with its
    last-epoch train accuracy and SGD steps (read here from results.json's base_models), the ones below 0.8 named."""
    doc = json.loads((OUT / "cpu_equal" / "ext_data" / "results.json").read_text())
    roles = doc["common_reference"]["roles"]
    assert roles["criterion"] == 0.8
    want = [
        (head, role, meta["history"][-1]["train_accuracy"], meta["epochs"] * (meta["n_train"] // 128))
        for head, pair in doc["base_models"].items()
        for role, meta in pair.items()
    ]
    assert [(b["head"], b["role"], b["train_accuracy"], b["steps"]) for b in roles["base_seed0"]] == want
    below = sorted(f"{role} {head}" for head, role, acc, _ in want if acc < 0.8)
    assert sorted(roles["below"]) == below == []  # the re-made table: every old model trained to the criterion
    assert {b["role"] for b in roles["base_seed0"]} == {"old", "reference"} and len(roles["base_seed0"]) == 8


def test_a_table_whose_rows_predate_roles_lists_its_further_seeds_parents_from_their_records():
    """cpu_equal_rows' ext_class rows were written before rows carried roles; their records carry them: the lead
    section lists each further seed's old model and φ* from its record, held to the criterion like seed 0's."""
    folder = OUT / "cpu_equal_rows" / "ext_class"
    doc = json.loads((folder / "results.json").read_text())
    assert not any(r.get("roles") for r in doc["rows"])
    roles = doc["common_reference"]["roles"]
    records = [json.loads(p.read_text()) for p in (OUT / "cpu_equal_rows" / "records").glob("*.json")]
    want = set()
    for r in doc["rows"]:
        if r["seed"] == 0:
            continue
        (rec,) = [x for x in records if x["label"].endswith(f"/seed={r['seed']}") and x["label"].startswith(r["name"])
                  and x["test"]["cross"]["map"] == r["cross"]["map"]]  # fmt: skip
        for role, name in (("old", "old"), ("ref", "reference")):
            want.add((f"{r['geometry']}/{r['head']}", name, r["seed"], rec["roles"][role]["train_accuracy"]))
    got = {(f["head"], f["role"], f["seed"], f["train_accuracy"]) for f in roles["further_seeds"]}
    assert got == want and len(want) == 8
    assert roles["below"] == [] and all(a >= 0.8 for *_, a in want)
    assert "the further seeds' old models and φ* as their records hold them" in (folder / "report.md").read_text()
