"""Generic health diagnostics of Lorentz generations (components/evaluation/diagnostics.py), against closed forms:
u = 1 − tanh(√K‖z‖) (HBCT Eq. (10))."""

from __future__ import annotations

import math

import numpy as np
import pytest

from components.evaluation.diagnostics import clip_fraction, uncertainty_seen_unseen, uncertainty_std


def test_clip_fraction_is_the_share_on_the_bound():
    assert clip_fraction(np.array([True, False, False, True])) == 0.5
    assert math.isnan(clip_fraction(np.zeros(0, bool)))


def test_uncertainty_by_seen_and_unseen_classes():
    z = np.zeros((4, 3))
    z[:, 0] = [0.5, 1.0, 2.0, 0.0]  # radii
    labels = np.array([0, 0, 1, 2])
    seen, unseen = uncertainty_seen_unseen(z, labels, [0], curvature=4.0)
    u = lambda r: 1.0 - math.tanh(2.0 * r)  # √K = 2
    assert seen == pytest.approx((u(0.5) + u(1.0)) / 2) and unseen == pytest.approx((u(2.0) + u(0.0)) / 2)
    assert uncertainty_seen_unseen(z, labels, [0, 1, 2], curvature=4.0)[1] is None  # no unseen item


def test_uncertainty_spread_is_zero_when_every_radius_is_the_same():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(30, 5))
    on_sphere = 1.2 * v / np.linalg.norm(v, axis=1, keepdims=True)
    assert uncertainty_std(on_sphere, 1.0) == pytest.approx(0.0, abs=1e-12)
    radii = np.array([0.2, 1.0])
    z = np.stack([[r, 0.0] for r in radii])
    assert uncertainty_std(z, 1.0) == pytest.approx(np.std(1.0 - np.tanh(radii)))
