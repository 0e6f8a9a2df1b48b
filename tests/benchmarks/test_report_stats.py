"""A method table's seed statistics (benchmarks/report_stats.py): sample std, the paired test, the references."""

from __future__ import annotations

import statistics

import pytest
from scipy.stats import ttest_rel

from benchmarks.report_stats import (
    compared_by,
    diagnostics_against_references,
    mean_std,
    paired_test,
    seed_statistics,
)
from benchmarks.rows import Row
from benchmarks.selection import CONSTRAINT_NOT_MET


def _row(name: str, seed: int, p_com: float, diagnostics: dict | None = None, head: str = "h") -> Row:
    m = {"map": 0.5, "cmc@1": 0.6}
    cross = {"map": 0.5 + p_com / 10, "cmc@1": 0.6}
    pc = {"map": p_com, "cmc@1": 0.0}
    den = {"map": 0.1, "cmc@1": 0.1}
    r = Row(name, name, "lorentz", "embedding", seed, 0.3, "s", m, cross, m, m, pc, den, {"map": 0.0, "cmc@1": 0.0}, 1)
    r.diagnostics, r.head, r.configurations, r.selection_rule = diagnostics or {}, head, 16, CONSTRAINT_NOT_MET
    return r


def test_the_spread_is_the_sample_std():
    assert mean_std([1.0, 2.0, 4.0]) == f"{statistics.mean([1, 2, 4]):.4f} ± {statistics.stdev([1, 2, 4]):.4f}"
    assert mean_std([0.5, None]) == "0.5000" and mean_std([None]) == "—"


def test_each_method_is_tested_against_the_best_other_method_over_the_same_seeds():
    rows = [_row("a", s, v) for s, v in enumerate([0.30, 0.35, 0.32])]
    rows += [_row("b", s, v) for s, v in enumerate([0.10, 0.20, 0.12])]
    rows += [_row("c", s, v) for s, v in enumerate([0.20, 0.22, 0.25])]
    rows += [_row("d", 0, 0.9)]  # one seed: no pair to test with, never the "best other"
    groups = {n: [r for r in rows if r.name == n] for n in "abcd"}
    test = paired_test("a", groups)
    assert test is not None and test["other"] == "c" and test["seeds"] == [0, 1, 2]
    t, p = ttest_rel([0.30, 0.35, 0.32], [0.20, 0.22, 0.25])
    assert test["t"] == pytest.approx(t) and test["p"] == pytest.approx(p)
    assert test["mean_diff"] == pytest.approx(0.10)
    assert paired_test("c", groups)["other"] == "a" and paired_test("d", groups) is None
    header, body, tests, by = seed_statistics(rows)
    assert by == "p_com_common"  # one denominator (0.1) for every method: P_com compares them
    line = dict(zip(header, body[0]))
    assert (
        line["configs"] == "16"
        and line["selected by"].startswith("**constraint not met**")
        and line["seeds"] == "0, 1, 2"
    )
    assert line["paired t p"] == f"{p:.3f}" and line["vs best other (P_com mAP)"] == "c: +0.1000"
    assert line["gain mAP (cross − old self)"] == mean_std([0.03, 0.035, 0.032])
    assert set(tests) == set("abcd")


def test_methods_over_two_denominators_are_tested_on_their_gain():
    """Two heads' old models give two denominators: a method can lead on P_com (a small denominator) and trail on the
    gain; the table then tests and names the gain, and a denominator below 0.05 alone makes it do so too."""

    def rows(name: str, den: float, gains: list[float]) -> list[Row]:
        out = []
        for seed, g in enumerate(gains):
            r = _row(name, seed, g / den)
            r.cross, r.p_com_den = {"map": 0.5 + g, "cmc@1": 0.6}, {"map": den, "cmc@1": 0.1}
            out.append(r)
        return out

    table = rows("small", 0.02, [0.010, 0.012, 0.011]) + rows("large", 0.2, [0.050, 0.055, 0.052])
    header, _, tests, by = seed_statistics(table)
    assert by == "abs_gain" and "vs best other (gain mAP)" in header
    assert tests["small"]["other"] == "large" and tests["small"]["mean_diff"] == pytest.approx(-0.0413333, rel=1e-4)
    assert paired_test("small", {n: [r for r in table if r.name == n] for n in ("small", "large")})["mean_diff"] > 0
    assert compared_by([0.1, 0.1]) == "p_com_common" and compared_by([0.04, 0.04]) == "abs_gain"
    assert compared_by([0.1, 0.2]) == "abs_gain" and compared_by([0.1, None]) == "abs_gain"


def test_lorentz_diagnostics_are_read_against_the_unaligned_and_the_saturated_model_of_the_same_table():
    diag = {"clip_fraction_new": 0.0, "uncertainty_std_new": 0.06, "uncertainty_std_ref": 0.09}
    rows = [_row("hbct", s, 0.1, diag) for s in (0, 1)]
    tried = [
        {"method": "hbct", "head": "clip", "weight": 0.3, "clip_fraction_new": 0.95, "uncertainty_std_new": 0.03},
        {"method": "hbct", "head": "h", "weight": 0.3, "clip_fraction_new": 0.0, "uncertainty_std_new": 0.06},
        {"method": "bct", "head": "linear", "weight": 0.3},
    ]
    header, body, where = diagnostics_against_references(rows, tried)
    line = dict(zip(header, body[0]))
    assert line["÷ φ* (unaligned)"] == "0.67×" and line["÷ saturated"] == "2.00×"
    assert "hbct on head clip" in where and "0.950" in where
    assert diagnostics_against_references([_row("bct", 0, 0.1)], tried) == ([], [], "")
    # nothing at the bound in any configuration: no saturated reference to divide by
    tried[0]["clip_fraction_new"] = 0.2
    header, body, where = diagnostics_against_references(rows, tried)
    assert dict(zip(header, body[0]))["÷ saturated"] == "—" and "no configuration tried saturated" in where
