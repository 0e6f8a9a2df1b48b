"""PSP / LSP retrieval features (components/models/features.py;
the Simplex paper, Eqs. 2–4, Alg. 1; docs/design.md §5.8)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from components.models.features import simplex_features

LOGITS = np.array([[2.0, 0.5, -1.0], [0.0, 3.0, 1.0]])


def _softmax_row(r):
    e = [math.exp(v) for v in r]
    s = sum(e)
    return [v / s for v in e]


def _centre_normalise(v):
    mean = sum(v) / len(v)
    c = [x - mean for x in v]
    n = math.sqrt(sum(x * x for x in c))
    return [x / n for x in c]


def test_psp_by_hand_all_classes():
    got = simplex_features(LOGITS, "psp")
    assert got.dtype == np.float64 and got.shape == (2, 3)
    for i, row in enumerate(LOGITS.tolist()):
        assert got[i].tolist() == pytest.approx(_centre_normalise(_softmax_row(row)), abs=1e-12)
    # row 0 by the numbers: softmax(2, .5, −1) = (.7856, .1753, .0391) → − 1/3 → /‖·‖ (.5623)
    assert got[0].tolist() == pytest.approx([0.8044, -0.2811, -0.5233], abs=2e-4)


def test_lsp_by_hand_uses_logits_without_softmax():
    got = simplex_features(LOGITS, "lsp")
    for i, row in enumerate(LOGITS.tolist()):
        assert got[i].tolist() == pytest.approx(_centre_normalise(row), abs=1e-12)
    # (2, .5, −1) has mean .5 → (1.5, 0, −1.5)/√4.5
    assert got[0].tolist() == pytest.approx([1 / math.sqrt(2), 0.0, -1 / math.sqrt(2)], abs=1e-12)
    assert not np.allclose(got, simplex_features(LOGITS, "psp"))


@pytest.mark.parametrize("kind", ["psp", "lsp"])
@pytest.mark.parametrize("c_k", [None, 2, 3])
def test_rows_are_unit_and_centred(kind, c_k):
    rng = np.random.default_rng(0)
    z = rng.normal(size=(7, 3)) * 3
    f = simplex_features(z, kind, c_k)
    assert f.shape == (7, 3 if c_k is None else c_k)
    assert np.allclose(np.linalg.norm(f, axis=1), 1.0, atol=1e-12)
    assert np.allclose(f.sum(axis=1), 0.0, atol=1e-12)  # P_(k,k) = I − J/C_k centres each row


def test_p_t_k_applies_softmax_over_all_classes_before_dropping_new_ones():
    """PSP with C_k < C_t: P_(t,k) σ(z^t) — softmax over all C_t outputs, keep the first C_k, centre
    with the mean of those C_k (P_(k,k) = I − J/C_k), normalise."""
    z = np.array([[1.0, 2.0, 0.5, 4.0, -1.0], [0.0, -2.0, 1.0, 3.0, 3.0]])
    c_k = 3
    got = simplex_features(z, "psp", c_k)
    for i, row in enumerate(z.tolist()):
        sm = _softmax_row(row)[:c_k]
        assert got[i].tolist() == pytest.approx(_centre_normalise(sm), abs=1e-12)
        # centring over all C_t classes and truncating afterwards (the wrong order) is a different vector
        full = _softmax_row(row)
        mean_t = sum(full) / len(full)
        wrong = [x - mean_t for x in full[:c_k]]
        nw = math.sqrt(sum(x * x for x in wrong))
        wrong = [x / nw for x in wrong]
        assert max(abs(a - b) for a, b in zip(got[i].tolist(), wrong)) > 1e-2
        # note: a softmax over the first C_k logits only gives the *same* feature — it differs from
        # σ(z^t)[:C_k] by the positive factor Σ_{c≤C_k} e^z / Σ_c e^z, which centring and normalising remove
        short = _centre_normalise(_softmax_row(row[:c_k]))
        assert got[i].tolist() == pytest.approx(short, abs=1e-12)
        assert sm != pytest.approx(_softmax_row(row[:c_k]), abs=1e-3)  # ...although the probabilities differ
    # explicit matrix form of Eq. 4: P_(t,k) = [I − J/C_k | 0]
    p = np.hstack([np.eye(c_k) - np.ones((c_k, c_k)) / c_k, np.zeros((c_k, 2))])
    sm = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    h = sm @ p.T
    assert np.allclose(got, h / np.linalg.norm(h, axis=1, keepdims=True), atol=1e-12)
    # LSP: the dropped logits play no role
    lsp = simplex_features(z, "lsp", c_k)
    assert np.allclose(lsp, simplex_features(z[:, :c_k], "lsp"), atol=1e-12)


def test_psp_is_stable_for_huge_logits():
    z = np.array([[1000.0, 999.0, -1000.0], [-5000.0, 0.0, 5000.0]])
    f = simplex_features(z, "psp")
    assert np.isfinite(f).all()
    assert f[0].tolist() == pytest.approx(_centre_normalise(_softmax_row([1.0, 0.0, -2000.0])), abs=1e-12)


def test_invalid_inputs():
    with pytest.raises(ValueError, match="extend"):
        simplex_features(LOGITS, "psp", 4)  # cannot project 3 classes onto 4
    with pytest.raises(ValueError):
        simplex_features(LOGITS, "psp", 0)
    with pytest.raises(ValueError, match="kind"):
        simplex_features(LOGITS, "softmax")
