"""ManifestSource: PNG files listed in Parquet / CSV manifests, decoded in DataLoader workers."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image

from components.data.batches import resize_images
from components.data.sources import ManifestSource, create_source, write_manifest
from components.errors import DataError
from tests.components.data.sources.source_files import chw, drain, images, save_png


def _files(tmp_path, n=10, channels=1, size=(6, 5)):
    imgs = images(n, size, channels)
    paths = [save_png(tmp_path / "img" / f"{k:02d}.png", imgs[k]) for k in range(n)]
    return imgs, paths


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_a_manifest_with_ids_and_text_labels(tmp_path, suffix):
    imgs, paths = _files(tmp_path)
    rel = [p.relative_to(tmp_path).as_posix() for p in paths]
    rel[3] = str(paths[3])  # absolute paths work too
    names = ["dog", "cat", None, "eel", "cat", "dog", "cat", "eel", "dog", "cat"]
    ids = 1000 - 7 * np.arange(10)
    manifest = write_manifest(tmp_path / f"m{suffix}", rel, ids, names)
    src = ManifestSource(manifest)
    assert len(src) == 10 and src.name == "m" and src.channels == 1 and src.native_hw == (6, 5)
    assert src.class_names == ("cat", "dog", "eel") and not src.labelled
    np.testing.assert_array_equal(src.ids, ids)
    np.testing.assert_array_equal(src.labels, [1, 0, -1, 2, 0, 1, 0, 2, 1, 0])
    order, items = drain(src, batch_size=3, workers=2)
    assert order == ids.tolist()  # map-style: positions order even with workers
    for k, sid in enumerate(ids.tolist()):
        assert torch.equal(items[sid][0], chw(imgs[k])) and items[sid][1] == src.labels[k]


def test_without_id_or_label_columns_rows_are_ids_and_unlabelled(tmp_path):
    imgs, paths = _files(tmp_path, 5, channels=3)
    pq.write_table(pa.table({"path": [str(p) for p in paths], "extra": list(range(5))}), tmp_path / "m.parquet")
    src = create_source("manifest", tmp_path / "m.parquet")
    np.testing.assert_array_equal(src.ids, np.arange(5))
    np.testing.assert_array_equal(src.labels, -np.ones(5))
    assert src.class_names == () and src.channels == 3
    _, items = drain(src, np.array([4, 1]))
    assert sorted(items) == [1, 4] and torch.equal(items[4][0], chw(imgs[4]))


def test_integer_labels_channels_override_and_resize(tmp_path):
    imgs, paths = _files(tmp_path, 6, channels=3, size=(8, 8))
    write_manifest(tmp_path / "m.csv", [p.name for p in paths], labels=[0, 2, 1, 0, 2, 1])
    (tmp_path / "m.csv").rename(tmp_path / "img" / "m.csv")  # paths relative to the manifest's folder
    src = ManifestSource(tmp_path / "img" / "m.csv", channels=1, class_names=["a", "b", "c"])
    assert src.class_names == ("a", "b", "c") and src.labelled and src.channels == 1
    _, items = drain(src, image_size=4)
    grey = np.stack([np.asarray(Image.fromarray(i).convert("L")) for i in imgs])[..., None]
    want = resize_images(grey, 4)
    for k in range(6):
        assert items[k][0].shape == (1, 4, 4) and torch.equal(items[k][0], chw(want[k]))
    assert ManifestSource(tmp_path / "img" / "m.csv").class_names == ("0", "1", "2")


def test_mixed_sizes_need_image_size(tmp_path):
    _imgs, paths = _files(tmp_path, 4)
    save_png(paths[2], images(1, (9, 9))[0])
    src = ManifestSource(write_manifest(tmp_path / "m.parquet", [str(p) for p in paths]))
    with pytest.raises(DataError, match=r"02\.png is 9×9 pixels but the source's first image is 5×6.*image_size="):
        drain(src)
    _, items = drain(src, image_size=7)
    assert all(v[0].shape == (1, 7, 7) for v in items.values())


def test_shuffle_is_seeded(tmp_path):
    _, paths = _files(tmp_path, 12)
    src = ManifestSource(write_manifest(tmp_path / "m.parquet", [str(p) for p in paths]))
    a = drain(src, shuffle=True, seed=1, epoch=0)[0]
    assert a == drain(src, shuffle=True, seed=1, epoch=0, workers=2)[0]
    assert a != drain(src, shuffle=True, seed=1, epoch=1)[0] and sorted(a) == list(range(12))


def test_bad_manifests_are_refused_with_the_fix(tmp_path):
    _, paths = _files(tmp_path, 3)
    with pytest.raises(DataError, match=r"manifest .*nope.parquet does not exist"):
        ManifestSource(tmp_path / "nope.parquet")
    pq.write_table(pa.table({"file": ["a.png"]}), tmp_path / "cols.parquet")
    with pytest.raises(DataError, match=r"has no column 'path' \(columns: \['file'\]\); a manifest needs"):
        ManifestSource(tmp_path / "cols.parquet")
    pq.write_table(pa.table({"path": [str(p) for p in paths], "id": [1, 2, 1]}), tmp_path / "dup.parquet")
    with pytest.raises(DataError, match=r"has 1 duplicated ids, e.g. \[1\]; every id must be unique"):
        ManifestSource(tmp_path / "dup.parquet")
    pq.write_table(pa.table({"path": [str(p) for p in paths], "id": [1.5, 2.0, 3.0]}), tmp_path / "fid.parquet")
    with pytest.raises(DataError, match="column 'id' .* holds double, not integers"):
        ManifestSource(tmp_path / "fid.parquet")
    pq.write_table(pa.table({"path": [str(paths[0]), None]}), tmp_path / "nopath.parquet")
    with pytest.raises(DataError, match=r"rows without a path \(rows \[1\]\)"):
        ManifestSource(tmp_path / "nopath.parquet")
    (tmp_path / "m.txt").write_text("path\n")
    with pytest.raises(DataError, match="neither .parquet nor .csv"):
        ManifestSource(tmp_path / "m.txt")
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")
    with pytest.raises(DataError, match="cannot read manifest .*broken.parquet"):
        ManifestSource(tmp_path / "broken.parquet")


def test_a_corrupt_or_missing_image_names_the_file(tmp_path):
    _, paths = _files(tmp_path, 3)
    paths[1].write_bytes(b"\x89PNG garbage")
    src = ManifestSource(write_manifest(tmp_path / "m.parquet", [str(p) for p in paths]))
    with pytest.raises(DataError, match=r"cannot decode image .*01\.png .*remove its row from manifest"):
        drain(src, workers=1)
    paths[1].unlink()
    with pytest.raises(DataError, match=r"cannot read image file .*01\.png"):
        src.fingerprint()


def test_fingerprint_changes_with_a_file(tmp_path):
    _imgs, paths = _files(tmp_path, 3)
    m = write_manifest(tmp_path / "m.parquet", [str(p) for p in paths])
    fp = ManifestSource(m).fingerprint()
    assert ManifestSource(m).fingerprint() == fp
    save_png(paths[0], images(1, (7, 7), seed=5)[0])
    assert ManifestSource(m).fingerprint() != fp
