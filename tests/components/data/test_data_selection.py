"""Class orders, training selections and manifests (components/data/selection.py)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from components.data import (
    DataManifest,
    create_dataset,
    resolve_class_order,
    select_training_data,
)
from components.errors import DataError


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return create_dataset("digits", tmp_path_factory.mktemp("digits"))


def _select(digits, **kw):
    args = dict(dataset="digits", fingerprint=digits.fingerprint, class_order=[0, 1, 2, 3, 4])
    args.update(kw)
    return select_training_data(digits.train, **args)


# --------------------------------------------------------------------------- class order


def test_resolve_class_order_without_parent():
    assert resolve_class_order("all", 4) == [0, 1, 2, 3]
    assert resolve_class_order([3, 0, 2], 4) == [3, 0, 2]


def test_resolve_class_order_keeps_parent_positions_and_appends_new_classes():
    assert resolve_class_order("all", 6, parent_order=[4, 1, 3]) == [4, 1, 3, 0, 2, 5]
    assert resolve_class_order([0, 1, 3, 4], 6, parent_order=[4, 1, 3]) == [4, 1, 3, 0]
    # a parent class missing from the request is dropped, the rest keeps its order
    assert resolve_class_order([3, 5, 4], 6, parent_order=[4, 1, 3]) == [4, 3, 5]


@pytest.mark.parametrize(
    "requested, needle",
    [([], "empty"), ([0, 10], "do not exist"), ([-1, 2], "do not exist"), ([1, 2, 1], "twice")],
)
def test_resolve_class_order_rejects_bad_requests(requested, needle):
    with pytest.raises(DataError, match=needle):
        resolve_class_order(requested, 10)


# --------------------------------------------------------------------------- selection


def test_selection_is_deterministic_and_sorted(digits):
    a, b = _select(digits, fraction=0.4, seed=3), _select(digits, fraction=0.4, seed=3)
    assert np.array_equal(a.ids, b.ids) and np.array_equal(a.labels, b.labels)
    assert a.to_json() == b.to_json() and a.sha256 == b.sha256
    assert np.all(np.diff(a.ids) > 0)
    c = _select(digits, fraction=0.4, seed=4)
    assert not np.array_equal(a.ids, c.ids) and a.sha256 != c.sha256


@pytest.mark.parametrize("fraction", [1.0, 0.3, 0.55])
def test_fraction_keeps_rounded_count_of_selected_classes(digits, fraction):
    n_sel = int(np.isin(digits.train.labels, [0, 1, 2, 3, 4]).sum())
    m = _select(digits, fraction=fraction, seed=0)
    assert len(m) == round(fraction * n_sel)
    assert set(np.unique(m.labels).tolist()) == {0, 1, 2, 3, 4}
    # the labels are the dataset's labels of those ids
    pos = digits.train.positions_of(m.ids)
    assert np.array_equal(digits.train.labels[pos], m.labels)
    assert m.fraction == fraction and m.class_names == ("0", "1", "2", "3", "4")


def test_selection_errors(digits):
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(DataError, match="fraction"):
            _select(digits, fraction=bad)
    with pytest.raises(DataError, match="keeps nothing"):
        _select(digits, fraction=1e-6)
    with pytest.raises(DataError, match="have no samples"):
        _select(digits, class_order=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], fraction=0.004)


def test_model_labels_are_positions_in_class_order(digits):
    m = _select(digits, class_order=[7, 2, 5])
    ml = m.model_labels()
    assert ml.dtype == np.int64
    lut = {7: 0, 2: 1, 5: 2}
    assert ml.tolist() == [lut[int(c)] for c in m.labels]
    assert set(ml.tolist()) == {0, 1, 2}


# --------------------------------------------------------------------------- manifest


def test_manifest_json_round_trip(digits):
    m = _select(digits, class_order=[9, 3], fraction=0.5, seed=11)
    text = m.to_json()
    back = DataManifest.from_json(text)
    assert back.to_json() == text and back.sha256 == m.sha256
    for f in ("dataset", "fingerprint", "class_order", "class_names", "fraction", "seed"):
        assert getattr(back, f) == getattr(m, f), f
    assert np.array_equal(back.ids, m.ids) and back.ids.dtype == np.int64
    assert np.array_equal(back.labels, m.labels)
    assert m.sha256 == hashlib.sha256(text.encode()).hexdigest()
    body = json.loads(text)
    assert body["count"] == len(m) and body["version"] == 1


def test_manifest_from_json_rejects_bad_files(digits):
    m = _select(digits, class_order=[9, 3], fraction=0.5)
    body = json.loads(m.to_json())
    with pytest.raises(DataError, match="version"):
        DataManifest.from_json(json.dumps({**body, "version": 99}))
    with pytest.raises(DataError, match="count"):
        DataManifest.from_json(json.dumps({**body, "count": body["count"] + 1}))
    with pytest.raises(DataError, match="malformed"):
        DataManifest.from_json(json.dumps({k: v for k, v in body.items() if k != "ids"}))
    with pytest.raises(DataError, match="malformed"):
        DataManifest.from_json(m.to_json()[:-40])


def test_manifest_without_count_is_a_data_error(digits):
    body = json.loads(_select(digits, class_order=[9, 3]).to_json())
    del body["count"]
    with pytest.raises(DataError):
        DataManifest.from_json(json.dumps(body))


def test_take_returns_the_manifest_rows(digits):
    m = _select(digits, class_order=[1, 8], fraction=0.5, seed=2)
    sub = m.take(digits.train)
    assert np.array_equal(sub.ids, m.ids) and np.array_equal(sub.labels, m.labels)
    pos = digits.train.positions_of(m.ids)
    assert np.array_equal(sub.decode().images, digits.train.decode().images[pos])


def test_take_refuses_disagreeing_labels_and_missing_samples(digits):
    m = _select(digits, class_order=[1, 8], fraction=0.5, seed=2)
    labels = m.labels.copy()
    labels[0] = 8 if labels[0] == 1 else 1
    tampered = DataManifest(m.dataset, m.fingerprint, m.class_order, m.class_names, m.fraction, m.seed, m.ids, labels)
    with pytest.raises(DataError, match="labels disagree"):
        tampered.take(digits.train)
    with pytest.raises(DataError, match="missing"):
        m.take(digits.test)  # train ids are not in the test split
