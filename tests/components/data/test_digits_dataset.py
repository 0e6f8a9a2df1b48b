"""The digits loader, the dataset registry and the stratified split (components/data)."""

from __future__ import annotations

import numpy as np
import pytest

from components.data import ArrayDataset, SourceDataset, create_dataset, list_datasets
from components.data.split import stratified_split
from components.errors import DataError


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return create_dataset("digits", tmp_path_factory.mktemp("digits"))


def test_shapes_and_types(digits):
    assert digits.name == "digits"
    for part in (digits.train, digits.test):
        assert isinstance(part, SourceDataset) and part.resident() is not None  # decoded once, in memory
        images = part.decode().images
        assert images.dtype == np.uint8 and images.ndim == 4
        assert images.shape[1:] == (8, 8, 1)
        assert part.image_shape == (8, 8, 1)
        assert part.labels.dtype == np.int64 and part.ids.dtype == np.int64
        assert part.num_classes == 10
    assert digits.train.class_names == tuple(str(i) for i in range(10))
    assert int(digits.train.decode().images.max()) == 255 and int(digits.train.decode().images.min()) == 0


def test_split_sizes_and_disjoint_ids(digits):
    n_train, n_test = len(digits.train), len(digits.test)
    assert n_train + n_test == 1797
    ids = np.concatenate([digits.train.ids, digits.test.ids])
    assert np.array_equal(np.sort(ids), np.arange(1797))


def test_split_is_stratified(digits):
    all_labels = np.concatenate([digits.train.labels, digits.test.labels])
    per_class = np.bincount(all_labels, minlength=10)
    test_counts = np.bincount(digits.test.labels, minlength=10)
    assert np.array_equal(test_counts, np.rint(per_class * 0.3).astype(int))
    assert np.array_equal(np.bincount(digits.train.labels, minlength=10), per_class - test_counts)


def test_images_match_scikit_learn(digits):
    from sklearn.datasets import load_digits as sk

    d = sk()
    ids = digits.test.ids[:20]
    expected = np.clip(np.rint(d.images[ids] * 255.0 / 16.0), 0, 255).astype(np.uint8)
    assert np.array_equal(digits.test.decode().images[:20, :, :, 0], expected)
    assert np.array_equal(digits.test.labels[:20], d.target[ids])


def test_split_is_deterministic_and_seeded(tmp_path, digits):
    again = create_dataset("digits", tmp_path)
    assert np.array_equal(again.train.ids, digits.train.ids) and np.array_equal(again.test.ids, digits.test.ids)
    assert again.fingerprint == digits.fingerprint
    other = create_dataset("digits", tmp_path, split_seed=1)
    assert not np.array_equal(other.test.ids, digits.test.ids)
    assert other.fingerprint != digits.fingerprint
    frac = create_dataset("digits", tmp_path, test_fraction=0.2)
    assert frac.fingerprint != digits.fingerprint
    assert len(frac.test) == pytest.approx(0.2 * 1797, abs=10)


def test_unknown_dataset_lists_available(tmp_path):
    assert "digits" in list_datasets()
    with pytest.raises(DataError) as info:
        create_dataset("imagenet-99", tmp_path)
    assert "imagenet-99" in str(info.value) and "digits" in str(info.value)


def test_stratified_split_small_case():
    labels = np.array([0] * 4 + [1] * 6 + [2] * 1, dtype=np.int64)
    tr, te = stratified_split(labels, 0.5, seed=3)
    assert np.all(np.diff(tr) > 0) and np.all(np.diff(te) > 0)
    assert sorted(np.concatenate([tr, te]).tolist()) == list(range(11))
    # rint(4*0.5)=2, rint(6*0.5)=3, rint(1*0.5)=0 (round half to even)
    assert np.bincount(labels[te], minlength=3).tolist() == [2, 3, 0]
    tr2, te2 = stratified_split(labels, 0.5, seed=3)
    assert np.array_equal(te, te2) and np.array_equal(tr, tr2)


def test_array_dataset_validation_and_positions(digits):
    with pytest.raises(ValueError, match="uint8"):
        ArrayDataset(np.zeros((2, 8, 8, 1), np.float32), np.zeros(2, np.int64), np.arange(2), ("a",))
    with pytest.raises(ValueError, match="shape"):
        ArrayDataset(np.zeros((2, 8, 8, 1), np.uint8), np.zeros(3, np.int64), np.arange(2), ("a",))
    ids = digits.train.ids[[5, 0, 17]]
    pos = digits.train.positions_of(ids)
    assert np.array_equal(digits.train.ids[pos], ids)
    with pytest.raises(KeyError):
        digits.train.positions_of(np.array([digits.test.ids[0]]))
