"""The geometry seam (components/geometry/space.py, docs/design.md §2.6): the space catalog, each space's vector
forms and round trips, its query form against its exact scores, and the refusal of names it does not know."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from components.errors import ConfigError, DataError
from components.geometry import (
    Euclidean,
    Lorentz,
    Space,
    create_space,
    expmap0,
    list_spaces,
    pairwise_geodesic_distance,
    register_space,
)
from components.geometry.space import SPACES
from components.plugins import declared_names

RNG = np.random.default_rng(0)
SPACE_CASES = [("euclidean", 1.0), ("lorentz", 1.0), ("lorentz", 0.5), ("lorentz", 2.0)]


def _features(space: Space, n: int = 12, d: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(z (n, d), emb (n, D)) as a model of ``space`` gives them: tangent vectors and their points / unit rows."""
    z = np.random.default_rng(seed).normal(size=(n, d)) * 0.6
    emb = (
        expmap0(torch.from_numpy(z), space.curvature).numpy()
        if space.extra_width
        else z / np.linalg.norm(z, axis=1, keepdims=True)
    )
    return z, emb


# ------------------------------------------------------------------- catalog
def test_the_catalog_lists_and_makes_every_space_and_reads_the_names_without_importing():
    assert list_spaces() == ["euclidean", "lorentz"]
    assert declared_names("components.geometry.spaces", "register_space") == list_spaces()
    assert isinstance(create_space("euclidean"), Euclidean) and isinstance(create_space("lorentz", 0.5), Lorentz)
    assert create_space("lorentz", 0.5) == Lorentz(0.5) != Lorentz(1.0) and create_space("lorentz").curvature == 1.0
    assert {create_space("lorentz", 2.0), Lorentz(2.0)} == {Lorentz(2.0)}  # hashable by (name, K)
    assert Lorentz(0.5).at(2.0) == Lorentz(2.0) and Euclidean().at(3.0).name == "euclidean"


@pytest.mark.parametrize("name", ["poincare", "Lorentz", ""])
def test_an_unknown_name_is_refused_in_one_line_naming_the_available_ones(name):
    with pytest.raises(ConfigError, match=r"unknown geometry .*; available: euclidean, lorentz \(") as err:
        create_space(name)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("k", [0.0, -1.0, math.nan, math.inf, True, "1"])
def test_a_curvature_that_is_not_a_finite_positive_number_is_refused(k):
    with pytest.raises(ConfigError, match="curvature must be a finite number > 0"):
        create_space("lorentz", k)


def test_a_new_space_is_one_registered_class():
    @register_space("test_flat")
    class Flat(Euclidean):
        pass

    try:
        assert "test_flat" in list_spaces() and create_space("test_flat", 2.0).name == "test_flat"
    finally:
        SPACES.unregister("test_flat")
    assert "test_flat" not in list_spaces()


def test_what_each_space_knows_of_itself():
    e, lo = Euclidean(), Lorentz(2.0)
    assert (e.point_width(8), e.min_width, e.label) == (8, 1, "E")
    assert (lo.point_width(8), lo.min_width, lo.label) == (9, 2, "L K=2")
    assert not e.radius_encodes_confidence and lo.radius_encodes_confidence
    assert not e.indefinite and lo.indefinite
    z = RNG.normal(size=(5, 3))
    assert e.uncertainty(z) is None
    np.testing.assert_allclose(lo.uncertainty(z), 1 - np.tanh(math.sqrt(2.0) * np.linalg.norm(z, axis=1)))


# -------------------------------------------------------------- vector forms
@pytest.mark.parametrize("name, k", SPACE_CASES)
def test_features_to_points_to_tangent_and_back_round_trip(name, k):
    space = create_space(name, k)
    z, emb = _features(space)
    points = space.points(z, emb)
    assert points.dtype == np.float64 and points.shape == (12, space.point_width(6))
    tangent = space.tangent(z, emb)
    np.testing.assert_allclose(space.to_tangent(points), tangent, atol=1e-12)  # points → tangent = the features'
    np.testing.assert_allclose(space.from_tangent(tangent), points, atol=1e-12)  # and back
    assert space.checked(points, error=DataError, what="rows", fix="f").shape == points.shape
    assert space.on_space(points.astype(np.float32)).all()


@pytest.mark.parametrize("name, k", SPACE_CASES)
def test_tensors_give_the_points_numpy_gives(name, k):
    space = create_space(name, k)
    z, emb = _features(space)
    lifted = space.points(torch.from_numpy(z), torch.from_numpy(emb))
    assert isinstance(lifted, torch.Tensor)
    np.testing.assert_array_equal(lifted.numpy(), space.points(z, emb))


def test_euclidean_points_are_the_unit_rows_and_lorentz_points_are_on_the_hyperboloid():
    z, emb = _features(Euclidean())
    np.testing.assert_array_equal(Euclidean().points(z, emb), emb)
    np.testing.assert_allclose(np.linalg.norm(Euclidean().from_tangent(3.0 * z), axis=1), 1.0)
    k = 0.5
    x = Lorentz(k).points(z, None)
    np.testing.assert_allclose(np.sum(x[:, 1:] ** 2, axis=1) - x[:, 0] ** 2, -1.0 / k, rtol=1e-12)
    np.testing.assert_array_equal(Lorentz(k).tangent(z.astype(np.float32), None), z.astype(np.float32))


def test_rows_off_the_space_are_refused_with_the_fix():
    with pytest.raises(DataError, match="2 rows are all zeros .*; drop them"):
        Euclidean().checked(np.zeros((2, 3)), error=DataError, what="rows", fix="drop them")
    points = Lorentz(1.0).points(RNG.normal(size=(4, 3)), None)
    with pytest.raises(DataError, match=r"4 of 4 rows are not on the hyperboloid .* K=2.0 .*; lift them"):
        Lorentz(2.0).checked(points, error=DataError, what="rows", fix="lift them")
    assert not Lorentz(1.0).on_space(np.roll(points, -1, axis=1)).any()  # time coordinate last
    assert not Euclidean().on_space(2.0 * np.eye(3)).any()
    with pytest.raises(ValueError, match="lorentz embeddings need width >= 2"):
        Lorentz().scores(np.ones((1, 1)), np.ones((1, 1)))


# --------------------------------------------------- query form · row = score
def _scored(name: str, k: float, nq: int, ng: int, seed: int) -> tuple[Space, np.ndarray, np.ndarray, np.ndarray]:
    """(space, queries (nq, D), gallery (ng, D), the space's exact scores (nq, ng))."""
    space = create_space(name, k)
    q = space.points(*_features(space, n=nq, seed=seed))
    g = space.points(*_features(space, n=ng, seed=seed + 1))
    return space, q, g, space.scores(q, g)


@pytest.mark.parametrize("name, k", SPACE_CASES)
def test_the_query_form_dotted_with_a_stored_row_ranks_as_the_exact_scores(name, k):
    space, q, g, scores = _scored(name, k, 9, 15, seed=1)
    dot = space.query_form(q) @ g.T
    if space.indefinite:  # the dot product is ⟨q, g⟩_L; the score −acosh(max(1, −K⟨q, g⟩_L))/√K grows with it
        np.testing.assert_allclose(scores, -np.arccosh(np.maximum(-k * dot, 1.0)) / math.sqrt(k), atol=1e-10)
    else:  # the cosine itself
        np.testing.assert_allclose(scores, dot, atol=1e-12)
    np.testing.assert_array_equal(np.argsort(-scores, axis=1, kind="stable")[:, :1], np.argmax(dot, axis=1)[:, None])


@pytest.mark.parametrize("name, k", SPACE_CASES)
def test_scores_candidate_scores_and_the_chunk_kernels_agree(name, k):
    space, q, g, scores = _scored(name, k, 7, 11, seed=3)
    if space.indefinite:
        ref = -pairwise_geodesic_distance(torch.from_numpy(q), torch.from_numpy(g), k).numpy()
        np.testing.assert_allclose(scores, ref, rtol=1e-10, atol=1e-10)
    candidates = np.broadcast_to(g, (len(q), *g.shape))
    np.testing.assert_allclose(space.candidate_scores(space.query_form(q), candidates), scores, atol=1e-7)
    product, finish, distance_of = space.score_kernels(q, g)
    raw = np.empty((len(q), len(g)))
    product(0, raw)
    ranked = finish(raw)
    got = -distance_of(ranked) if distance_of is not None else ranked
    np.testing.assert_array_equal(got, scores)  # the same float operations as the scores


def test_decoded_lorentz_rows_get_their_time_coordinate_back():
    x = Lorentz(0.5).points(RNG.normal(size=(6, 4)), None).reshape(2, 3, 5)
    damaged = x.copy()
    damaged[..., 0] = 0.0
    np.testing.assert_allclose(Lorentz(0.5).restore_decoded(damaged), x, rtol=1e-12)
    unit = Euclidean().from_tangent(RNG.normal(size=(3, 4)))
    assert Euclidean().restore_decoded(unit) is unit
