"""Atomic file replacement (components/io.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from components.io import atomic_path, atomic_write_bytes


def test_atomic_write_bytes_creates_and_replaces(tmp_path):
    target = tmp_path / "blob.bin"
    atomic_write_bytes(target, b"first")
    atomic_write_bytes(target, b"second, longer")
    assert target.read_bytes() == b"second, longer"
    assert os.listdir(tmp_path) == ["blob.bin"]  # no temp files left


def test_atomic_path_failure_keeps_old_file_and_removes_temp(tmp_path):
    target = tmp_path / "blob.bin"
    target.write_bytes(b"old")
    seen = []
    with pytest.raises(RuntimeError, match="boom"), atomic_path(target) as tmp:
        seen.append(tmp)
        assert tmp.parent == tmp_path and tmp != target
        tmp.write_bytes(b"half-writ")
        raise RuntimeError("boom")
    assert target.read_bytes() == b"old"
    assert not seen[0].exists()
    assert os.listdir(tmp_path) == ["blob.bin"]


def test_atomic_path_works_with_writers_that_take_a_path(tmp_path):
    target = tmp_path / "arr.npy"
    with atomic_path(target) as tmp, open(tmp, "wb") as f:  # np.save would append .npy to a bare path
        np.save(f, np.arange(5))
    np.testing.assert_array_equal(np.load(target), np.arange(5))


def test_atomic_path_refuses_when_nothing_was_written(tmp_path):
    target = tmp_path / "blob.bin"
    target.write_bytes(b"old")
    with pytest.raises(FileNotFoundError, match="nothing was written"), atomic_path(target):
        pass
    assert target.read_bytes() == b"old"


def test_atomic_path_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        atomic_write_bytes(tmp_path / "nope" / "blob.bin", b"x")
