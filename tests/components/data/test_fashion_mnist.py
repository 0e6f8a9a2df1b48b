"""The Fashion-MNIST loader on small real IDX .gz files (and on Debian's full copy when installed)."""

from __future__ import annotations

import gzip
import hashlib
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from components.data import create_dataset
from components.data.download import ChecksumError
from components.data.sets import fashion_mnist as fm
from components.errors import DataError
from tests.components.data.dataset_archives import (
    closed_port_url,
    idx_bytes,
    leftovers,
    md5_of,
    serve_dir,
    write_idx_gz,
)

N_TRAIN, N_TEST = 7, 4
DEBIAN = Path("/usr/share/datasets/fashion-mnist")


def _make_files(folder: Path, seed: int = 0) -> dict:
    """The four IDX .gz files; returns the arrays and each file's raw-content sha256 / gz md5."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {
        "train_images": rng.integers(0, 256, (N_TRAIN, 28, 28), dtype=np.uint8),
        "train_labels": rng.integers(0, 10, N_TRAIN).astype(np.uint8),
        "test_images": rng.integers(0, 256, (N_TEST, 28, 28), dtype=np.uint8),
        "test_labels": rng.integers(0, 10, N_TEST).astype(np.uint8),
    }
    sums = {}
    for key, fname in fm.FILES.items():
        raw = write_idx_gz(folder / fname, arrays[key], fm.IMAGES_MAGIC if key.endswith("images") else fm.LABELS_MAGIC)
        sums[fname] = {"md5": md5_of(folder / fname), "sha256": hashlib.sha256(raw).hexdigest()}
    return {"arrays": arrays, "sums": sums}


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """root/fashion_mnist/ with small files; the checksum table patched to them; no system copy, no network."""
    made = _make_files(tmp_path / "root" / "fashion_mnist")
    monkeypatch.setattr(fm, "CHECKSUMS", made["sums"])
    monkeypatch.setattr(fm, "SYSTEM_DIRS", ())
    monkeypatch.setattr(fm, "MIRRORS", (closed_port_url(""),))
    made["root"] = tmp_path / "root"
    return made


def test_loads_idx_files_from_the_cache_folder(fake):
    d = create_dataset("fashion_mnist", fake["root"], download=False, test_fraction=0.5, split_seed=3)
    a = fake["arrays"]
    assert d.name == "fashion_mnist" and d.train.class_names == fm.CLASS_NAMES and d.train.num_classes == 10
    assert d.train.decode().images.shape == (N_TRAIN, 28, 28, 1) and d.test.decode().images.shape == (N_TEST, 28, 28, 1)
    assert (
        d.train.decode().images.dtype == np.uint8 and d.train.labels.dtype == np.int64 and d.train.ids.dtype == np.int64
    )
    assert np.array_equal(d.train.decode().images[..., 0], a["train_images"]) and np.array_equal(
        d.test.decode().images[..., 0], a["test_images"]
    )
    assert np.array_equal(d.train.labels, a["train_labels"]) and np.array_equal(d.test.labels, a["test_labels"])
    assert d.train.ids.tolist() == list(range(N_TRAIN)) and d.test.ids.tolist() == list(
        range(N_TRAIN, N_TRAIN + N_TEST)
    )
    assert (
        d.meta["split"] == "official"
        and str(fake["root"] / "fashion_mnist") in d.meta["source"][fm.FILES["train_images"]]
    )
    again = create_dataset("fashion_mnist", fake["root"], download=False)  # official split: test_fraction ignored
    assert again.fingerprint == d.fingerprint and len(again.test) == N_TEST


def test_accepted_by_content_sha256_when_gz_bytes_differ(fake, monkeypatch):
    """Like Debian's re-compressed copy: other .gz bytes, same content, same fingerprint."""
    before = create_dataset("fashion_mnist", fake["root"], download=False).fingerprint
    folder = fake["root"] / "fashion_mnist"
    for fname in fm.FILES.values():
        raw = gzip.decompress((folder / fname).read_bytes())
        (folder / fname).write_bytes(gzip.compress(raw, compresslevel=1, mtime=12345))
        assert md5_of(folder / fname) != fake["sums"][fname]["md5"]
    assert create_dataset("fashion_mnist", fake["root"], download=False).fingerprint == before
    # and a file whose gz md5 matches is accepted even if only that is known
    sums = {f: {"md5": md5_of(folder / f), "sha256": "0" * 64} for f in fm.FILES.values()}
    monkeypatch.setattr(fm, "CHECKSUMS", sums)
    assert len(create_dataset("fashion_mnist", fake["root"], download=False).train) == N_TRAIN


def test_wrong_content_is_refused(fake):
    folder = fake["root"] / "fashion_mnist"
    other = _make_files(fake["root"] / "other", seed=9)["arrays"]
    write_idx_gz(folder / fm.FILES["test_images"], other["test_images"], fm.IMAGES_MAGIC)
    with pytest.raises(ChecksumError, match="t10k-images.*delete it"):
        create_dataset("fashion_mnist", fake["root"], download=False)


def test_truncated_and_malformed_files(fake, monkeypatch):
    folder = fake["root"] / "fashion_mnist"
    p = folder / fm.FILES["train_images"]
    p.write_bytes(p.read_bytes()[:-40])
    with pytest.raises(DataError, match="corrupted or truncated"):
        create_dataset("fashion_mnist", fake["root"], download=False)

    # well-formed gzip, checksum-accepted, but the IDX content is wrong
    def with_content(fname: str, raw: bytes) -> None:
        (folder / fname).write_bytes(gzip.compress(raw, mtime=0))
        sums = dict(fm.CHECKSUMS)
        sums[fname] = {"md5": md5_of(folder / fname), "sha256": hashlib.sha256(raw).hexdigest()}
        monkeypatch.setattr(fm, "CHECKSUMS", sums)

    imgs = fake["arrays"]["train_images"]
    with_content(fm.FILES["train_images"], struct.pack(">I", fm.LABELS_MAGIC) + idx_bytes(imgs, fm.IMAGES_MAGIC)[4:])
    with pytest.raises(DataError, match="magic number 2049, expected 2051"):
        create_dataset("fashion_mnist", fake["root"], download=False)
    with_content(fm.FILES["train_images"], idx_bytes(imgs, fm.IMAGES_MAGIC)[:-5])
    with pytest.raises(DataError, match="truncated or corrupted"):
        create_dataset("fashion_mnist", fake["root"], download=False)
    with_content(fm.FILES["train_images"], idx_bytes(imgs[:, :14, :], fm.IMAGES_MAGIC))
    with pytest.raises(DataError, match="28×28"):
        create_dataset("fashion_mnist", fake["root"], download=False)
    with_content(fm.FILES["train_images"], idx_bytes(imgs[:5], fm.IMAGES_MAGIC))
    with pytest.raises(DataError, match="5 images but 7 labels"):
        create_dataset("fashion_mnist", fake["root"], download=False)


def test_missing_files_without_download(tmp_path, monkeypatch):
    monkeypatch.setattr(fm, "SYSTEM_DIRS", (tmp_path / "nowhere",))
    with pytest.raises(DataError, match="data.download=true.*place the file at"):
        create_dataset("fashion_mnist", tmp_path / "root", download=False)


def test_downloads_from_the_second_mirror(tmp_path, monkeypatch):
    made = _make_files(tmp_path / "site")
    monkeypatch.setattr(fm, "CHECKSUMS", made["sums"])
    monkeypatch.setattr(fm, "SYSTEM_DIRS", ())
    with serve_dir(tmp_path / "site") as (base, requests):
        monkeypatch.setattr(fm, "MIRRORS", (closed_port_url(""), base))
        d = create_dataset("fashion_mnist", tmp_path / "root")
        assert sorted(requests) == sorted("/" + f for f in fm.FILES.values())
        assert np.array_equal(d.test.labels, made["arrays"]["test_labels"])
        assert (
            d.meta["source"][fm.FILES["train_labels"]] == base + "train-labels-idx1-ubyte.gz"
        )  # the mirror that worked
        create_dataset("fashion_mnist", tmp_path / "root")  # now local: no new request
        assert len(requests) == 4
    assert leftovers(tmp_path / "root" / "fashion_mnist") == []


def test_system_copy_is_used_when_the_cache_folder_is_empty(fake, tmp_path, monkeypatch):
    system = tmp_path / "usr-share"
    shutil.move(str(fake["root"] / "fashion_mnist"), system)
    monkeypatch.setattr(fm, "SYSTEM_DIRS", (system,))
    d = create_dataset("fashion_mnist", fake["root"], download=False)
    assert len(d.train) == N_TRAIN and d.meta["source"][fm.FILES["train_images"]].startswith(str(system))


@pytest.mark.skipif(
    not all((DEBIAN / f).is_file() for f in fm.FILES.values()), reason="Debian's dataset-fashion-mnist is not installed"
)
def test_real_debian_copy(tmp_path):
    d = create_dataset("fashion_mnist", tmp_path, download=False)
    assert len(d.train) == 60000 and len(d.test) == 10000
    assert d.train.image_shape == (28, 28, 1) and d.test.image_shape == (28, 28, 1) and d.train.num_classes == 10
    assert np.bincount(d.train.labels, minlength=10).tolist() == [6000] * 10
    assert np.bincount(d.test.labels, minlength=10).tolist() == [1000] * 10
    assert np.array_equal(np.concatenate([d.train.ids, d.test.ids]), np.arange(70000))
    assert d.train.decode().images.max() == 255 and d.meta["source"][fm.FILES["train_images"]].startswith(str(DEBIAN))
