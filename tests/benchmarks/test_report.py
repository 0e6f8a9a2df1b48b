"""Benchmark reports (benchmarks/report.py): the diagnostics table when rows carry different diagnostics."""

from __future__ import annotations

from benchmarks.report import _diagnostics_table
from benchmarks.rows import Row


def _row(name: str, diagnostics: dict[str, float | None]) -> Row:
    m = {"map": 0.5}
    return Row(name, name, "lorentz", "embedding", 0, 0.3, "fixed", m, m, m, m, {}, {}, {}, 1.0, diagnostics)


def test_a_row_without_a_methods_diagnostics_gets_dashes_in_their_columns():
    """A Lorentz row of a method without cones (here listed first) beside an HBCT row: every column any row has,
    in the order they first appear, "—" where a row lacks one; a row without diagnostics is left out."""
    rows = [
        _row("bct_lorentz", {"clip_fraction_new": 0.5, "uncertainty_old_seen": 0.2}),
        _row("hbct", {"clip_fraction_new": 0.25, "epsilon": 0.1, "in_cone_fraction": 0.0, "uncertainty_old_seen": 0.3}),
        _row("l2", {}),
    ]
    lines = _diagnostics_table(rows)
    assert lines[3] == "| method | seed | clip_fraction_new | uncertainty_old_seen | epsilon | in_cone_fraction |"
    assert lines[5:] == ["| bct_lorentz | 0 | 0.500 | 0.200 | — | — |", "| hbct | 0 | 0.250 | 0.300 | 0.100 | 0.000 |"]
