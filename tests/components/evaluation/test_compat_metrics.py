"""P_com, P_up, the compatibility criterion and AC/AA/ACA (docs/design.md §6)."""

from __future__ import annotations

import numpy as np
import pytest

from components.evaluation import compat_summary, is_compatible, p_com, p_up


def test_p_com_known_numbers():
    value, denom = p_com(cross=0.60, old_self=0.50, ref_self=0.70)
    assert denom == pytest.approx(0.20)
    assert value == pytest.approx(0.5)
    # cross below old self: negative P_com is reported, not clipped
    value, _ = p_com(cross=0.45, old_self=0.50, ref_self=0.70)
    assert value == pytest.approx(-0.25)


def test_p_com_negative_denominator_keeps_its_sign():
    value, denom = p_com(cross=0.55, old_self=0.60, ref_self=0.50)
    assert denom == pytest.approx(-0.10)
    assert value == pytest.approx(0.5)  # (-0.05) / (-0.10)


def test_p_com_small_denominators():
    value, denom = p_com(cross=0.6, old_self=0.5, ref_self=0.5)
    assert value is None and denom == 0.0
    value, denom = p_com(cross=0.6, old_self=0.5, ref_self=0.5 + 5e-13)
    assert value is None and 0 < denom < 1e-12
    # just above the cut-off P_com is defined but explodes: why the denominator is reported
    value, denom = p_com(cross=0.5001, old_self=0.5, ref_self=0.501)
    assert denom == pytest.approx(1e-3)
    assert value == pytest.approx(0.1, rel=1e-6)
    value2, _ = p_com(cross=0.5011, old_self=0.5, ref_self=0.501)
    assert value2 == pytest.approx(1.1, rel=1e-6)


def test_p_up_uses_self_over_reference():
    assert p_up(new_self=0.707, ref_self=0.70) == pytest.approx(0.01)
    assert p_up(new_self=0.693, ref_self=0.70) == pytest.approx(-0.01)
    assert p_up(new_self=0.5, ref_self=0.0) is None


def test_is_compatible_is_strict():
    assert is_compatible(0.51, 0.50) is True
    assert is_compatible(0.50, 0.50) is False
    assert is_compatible(0.49, 0.50) is False


def test_compat_summary_hand_written_3x3():
    nan = np.nan
    c = np.array(
        [
            [50.0, nan, nan],
            [55.0, 60.0, nan],  # C[1][0]=55 > C[0][0]=50: compatible
            [45.0, 65.0, 70.0],  # C[2][0]=45 < 50: not; C[2][1]=65 > 60: compatible
        ]
    )
    out = compat_summary(c)
    assert out["ac"] == pytest.approx(2 / 3)
    assert out["aa"] == pytest.approx((50 + 55 + 60 + 45 + 65 + 70) / 6)
    # paper §4.1: sum of compatible cross entries over ALL T(T-1)/2 pairs
    assert out["aca"] == pytest.approx((55 + 65) / 3)
    assert out["aca_given_compatible"] == pytest.approx((55 + 65) / 2)
    # upper triangle is ignored (the paper stores zeros there)
    assert compat_summary(np.nan_to_num(c, nan=0.0)) == out


def test_compat_summary_edge_cases():
    single = compat_summary(np.array([[42.0]]))
    assert single == {"ac": None, "aa": 42.0, "aca": None, "aca_given_compatible": None}
    none_ok = compat_summary(np.array([[50.0, 0.0], [40.0, 60.0]]))
    assert none_ok["ac"] == 0.0 and none_ok["aca"] == 0.0  # as the paper's Table 1 baselines
    assert none_ok["aca_given_compatible"] is None
    with pytest.raises(ValueError, match="square"):
        compat_summary(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="below the diagonal"):
        compat_summary(np.array([[1.0, 0.0], [np.nan, 1.0]]))
