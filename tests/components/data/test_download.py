"""Checksummed downloads (pooch), safe extraction and the array cache (components/data/download.py), all offline.

Downloads come from a local HTTP server on 127.0.0.1; a closed port stands for a machine without network.
"""

from __future__ import annotations

import hashlib
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from components.data.download import (
    ChecksumError,
    download,
    download_first,
    extract,
    load_or_build_cache,
)
from components.errors import DataError
from tests.components.data.dataset_archives import (
    add_tar_member,
    closed_port_url,
    leftovers,
    serve_dir,
)

PAYLOAD = bytes(range(256)) * 5000  # 1.28 MB: more than one read chunk


@pytest.fixture
def served(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "blob.bin").write_bytes(PAYLOAD)
    with serve_dir(site) as (base, requests):
        yield base, requests


def test_download_verifies_and_does_not_download_twice(tmp_path, served):
    base, requests = served
    dest = tmp_path / "cache" / "sub" / "blob.bin"
    md5 = hashlib.md5(PAYLOAD).hexdigest()
    assert download(base + "blob.bin", dest, md5=md5) == dest
    assert dest.read_bytes() == PAYLOAD and len(requests) == 1
    assert download(base + "blob.bin", dest, sha256=hashlib.sha256(PAYLOAD).hexdigest()) == dest
    assert len(requests) == 1  # already there and verified: no second request
    assert leftovers(dest.parent) == []


def test_checksum_mismatch_leaves_nothing(tmp_path, served):
    base, _ = served
    dest = tmp_path / "blob.bin"
    with pytest.raises(ChecksumError) as info:
        download(base + "blob.bin", dest, md5="0" * 32, retries=0)
    msg = str(info.value)
    assert "0" * 32 in msg and hashlib.md5(PAYLOAD).hexdigest() in msg and str(dest) in msg
    assert not dest.exists() and leftovers(tmp_path) == []


def test_existing_file_with_wrong_checksum_is_not_overwritten(tmp_path, served):
    base, requests = served
    dest = tmp_path / "blob.bin"
    dest.write_bytes(b"the user's own file")
    with pytest.raises(ChecksumError, match="NOT overwritten") as info:
        download(base + "blob.bin", dest, md5=hashlib.md5(PAYLOAD).hexdigest())
    assert "delete it" in str(info.value)
    assert dest.read_bytes() == b"the user's own file" and requests == []


def test_network_failure_says_how_to_place_the_file(tmp_path):
    url = closed_port_url("data.tar.gz")
    dest = tmp_path / "ds" / "data.tar.gz"
    with pytest.raises(DataError) as info:
        download(url, dest, md5="ab" * 16, timeout=5, retries=0)
    msg = str(info.value)
    assert not isinstance(info.value, ChecksumError)
    assert url in msg and str(dest) in msg and "ab" * 16 in msg and "place it at" in msg
    assert not dest.exists() and leftovers(dest.parent) == []


def test_http_error_and_mirror_fallback(tmp_path, served):
    base, _requests = served
    dest = tmp_path / "blob.bin"
    with pytest.raises(DataError, match="404"):
        download(base + "missing.bin", dest, retries=0)
    assert not dest.exists() and leftovers(tmp_path) == []
    md5 = hashlib.md5(PAYLOAD).hexdigest()
    got, url = download_first([closed_port_url(), base + "missing.bin", base + "blob.bin"], dest, md5=md5, timeout=5)
    assert got.read_bytes() == PAYLOAD and url == base + "blob.bin"
    assert download_first([base + "missing.bin"], dest, md5=md5) == (dest, None)  # already there
    with pytest.raises(DataError, match="any of 2 mirrors"):
        download_first([closed_port_url(), base + "missing.bin"], tmp_path / "other.bin", timeout=5)
    assert leftovers(tmp_path) == []


def test_a_failed_attempt_is_retried(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "blob.bin").write_bytes(PAYLOAD)
    dest = tmp_path / "blob.bin"
    with serve_dir(site, fail_first=1) as (base, requests):
        assert download(base + "blob.bin", dest, sha256=hashlib.sha256(PAYLOAD).hexdigest(), retries=1) == dest
        assert len(requests) == 2 and dest.read_bytes() == PAYLOAD
    with serve_dir(site, fail_first=1) as (base, requests), pytest.raises(DataError, match="HTTP 503"):
        download(base + "blob.bin", tmp_path / "other.bin", retries=0)
    assert leftovers(tmp_path) == []


def _tar_gz(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            add_tar_member(tar, name, data)
    return path


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


@pytest.mark.parametrize("kind", ["tar.gz", "tgz", "tar", "zip"])
def test_extract_archives(tmp_path, kind):
    members = {"top/a.txt": b"alpha", "top/sub/b.bin": PAYLOAD}
    archive = tmp_path / f"data.{kind}"
    if kind == "zip":
        _zip(archive, members)
    else:
        with tarfile.open(archive, "w:gz" if kind != "tar" else "w") as tar:
            for name, data in members.items():
                add_tar_member(tar, name, data)
    out = extract(archive, tmp_path / "out")
    assert (out / "top" / "a.txt").read_bytes() == b"alpha"
    assert (out / "top" / "sub" / "b.bin").read_bytes() == PAYLOAD
    assert leftovers(tmp_path) == []
    assert extract(archive, tmp_path / "out") == out  # already complete: returned as is


def test_truncated_tar_gz_leaves_no_partial_folder(tmp_path):
    rng = np.random.default_rng(0)
    good = _tar_gz(tmp_path / "good.tar.gz", {f"top/f{i}.bin": rng.bytes(200_000) for i in range(4)})
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size * 2 // 3])
    with pytest.raises(DataError, match="corrupted or truncated.*delete it and download it again"):
        extract(bad, tmp_path / "out")
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_corrupted_zip_leaves_no_partial_folder(tmp_path):
    rng = np.random.default_rng(1)
    good = _zip(tmp_path / "good.zip", {"top/a.bin": rng.bytes(50_000), "top/b.bin": rng.bytes(50_000)})
    blob = bytearray(good.read_bytes())
    truncated = tmp_path / "truncated.zip"
    truncated.write_bytes(bytes(blob[: len(blob) // 2]))  # no central directory
    flipped = tmp_path / "flipped.zip"
    blob[60_000] ^= 0xFF  # inside the second member's data: CRC / inflate error
    flipped.write_bytes(bytes(blob))
    for archive in (truncated, flipped):
        with pytest.raises(DataError, match="corrupted"):
            extract(archive, tmp_path / "out")
        assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize("name", ["../evil.txt", "top/../../evil.txt", "/tmp/evil.txt"])
def test_path_traversal_is_refused(tmp_path, name):
    for archive in (
        _tar_gz(tmp_path / "t.tar.gz", {"top/ok.txt": b"ok", name: b"pwned"}),
        _zip(tmp_path / "z.zip", {"top/ok.txt": b"ok", name: b"pwned"}),
    ):
        with pytest.raises(DataError, match="absolute path or '..'"):
            extract(archive, tmp_path / "work" / "out")
        assert not (tmp_path / "work" / "out").exists() and leftovers(tmp_path / "work") == []
    assert not (tmp_path / "work" / "evil.txt").exists() and not (tmp_path / "evil.txt").exists()


def test_links_and_devices_are_refused(tmp_path):
    for kind, what in ((tarfile.SYMTYPE, "link"), (tarfile.LNKTYPE, "link"), (tarfile.CHRTYPE, "device")):
        archive = tmp_path / "l.tar"
        with tarfile.open(archive, "w") as tar:
            add_tar_member(tar, "top/ok.txt", b"ok")
            info = tarfile.TarInfo("top/link")
            info.type = kind
            info.linkname = "/etc/passwd"
            tar.addfile(info)
        with pytest.raises(DataError, match=what):
            extract(archive, tmp_path / "out")
        assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []
    archive = tmp_path / "l.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        info = zipfile.ZipInfo("top/link")
        info.external_attr = 0o120777 << 16  # S_IFLNK
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(DataError, match="symbolic link"):
        extract(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_unknown_archive_type(tmp_path):
    p = tmp_path / "data.rar"
    p.write_bytes(b"x")
    with pytest.raises(DataError, match="unknown archive type"):
        extract(p, tmp_path / "out")


def test_array_cache_builds_once_and_rebuilds_damage(tmp_path):
    cache = tmp_path / "c" / "arrays.npz"
    calls = []

    def build():
        calls.append(1)
        return {"x": np.arange(10, dtype=np.int64), "names": np.asarray(["a", "b"])}

    a = load_or_build_cache(cache, build, key="k1")
    b = load_or_build_cache(cache, build, key="k1")
    assert len(calls) == 1 and np.array_equal(a["x"], b["x"]) and b["names"].tolist() == ["a", "b"]
    assert set(b) == {"x", "names"}
    load_or_build_cache(cache, build, key="k2")  # built from other inputs
    assert len(calls) == 2
    cache.write_bytes(cache.read_bytes()[:100])  # damaged
    c = load_or_build_cache(cache, build, key="k2")
    assert len(calls) == 3 and np.array_equal(c["x"], a["x"])
    assert load_or_build_cache(cache, build, key="k2")["x"].tolist() == list(range(10)) and len(calls) == 3
    assert leftovers(cache.parent) == []
    with np.load(cache, allow_pickle=False) as z:  # a plain npz, no pickled objects
        assert sorted(z.files) == ["__cache_key__", "names", "x"]


def test_failed_build_writes_no_cache(tmp_path):
    cache = tmp_path / "arrays.npz"

    def build():
        raise DataError("broken source")

    with pytest.raises(DataError, match="broken source"):
        load_or_build_cache(cache, build)
    assert not cache.exists() and leftovers(tmp_path) == []
