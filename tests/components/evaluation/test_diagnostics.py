"""HBCT health diagnostics (components/evaluation/diagnostics.py): the cone they measure, against closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from components.evaluation.diagnostics import entailment_angles, in_cone_fraction


def _rays(n: int, d: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, d))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_a_new_point_further_out_on_the_same_ray_is_in_the_cone_at_angle_zero():
    u = _rays(50, 8)
    old, new = 1.5 * u, 2.5 * u  # the geodesic from the origin through h_o, continued
    ext, aper = entailment_angles(old, new, 1.0, epsilon=0.1)
    assert ext == pytest.approx(0.0, abs=1e-3)
    # aper = asin(2ε / ‖h_o,s‖) with ‖h_o,s‖ = sinh(√K r)/√K (HBCT Eq. (11)), the same for every item here
    assert aper == pytest.approx(math.degrees(math.asin(0.2 / math.sinh(1.5))), rel=1e-9)
    assert in_cone_fraction(old, new, 1.0, 0.1) == 1.0


def test_a_new_point_turned_away_from_its_old_one_lies_outside_a_narrow_cone():
    u = _rays(50, 8)
    w = _rays(50, 8, seed=1)
    w = w - (w * u).sum(1, keepdims=True) * u  # orthogonal to u
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    old, new = 1.5 * u, 1.5 * w
    ext, aper = entailment_angles(old, new, 1.0, epsilon=0.1)
    assert ext > 45.0 and aper < 10.0  # far outside: the constant pull the review measured
    assert in_cone_fraction(old, new, 1.0, 0.1) == 0.0
    wider = entailment_angles(old, new, 1.0, epsilon=0.5)[1]
    assert wider > aper  # a larger ε opens the cone
