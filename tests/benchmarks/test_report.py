"""Benchmark reports (benchmarks/report.py): the diagnostics table when rows carry different diagnostics; every
role's training against the train criterion."""

from __future__ import annotations

from dataclasses import replace

from benchmarks.report import _diagnostics_table, roles_table
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


def test_every_roles_training_is_listed_against_the_criterion_and_one_below_it_is_named():
    def role(acc: float, steps: int) -> dict[str, float]:
        return {"train_accuracy": acc, "epochs": 12, "steps": steps, "n_train": 900}

    good = {"old": role(0.88, 420), "ref": role(0.86, 840), "new": role(0.9, 840)}
    rows = [
        replace(_row("bct", {}), roles=good, head="linear"),
        replace(_row("hbct", {}), roles={**good, "old": role(0.436, 252)}, seed=1),
        _row("lsp", {}),  # a record made before roles were recorded
    ]
    lines = roles_table(rows, 0.8)
    assert (
        lines[1]
        == "## Every role's training (criterion: last-epoch train accuracy ≥ 0.8, held by the old models and φ*)"
    )
    assert lines[5] == "| bct | 0 | linear | 0.880 | 420 | 0.860 | 840 | 0.900 | 840 |"
    assert lines[6] == "| hbct | 1 | — | 0.436 **below** | 252 | 0.860 | 840 | 0.900 | 840 |"
    assert lines[7] == "| lsp | 0 | — | not recorded | — | not recorded | — | not recorded | — |"
    assert lines[-1] == "Roles below the criterion: 1: hbct seed 1 old."
    assert roles_table(rows[:1], 0.8)[-1] == "Roles below the criterion: none."
    assert roles_table([rows[2]], 0.8) == []  # a table whose records all predate role records: no section
    # a budget study holds only the old model: φ* and the new model have the budget studied, and are not marked
    weak = {"old": role(0.82, 420), "ref": role(0.3, 84), "new": role(0.4, 84)}
    budget = roles_table([replace(_row("bct", {}), roles=weak, head="linear")], 0.8, ["old"])
    assert budget[1] == "## Every role's training (criterion: last-epoch train accuracy ≥ 0.8, held by the old models)"
    assert budget[5] == "| bct | 0 | linear | 0.820 | 420 | 0.300 | 84 | 0.400 | 84 |"
    assert budget[-1] == "Roles below the criterion: none."
    assert (
        roles_table([replace(_row("bct", {}), roles=weak)], 0.8)[-1] == "Roles below the criterion: 1: bct seed 0 ref."
    )
