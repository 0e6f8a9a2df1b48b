"""ImageFolderSource: class-per-folder trees and flat folders of real PNG / JPEG files."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from components.data.sources import ImageFolderSource, create_source
from components.data.sources.folder import path_id
from components.errors import DataError
from tests.components.data.sources.source_files import chw, drain, images, save_png


def _tree(top, channels=3):
    imgs = images(7, (5, 5), channels)
    files = ["cat/a.png", "cat/sub/b.png", "dog/c.PNG", "dog/d.png", "eel/e.png", "eel/f.png", "eel/g.png"]
    for rel, img in zip(files, imgs):
        save_png(top / rel, img)
    (top / "dog" / "notes.txt").write_text("not an image")
    (top / ".cache").mkdir()
    save_png(top / "eel" / ".hidden.png", imgs[0])
    return files, imgs


def test_class_folders_give_labels_positions_and_path_hash_ids(tmp_path):
    files, imgs = _tree(tmp_path / "tree")
    src = ImageFolderSource(tmp_path / "tree")
    assert len(src) == 7 and src.class_names == ("cat", "dog", "eel") and src.labelled and src.channels == 3
    np.testing.assert_array_equal(src.labels, [0, 0, 1, 1, 2, 2, 2])
    np.testing.assert_array_equal(src.ids, [path_id(f) for f in files])
    assert (src.ids >= 0).all() and len(set(src.ids.tolist())) == 7
    order, items = drain(src, batch_size=3, workers=2)
    assert order == src.ids.tolist()
    for k, sid in enumerate(src.ids.tolist()):
        assert torch.equal(items[sid][0], chw(imgs[k])) and items[sid][1] == src.labels[k]


def test_ids_survive_added_files_and_the_fingerprint_notices(tmp_path):
    _tree(tmp_path / "tree")
    before = ImageFolderSource(tmp_path / "tree")
    save_png(tmp_path / "tree" / "cat" / "0first.png", images(1, (5, 5), 3, seed=9)[0])
    after = ImageFolderSource(tmp_path / "tree")
    assert len(after) == 8 and set(before.ids.tolist()) < set(after.ids.tolist())
    assert after.fingerprint() != before.fingerprint()
    assert ImageFolderSource(tmp_path / "tree").fingerprint() == after.fingerprint()


def test_a_flat_folder_is_unlabelled(tmp_path):
    imgs = images(4, (6, 4), 1)
    for k, img in enumerate(imgs):
        save_png(tmp_path / "flat" / f"{k}.png", img)
    src = create_source("folder", tmp_path / "flat")
    assert src.class_names == () and not src.labelled and src.channels == 1
    np.testing.assert_array_equal(src.labels, [-1, -1, -1, -1])
    _, items = drain(src, np.array([2, 0]))
    assert torch.equal(items[src.ids[2]][0], chw(imgs[2])) and items[src.ids[2]][1] == -1


def test_jpeg_and_grey_conversion(tmp_path):
    from PIL import Image

    (tmp_path / "j" / "a").mkdir(parents=True)
    Image.new("RGB", (9, 7), (200, 40, 40)).save(tmp_path / "j" / "a" / "x.jpg", quality=95)
    src = ImageFolderSource(tmp_path / "j", channels=1)
    x, _y, _ = next(iter(src.loader(batch_size=1)))
    assert x.shape == (1, 1, 7, 9) and abs(float(x.float().mean()) - (0.299 * 200 + 0.587 * 40 + 0.114 * 40)) < 3


def test_unusable_folders_are_refused(tmp_path):
    with pytest.raises(DataError, match=r"image folder .*missing does not exist"):
        ImageFolderSource(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds no images"):
        ImageFolderSource(tmp_path / "empty")
    save_png(tmp_path / "mixed" / "cls" / "a.png", images(1)[0])
    save_png(tmp_path / "mixed" / "loose.png", images(1)[0])
    with pytest.raises(DataError, match=r"holds class folders \['cls'\] and loose images \['loose.png'\]"):
        ImageFolderSource(tmp_path / "mixed")
    (tmp_path / "hollow" / "a").mkdir(parents=True)
    save_png(tmp_path / "hollow" / "b" / "x.png", images(1)[0])
    with pytest.raises(DataError, match=r"class folders \['a'\] .* hold no images"):
        ImageFolderSource(tmp_path / "hollow")


def test_a_corrupt_file_names_itself(tmp_path):
    _tree(tmp_path / "tree")
    (tmp_path / "tree" / "dog" / "d.png").write_bytes(b"junk")
    src = ImageFolderSource(tmp_path / "tree")
    with pytest.raises(DataError, match=r"cannot decode image .*dog/d\.png .*replace the file with a valid image"):
        drain(src)
