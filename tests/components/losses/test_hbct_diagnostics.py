"""HBCT's own diagnostics (components/losses/methods/hbct.py, ``HBCT.diagnostics``), asked through the loss catalog as
the evaluation step and the benchmark rows ask them: the cones they measure, against closed forms (HBCT Eq. (11))."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from components.geometry import expmap0
from components.indexing.gallery import GalleryEmbeddings
from components.losses import MethodDiagnostics, choose_alignment


def _rays(n: int, d: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, d))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _gallery(z: np.ndarray, curvature: float = 1.0) -> GalleryEmbeddings:
    n = len(z)
    h = expmap0(torch.from_numpy(z), curvature).numpy()
    return GalleryEmbeddings(
        "lorentz",
        curvature,
        z.astype(np.float32),
        h.astype(np.float32),
        np.arange(n),
        np.arange(n) % 5,
        np.zeros(n, bool),
        np.zeros((n, 5), np.float32),
    )


def _cones(old: np.ndarray, new: np.ndarray, options: dict | None = None, choices: dict | None = None):
    return choose_alignment("hbct", options).diagnostics(choices or {}, _gallery(old), _gallery(new))


def test_a_new_point_further_out_on_the_same_ray_is_in_the_cone_at_angle_zero():
    u = _rays(50, 8)
    d = _cones(1.5 * u, 2.5 * u)  # the geodesic from the origin through h_o, continued
    assert list(d.measured) == ["in_cone_fraction", "entail_angle_deg", "aperture_deg"]
    assert d.measured["entail_angle_deg"] == pytest.approx(0.0, abs=1e-3)
    # aper = asin(2ε / ‖h_o,s‖) with ‖h_o,s‖ = sinh(√K r)/√K (HBCT Eq. (11)), the same for every item here
    assert d.measured["aperture_deg"] == pytest.approx(math.degrees(math.asin(0.2 / math.sinh(1.5))), rel=1e-6)
    assert d.measured["in_cone_fraction"] == 1.0
    assert d.settings == {"epsilon": 0.1}  # the configured default


def test_a_new_point_turned_away_from_its_old_one_lies_outside_a_narrow_cone():
    u = _rays(50, 8)
    w = _rays(50, 8, seed=1)
    w = w - (w * u).sum(1, keepdims=True) * u  # orthogonal to u
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    narrow = _cones(1.5 * u, 1.5 * w).measured
    assert narrow["entail_angle_deg"] > 45.0 and narrow["aperture_deg"] < 10.0  # far outside: a constant pull
    assert narrow["in_cone_fraction"] == 0.0
    wider = _cones(1.5 * u, 1.5 * w, {"epsilon": 0.5}).measured["aperture_deg"]
    assert wider > narrow["aperture_deg"]  # a larger ε opens the cone


def test_the_cones_use_the_epsilon_the_model_trained_with():
    """ε chosen from data (the training's ``choices``) wins over the configured one, which wins over the default."""
    u = _rays(20, 4)
    aperture = lambda eps: math.degrees(math.asin(2 * eps / math.sinh(1.0)))
    configured = _cones(u, 1.2 * u, {"epsilon": 0.3})
    chosen = _cones(u, 1.2 * u, {"epsilon": 0.3, "epsilon_rule": "view_angle"}, {"epsilon": 0.4, "epsilon_reason": "x"})
    assert configured.settings == {"epsilon": 0.3} and chosen.settings == {"epsilon": 0.4}
    assert configured.measured["aperture_deg"] == pytest.approx(aperture(0.3), rel=1e-6)
    assert chosen.measured["aperture_deg"] == pytest.approx(aperture(0.4), rel=1e-6)


def test_a_method_without_diagnostics_reports_none():
    u = _rays(10, 4)
    for method in ("bct", "l2", "independent"):
        assert choose_alignment(method).diagnostics({}, _gallery(u), _gallery(1.1 * u)) == MethodDiagnostics()
