"""Datasets on disk (components/data/sets/streamed.py): ``data.dataset: webdataset | manifest`` with train and test
splits; the train split stays on disk, the test split decodes to exactly the written images."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from components.data.catalog import create_dataset
from components.data.sources import write_manifest, write_webdataset
from components.data.sources.split import SourceDataset
from components.errors import DataError
from tests.components.data.sources.source_files import images, save_png

NAMES = ("ant", "bee", "cat")


def _splits(n_train: int = 24, n_test: int = 12) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    imgs = images(n_train + n_test, size=(5, 5), channels=3, seed=3)
    labels, ids = np.arange(n_train + n_test) % 3, 10 * np.arange(n_train + n_test)
    return {
        "train": (imgs[:n_train], labels[:n_train], ids[:n_train]),
        "test": (imgs[n_train:], labels[n_train:], ids[n_train:]),
    }


def _webdataset(top: Path, class_names=NAMES) -> Path:
    for split, batch in _splits().items():
        write_webdataset(top / split, [batch], shard_size=5, class_names=class_names)
    return top


def _manifest(top: Path, suffix: str = ".parquet") -> Path:
    for split, (imgs, labels, ids) in _splits().items():
        paths = [save_png(top / "files" / split / f"{i}.png", img) for img, i in zip(imgs, ids)]
        write_manifest(top / f"{split}{suffix}", paths, ids=ids, labels=[NAMES[k] for k in labels])
    return top


@pytest.mark.parametrize("kind", ["webdataset", "manifest"])
def test_train_stays_on_disk_and_test_decodes_to_the_written_images(tmp_path, kind):
    top = _webdataset(tmp_path) if kind == "webdataset" else _manifest(tmp_path)
    s = create_dataset(kind, tmp_path / "cache", path=str(top), image_size=5)
    written = _splits()
    assert isinstance(s.train, SourceDataset) and s.train.resident() is None  # streamed, never decoded as a whole
    assert s.train.class_names == s.test.class_names == NAMES and s.train.image_shape == (5, 5, 3)
    np.testing.assert_array_equal(np.sort(s.train.ids), written["train"][2])
    assert s.test.resident() is not None  # decoded once into memory
    np.testing.assert_array_equal(s.test.ids, written["test"][2])
    np.testing.assert_array_equal(s.test.labels, written["test"][1])
    np.testing.assert_array_equal(s.test.decode().images, written["test"][0])  # PNG: lossless
    again = create_dataset(kind, tmp_path / "cache", path=str(top), image_size=5)
    assert again.fingerprint == s.fingerprint
    resized = create_dataset(kind, tmp_path / "cache", path=str(top), image_size=4)
    assert resized.fingerprint != s.fingerprint and resized.test.decode().images.shape == (12, 4, 4, 3)


def test_a_csv_manifest_works_like_parquet(tmp_path):
    s = create_dataset("manifest", tmp_path / "cache", path=str(_manifest(tmp_path, ".csv")), image_size=5)
    assert len(s.train) == 24 and len(s.test) == 12


def test_missing_settings_and_bad_layouts_are_refused_with_the_fix(tmp_path):
    top = _webdataset(tmp_path / "wds")
    with pytest.raises(DataError, match="needs data.path"):
        create_dataset("webdataset", tmp_path, image_size=5)
    with pytest.raises(DataError, match="needs data.image_size"):
        create_dataset("webdataset", tmp_path, path=str(top))
    with pytest.raises(DataError, match="does not exist"):
        create_dataset("webdataset", tmp_path, path=str(tmp_path / "nowhere"), image_size=5)
    other = _webdataset(tmp_path / "other", class_names=("x", "y", "z"))
    (top / "test").rename(tmp_path / "kept")
    (other / "test").rename(top / "test")
    with pytest.raises(DataError, match="name different classes"):
        create_dataset("webdataset", tmp_path, path=str(top), image_size=5)


def test_an_unlabelled_split_is_refused(tmp_path):
    imgs, labels, ids = _splits()["train"]
    write_webdataset(tmp_path / "train", [(imgs, labels, ids)], class_names=NAMES)
    write_webdataset(tmp_path / "test", [(imgs, np.full(len(ids), -1), ids)], class_names=NAMES)
    with pytest.raises(DataError, match="must be non-empty and labelled"):
        create_dataset("webdataset", tmp_path, path=str(tmp_path), image_size=5)
