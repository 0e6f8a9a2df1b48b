"""The one selection rule of the method tables (benchmarks/selection.py), pinned on synthetic tables."""

from __future__ import annotations

import pytest

from benchmarks.selection import CONSTRAINT_NOT_MET, MAX_P_COM, Scored, select_configuration


def _table(*rows: tuple[float | None, float | None]) -> list[Scored]:
    """Configurations as (validation mAP P_com, validation mAP P_up)."""
    return [Scored(c, u) for c, u in rows]


def test_the_best_p_com_among_the_configurations_that_keep_p_up_wins():
    table = _table(
        (0.90, -0.05),  # the best P_com, but it costs the new model 5%: excluded
        (0.40, -0.01),  # on the floor: allowed
        (0.30, +0.02),  # the best self quality (P_up): not chosen, P_com decides among those allowed
        (0.35, 0.00),
    )
    assert select_configuration(table) == (1, MAX_P_COM)
    assert select_configuration(table, p_up_floor=-0.10) == (0, MAX_P_COM)


def test_when_no_configuration_meets_the_constraint_the_best_p_up_is_taken_and_flagged():
    table = _table((0.90, -0.05), (0.10, -0.02), (None, -0.03))
    assert select_configuration(table) == (1, CONSTRAINT_NOT_MET)


def test_self_quality_alone_never_decides_while_a_configuration_keeps_p_up():
    """The configuration with the best P_up (self quality relative to φ*) loses to any allowed one with a better
    P_com; an undefined P_com (None: φ* no better than the old model) never beats a defined one."""
    table = _table((None, 0.05), (-0.20, 0.04), (-0.10, -0.005))
    assert select_configuration(table) == (2, MAX_P_COM)


def test_ties_keep_the_grid_order_and_an_empty_table_is_refused():
    assert select_configuration(_table((0.5, 0.0), (0.5, 0.0))) == (0, MAX_P_COM)
    assert select_configuration(_table((0.1, -0.5), (0.2, -0.5))) == (0, CONSTRAINT_NOT_MET)
    assert select_configuration(_table((0.3, None), (0.2, -0.5))) == (1, CONSTRAINT_NOT_MET)
    with pytest.raises(ValueError, match="at least one"):
        select_configuration([])
