"""The image_folder loader on real PNG/JPEG trees of mixed sizes and modes."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from components.data import create_dataset
from components.errors import DataError

COLOURS = {"cat": (220, 30, 30), "dog": (30, 200, 30), "eel": (20, 20, 230)}


def _png(path: Path, size: tuple[int, int], colour, mode: str = "RGB") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    im = Image.new("RGB", size, colour)
    if mode != "RGB":
        im = im.convert(mode)
    im.save(path)


def _flat_tree(top: Path, per_class: int = 5) -> Path:
    for ci, (c, colour) in enumerate(COLOURS.items()):
        for i in range(per_class):
            ext = ".PNG" if i == 0 else (".jpg" if i == 1 else ".png")
            _png(top / c / f"img{i}{ext}", (10 + 7 * i + ci, 12 + 3 * i), colour, mode="RGBA" if i == 2 else "RGB")
    _png(top / "cat" / "nested" / "deep.png", (40, 20), COLOURS["cat"])  # searched recursively
    (top / "cat" / "notes.txt").write_text("not an image")
    (top / ".hidden").mkdir()
    return top


def _load(root, top, **kw):
    kw.setdefault("image_size", 16)
    return create_dataset("image_folder", root, path=str(top), **kw)


def test_flat_tree_stratified_split(tmp_path):
    top = _flat_tree(tmp_path / "tree")
    d = _load(tmp_path / "root", top, test_fraction=0.4, split_seed=1)
    assert d.train.class_names == ("cat", "dog", "eel")
    n = {"cat": 6, "dog": 5, "eel": 5}
    assert len(d.train) + len(d.test) == 16
    assert np.bincount(d.test.labels, minlength=3).tolist() == [round(6 * 0.4), 2, 2]
    assert d.train.decode().images.shape[1:] == (16, 16, 3) and d.train.decode().images.dtype == np.uint8
    assert sorted(np.concatenate([d.train.ids, d.test.ids]).tolist()) == list(range(16))
    for part in (d.train, d.test):  # every image is its class colour (resized, RGBA/JPEG converted to RGB)
        for img, lab in zip(part.decode().images, part.labels):
            assert np.allclose(img.reshape(-1, 3).mean(axis=0), list(COLOURS.values())[lab], atol=6)
    assert d.meta["split"] == "stratified|0.4|1" and d.meta["source"] == str(top.resolve())
    assert sum(n.values()) == d.meta["num_files"]

    again = _load(tmp_path / "root", top, test_fraction=0.4, split_seed=1)
    assert again.fingerprint == d.fingerprint and np.array_equal(again.test.ids, d.test.ids)
    assert _load(tmp_path / "root", top, test_fraction=0.4, split_seed=2).fingerprint != d.fingerprint
    bigger = _load(tmp_path / "root", top, test_fraction=0.4, split_seed=1, image_size=24)
    assert bigger.train.image_shape == (24, 24, 3) and bigger.fingerprint != d.fingerprint


def test_edited_tree_is_decoded_again(tmp_path):
    top = _flat_tree(tmp_path / "tree")
    d = _load(tmp_path / "root", top)
    _png(top / "dog" / "img0.PNG", (30, 30), (255, 255, 0))
    os.utime(top / "dog" / "img0.PNG", ns=(1, 1))  # a different mtime even on coarse clocks
    e = _load(tmp_path / "root", top)
    assert e.fingerprint != d.fingerprint
    pos = 6  # dog/img0.PNG: first dog file after the 6 cat files
    full = np.concatenate([e.train.decode().images, e.test.decode().images])[
        np.argsort(np.concatenate([e.train.ids, e.test.ids]))
    ]
    assert np.allclose(full[pos].reshape(-1, 3).mean(axis=0), (255, 255, 0), atol=3)


@pytest.mark.parametrize("test_name", ["test", "val"])
def test_train_test_folders_are_the_split(tmp_path, test_name):
    top = tmp_path / "tree"
    for c, colour in COLOURS.items():
        for i in range(3):
            _png(top / "train" / c / f"{i}.png", (8 + i, 9), colour)
    _png(top / test_name / "dog" / "a.png", (33, 17), COLOURS["dog"])
    _png(top / test_name / "eel" / "b.jpeg", (5, 50), COLOURS["eel"])
    d = _load(tmp_path / "root", top, test_fraction=0.9)
    assert d.train.class_names == d.test.class_names == ("cat", "dog", "eel")
    assert len(d.train) == 9 and d.test.labels.tolist() == [1, 2]
    assert d.train.ids.tolist() == list(range(9)) and d.test.ids.tolist() == [9, 10]
    assert d.meta["split"] == f"folders train/{test_name}"
    assert np.allclose(d.test.decode().images[1].reshape(-1, 3).mean(axis=0), COLOURS["eel"], atol=6)

    _png(top / test_name / "fox" / "c.png", (8, 8), (0, 0, 0))
    with pytest.raises(DataError, match=r"\['fox'\].*not in"):
        _load(tmp_path / "root", top)


def test_configuration_errors(tmp_path):
    top = _flat_tree(tmp_path / "tree")
    with pytest.raises(DataError, match="data.path"):
        create_dataset("image_folder", tmp_path / "root", image_size=16)
    with pytest.raises(DataError, match="data.image_size"):
        create_dataset("image_folder", tmp_path / "root", path=str(top))
    with pytest.raises(DataError, match="is not a folder"):
        _load(tmp_path / "root", tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no class folders"):
        _load(tmp_path / "root", tmp_path / "empty")
    (top / "fox").mkdir()
    with pytest.raises(DataError, match=r"\['fox'\].*hold no images"):
        _load(tmp_path / "root", top)


def test_unreadable_image_is_named(tmp_path):
    top = _flat_tree(tmp_path / "tree")
    bad = top / "eel" / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 10)
    with pytest.raises(DataError, match=r"cannot read image .*eel/broken\.png") as info:
        _load(tmp_path / "root", top)
    assert "replace it" in str(info.value)
    assert not any((tmp_path / "root" / "image_folder").glob("*.npz"))
