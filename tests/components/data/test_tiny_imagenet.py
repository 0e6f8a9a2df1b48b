"""The Tiny ImageNet loader on a small real-layout zip, downloaded over local HTTP, extracted and cached."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from components.data import create_dataset
from components.data.sets import tiny_imagenet as ti
from components.errors import DataError
from tests.components.data.dataset_archives import leftovers, md5_of, serve_dir

WNIDS = ["n02124075", "n01443537"]  # wnids.txt order (not sorted): Egyptian cat, goldfish
COLOURS = {"n02124075": (200, 40, 40), "n01443537": (30, 60, 220)}
N_TRAIN = 3


def _jpeg(colour, grey: bool = False) -> bytes:
    im = Image.new("L", (64, 64), 128) if grey else Image.new("RGB", (64, 64), colour)
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=95)
    return buf.getvalue()


def _make_zip(path: Path, *, annotations: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    top = "tiny-imagenet-200/"
    words = "n00001740\tentity\n" + "n02124075\tEgyptian cat\n" + "n01443537\tgoldfish, Carassius auratus\n"
    val_lines = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(top + "wnids.txt", "\n".join(WNIDS) + "\n")
        zf.writestr(top + "words.txt", words)
        for w in WNIDS:
            zf.writestr(top + f"train/{w}/{w}_boxes.txt", "")
            for i in range(N_TRAIN):
                zf.writestr(top + f"train/{w}/images/{w}_{i}.JPEG", _jpeg(COLOURS[w], grey=(w == WNIDS[1] and i == 2)))
        for i, w in enumerate([WNIDS[1], WNIDS[0], WNIDS[1]]):
            zf.writestr(top + f"val/images/val_{i}.JPEG", _jpeg(COLOURS[w]))
            val_lines.append(f"val_{i}.JPEG\t{w}\t0\t0\t63\t63")
        zf.writestr(
            top + "val/val_annotations.txt", annotations if annotations is not None else "\n".join(val_lines) + "\n"
        )
        zf.writestr(top + "test/images/test_0.JPEG", _jpeg((0, 0, 0)))
    return path


def test_download_extract_decode_and_cache(tmp_path, monkeypatch):
    site = tmp_path / "site"
    archive = _make_zip(site / ti.ARCHIVE)
    root = tmp_path / "root"
    with serve_dir(site) as (base, requests):
        monkeypatch.setattr(ti, "URL", base + ti.ARCHIVE)
        monkeypatch.setattr(ti, "MD5", md5_of(archive))
        d = create_dataset("tiny_imagenet", root)
        assert requests == ["/" + ti.ARCHIVE]
    base_dir = root / "tiny_imagenet"
    assert (base_dir / "tiny_imagenet.npz").is_file() and not (base_dir / "extracted").exists()
    assert leftovers(base_dir) == []
    assert d.name == "tiny_imagenet" and d.train.class_names == ("Egyptian cat", "goldfish")
    assert d.train.decode().images.shape == (2 * N_TRAIN, 64, 64, 3) and d.test.decode().images.shape == (3, 64, 64, 3)
    assert d.train.labels.tolist() == [0] * N_TRAIN + [1] * N_TRAIN  # wnids.txt order
    assert d.test.labels.tolist() == [1, 0, 1]  # from val_annotations.txt
    assert d.train.ids.tolist() == list(range(6)) and d.test.ids.tolist() == [6, 7, 8]
    means = d.train.decode().images.reshape(6, -1, 3).mean(axis=1)
    assert np.allclose(means[0], COLOURS[WNIDS[0]], atol=4) and np.allclose(means[3], COLOURS[WNIDS[1]], atol=4)
    grey = d.train.decode().images[5]  # the greyscale JPEG, converted to RGB
    assert np.allclose(grey.mean(axis=(0, 1)), 128, atol=2) and np.array_equal(grey[..., 0], grey[..., 1])
    assert np.allclose(d.test.decode().images[1].reshape(-1, 3).mean(axis=0), COLOURS[WNIDS[0]], atol=4)
    assert d.meta["source"].startswith("http://127.0.0.1") and d.meta["wnids"] == WNIDS

    # second load: verified archive + cache, nothing decoded again
    monkeypatch.setattr(ti, "_build", lambda top: pytest.fail("decoded again despite the cache"))
    again = create_dataset("tiny_imagenet", root, download=False)
    assert again.fingerprint == d.fingerprint and np.array_equal(again.train.decode().images, d.train.decode().images)
    assert again.meta["source"] == str(base_dir / ti.ARCHIVE)


def test_damaged_cache_is_rebuilt_and_bad_annotations_refused(tmp_path, monkeypatch):
    base_dir = tmp_path / "root" / "tiny_imagenet"
    archive = _make_zip(base_dir / ti.ARCHIVE)
    monkeypatch.setattr(ti, "MD5", md5_of(archive))
    d = create_dataset("tiny_imagenet", tmp_path / "root", download=False)
    cache = base_dir / "tiny_imagenet.npz"
    cache.write_bytes(cache.read_bytes()[:1000])
    again = create_dataset("tiny_imagenet", tmp_path / "root", download=False)
    assert np.array_equal(again.test.decode().images, d.test.decode().images)

    _make_zip(archive, annotations="val_0.JPEG\tn99999999\t0\t0\t1\t1\n")
    monkeypatch.setattr(ti, "MD5", md5_of(archive))  # a new archive: the cache key changes
    with pytest.raises(DataError, match="val_annotations.txt line 1"):
        create_dataset("tiny_imagenet", tmp_path / "root", download=False)
    assert not (base_dir / "extracted").exists() and leftovers(base_dir) == []


def test_corrupted_zip_is_reported(tmp_path, monkeypatch):
    base_dir = tmp_path / "root" / "tiny_imagenet"
    archive = _make_zip(base_dir / ti.ARCHIVE)
    archive.write_bytes(archive.read_bytes()[:-300])
    monkeypatch.setattr(ti, "MD5", md5_of(archive))
    with pytest.raises(DataError, match="corrupted"):
        create_dataset("tiny_imagenet", tmp_path / "root", download=False)
    assert not (base_dir / "extracted").exists() and not (base_dir / "tiny_imagenet.npz").exists()
    assert leftovers(base_dir) == []
    with pytest.raises(DataError, match="place it at"):
        create_dataset("tiny_imagenet", tmp_path / "elsewhere", download=False)
