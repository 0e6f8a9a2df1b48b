"""The CIFAR-100 loader on a small real-format tarball served over local HTTP, and its restricted unpickler."""

from __future__ import annotations

import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest

from components.data import create_dataset
from components.data.download import ChecksumError
from components.data.sets import cifar100 as c100
from components.errors import DataError
from tests.components.data.dataset_archives import (
    add_tar_member,
    leftovers,
    md5_of,
    py2_pickle,
    serve_dir,
)

N_TRAIN, N_TEST = 6, 3
FINE_NAMES = [f"class_{i:02d}" for i in range(100)]


def _batch(n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "batch_label": "training batch 1 of 1",
        "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        "fine_labels": [int(x) for x in rng.integers(0, 100, n)],
        "coarse_labels": [int(x) for x in rng.integers(0, 20, n)],
        "filenames": [f"img_{seed}_{i}.png" for i in range(n)],
    }


def _tarball(path: Path, train: bytes, test: bytes, meta: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, data in (("train", train), ("test", test), ("meta", meta)):
            add_tar_member(tar, f"cifar-100-python/{name}", data)
    return path


@pytest.fixture
def site(tmp_path):
    """A web folder holding cifar-100-python.tar.gz built with Python-2-style pickles."""
    train, test = _batch(N_TRAIN, 1), _batch(N_TEST, 2)
    meta = {"fine_label_names": FINE_NAMES, "coarse_label_names": [f"super_{i}" for i in range(20)]}
    archive = _tarball(tmp_path / "site" / c100.ARCHIVE, py2_pickle(train), py2_pickle(test), py2_pickle(meta))
    return {"dir": tmp_path / "site", "archive": archive, "train": train, "test": test}


def test_download_and_load(tmp_path, site, monkeypatch):
    root = tmp_path / "root"
    with serve_dir(site["dir"]) as (base, requests):
        monkeypatch.setattr(c100, "URL", base + c100.ARCHIVE)
        monkeypatch.setattr(c100, "MD5", md5_of(site["archive"]))
        d = create_dataset("cifar100", root, test_fraction=0.5)
        assert requests == ["/" + c100.ARCHIVE]
        again = create_dataset("cifar100", root)
        assert len(requests) == 1 and again.fingerprint == d.fingerprint
    assert (root / "cifar100" / c100.ARCHIVE).read_bytes() == site["archive"].read_bytes()
    assert leftovers(root / "cifar100") == []
    assert d.name == "cifar100" and d.train.class_names == tuple(FINE_NAMES)
    assert d.train.decode().images.shape == (N_TRAIN, 32, 32, 3) and d.test.decode().images.shape == (N_TEST, 32, 32, 3)
    assert (
        d.train.labels.tolist() == site["train"]["fine_labels"]
        and d.test.labels.tolist() == site["test"]["fine_labels"]
    )
    assert d.train.ids.tolist() == list(range(N_TRAIN)) and d.test.ids.tolist() == list(
        range(N_TRAIN, N_TRAIN + N_TEST)
    )
    # a row is 1024 red, 1024 green, 1024 blue values, each row-major over 32×32
    row = site["train"]["data"][4]
    y, x = 5, 17
    assert d.train.decode().images[4, y, x].tolist() == [
        row[y * 32 + x],
        row[1024 + y * 32 + x],
        row[2048 + y * 32 + x],
    ]
    assert np.array_equal(d.test.decode().images[2], site["test"]["data"][2].reshape(3, 32, 32).transpose(1, 2, 0))
    assert d.meta["source"].startswith("http://127.0.0.1") and d.meta["md5"] == md5_of(site["archive"])
    assert d.train.decode().images.flags.c_contiguous


def test_local_archive_is_verified(tmp_path, site, monkeypatch):
    root = tmp_path / "root"
    (root / "cifar100").mkdir(parents=True)
    (root / "cifar100" / c100.ARCHIVE).write_bytes(site["archive"].read_bytes())
    monkeypatch.setattr(c100, "MD5", md5_of(site["archive"]))
    d = create_dataset("cifar100", root, download=False)
    assert d.meta["source"] == str(root / "cifar100" / c100.ARCHIVE)
    monkeypatch.setattr(c100, "MD5", "f" * 32)
    with pytest.raises(ChecksumError, match="NOT overwritten"):
        create_dataset("cifar100", root, download=False)
    with pytest.raises(DataError, match="place it at"):
        create_dataset("cifar100", tmp_path / "empty", download=False)


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_refused_and_not_run(tmp_path, site, monkeypatch):
    marker = tmp_path / "pwned"
    evil = py2_pickle({"data": _Evil(marker), "fine_labels": [0]})
    ok_test = py2_pickle(site["test"])
    meta = py2_pickle({"fine_label_names": FINE_NAMES})
    root = tmp_path / "root"
    archive = _tarball(root / "cifar100" / c100.ARCHIVE, evil, ok_test, meta)
    monkeypatch.setattr(c100, "MD5", md5_of(archive))
    with pytest.raises(DataError, match=r"refusing to unpickle .*cifar-100-python/train.*(posix|os)\.system"):
        create_dataset("cifar100", root, download=False)
    assert not marker.exists()
    # positive control: the same payload through plain pickle does run the command
    control = tmp_path / "control"
    pickle.loads(py2_pickle({"data": _Evil(control)}), encoding="bytes")
    assert control.exists()


@pytest.mark.parametrize(
    "payload",
    [
        pickle.dumps(eval, protocol=2),  # builtins.eval
        b"cos\nsystem\n(S'echo hi'\ntR.",  # hand-written os.system call
        pickle.dumps(exec, protocol=4),  # STACK_GLOBAL builtins.exec
    ],
)
def test_restricted_unpickler_refuses_other_globals(payload):
    with pytest.raises(DataError, match="refusing to unpickle"):
        c100.safe_unpickle(payload, "x")


def test_restricted_unpickler_reads_numpy_arrays():
    a = np.arange(12, dtype=np.uint8).reshape(3, 4)
    for blob in (py2_pickle({"data": a}), pickle.dumps({b"data": a}, protocol=4)):
        got = c100.safe_unpickle(blob, "x")
        assert np.array_equal(got[b"data"], a) and got[b"data"].dtype == np.uint8
    with pytest.raises(DataError, match="not a readable CIFAR pickle"):
        c100.safe_unpickle(b"\x80\x02}q\x00(U\x04da", "truncated")


def test_corrupted_tarball_and_wrong_layout(tmp_path, site, monkeypatch):
    root = tmp_path / "root"
    p = root / "cifar100" / c100.ARCHIVE
    p.parent.mkdir(parents=True)
    p.write_bytes(site["archive"].read_bytes()[:-200])
    monkeypatch.setattr(c100, "MD5", md5_of(p))
    with pytest.raises(DataError, match="corrupted or truncated"):
        create_dataset("cifar100", root, download=False)
    with tarfile.open(p, "w:gz") as tar:
        add_tar_member(tar, "cifar-100-python/train", py2_pickle(site["train"]))
    monkeypatch.setattr(c100, "MD5", md5_of(p))
    with pytest.raises(DataError, match="lacks cifar-100-python/meta, cifar-100-python/test"):
        create_dataset("cifar100", root, download=False)
    bad = dict(site["train"], data=np.zeros((N_TRAIN, 100), np.uint8))
    _tarball(p, py2_pickle(bad), py2_pickle(site["test"]), py2_pickle({"fine_label_names": FINE_NAMES}))
    monkeypatch.setattr(c100, "MD5", md5_of(p))
    with pytest.raises(DataError, match=r"uint8 \(N, 3072\)"):
        create_dataset("cifar100", root, download=False)
