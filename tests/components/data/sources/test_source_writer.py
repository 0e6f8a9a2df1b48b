"""The writers: write_webdataset (formats, shards, atomic index) and write_manifest; the shared decoder."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import torch

from components.data.sources import write_manifest, write_webdataset
from components.data.sources.decode import decode_image, image_info, resize_uint8
from components.data.sources.shard_index import INDEX_NAME
from components.data.sources.writer import encode_image
from components.errors import DataError
from tests.components.data.sources.source_files import chw, drain, images


def test_shards_hold_shard_size_samples_and_rewriting_replaces_them(tmp_path):
    imgs = images(25)
    src = write_webdataset(tmp_path / "w", [(imgs, np.arange(25) % 2, np.arange(25))], shard_size=10)
    assert [p.name for p in src.shard_paths] == ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]
    with tarfile.open(src.shard_paths[2]) as tf:
        names = tf.getnames()
    assert sorted(names) == sorted(f"{k}.{e}" for k in range(20, 25) for e in ("png", "id", "cls"))
    table = pq.read_table(tmp_path / "w" / INDEX_NAME)
    assert table.column_names == ["shard", "id", "label", "position", "offset"] and table.num_rows == 25
    with tarfile.open(src.shard_paths[2]) as tf:  # each sample's offset: its first member's header
        starts = {ti.offset: ti.name.split(".")[0] for ti in tf.getmembers()}
    assert [starts.get(o) for o in src.index.offset[20:]] == [str(k) for k in range(20, 25)]
    again = write_webdataset(tmp_path / "w", [(imgs[:4], np.zeros(4, np.int64), np.arange(4))], shard_size=10)
    assert len(again) == 4 and len(again.shard_paths) == 1  # old shards removed
    assert not [p for p in (tmp_path / "w").iterdir() if p.name.startswith(".")]


def test_equal_input_gives_identical_tars(tmp_path):
    batch = [(images(6), np.arange(6), np.arange(6))]
    a = write_webdataset(tmp_path / "a", batch).shard_paths[0].read_bytes()
    b = write_webdataset(tmp_path / "b", batch).shard_paths[0].read_bytes()
    assert a == b


@pytest.mark.parametrize("fmt", ["png", "npy", "jpg"])
def test_every_format_round_trips(tmp_path, fmt):
    yy, xx = np.mgrid[0:8, 0:8]
    imgs = np.stack([np.stack([20 * yy + 5 * k, 20 * xx, 100 + 10 * k + 0 * xx], -1) for k in range(5)])
    imgs = imgs.astype(np.uint8)  # smooth images: JPEG stays close
    src = write_webdataset(tmp_path / fmt, [(imgs, np.arange(5), 10 + np.arange(5))], image_format=fmt)
    _, items = drain(src)
    for k in range(5):
        got = items[10 + k][0]
        if fmt == "jpg":  # lossy
            assert got.shape == (3, 8, 8) and (got.float() - chw(imgs[k]).float()).abs().mean() < 4
        else:
            assert torch.equal(got, chw(imgs[k]))


def test_bad_batches_are_refused(tmp_path):
    with pytest.raises(DataError, match=r"images must be uint8 \(B, H, W, C\)"):
        write_webdataset(tmp_path / "x", [(np.zeros((2, 4, 4), np.uint8), np.zeros(2), np.arange(2))])
    with pytest.raises(DataError, match=r"labels and ids must have shape \(2,\)"):
        write_webdataset(tmp_path / "x", [(images(2), np.zeros(3, np.int64), np.arange(2))])
    with pytest.raises(DataError, match="image_format 'gif' is not one of"):
        write_webdataset(tmp_path / "x", [], image_format="gif")


def test_write_manifest_parquet_and_csv(tmp_path):
    m = write_manifest(tmp_path / "m.parquet", ["a.png", "b.png"], [5, 6], ["x", None])
    t = pq.read_table(m)
    assert t.column("path").to_pylist() == ["a.png", "b.png"] and t.column("id").to_pylist() == [5, 6]
    assert t.column("label").to_pylist() == ["x", None]
    c = write_manifest(tmp_path / "sub" / "m.csv", ["a.png"], labels=np.array([3]))
    t = pacsv.read_csv(c)
    assert t.column_names == ["path", "label"] and t.column("label").to_pylist() == [3]
    with pytest.raises(DataError, match="must end in .parquet, .pq or .csv"):
        write_manifest(tmp_path / "m.json", ["a.png"])
    with pytest.raises(DataError, match="2 ids for 1 paths"):
        write_manifest(tmp_path / "m.csv", ["a.png"], [1, 2])


def test_decoder_npy_grey_rgb_and_resize():
    rgb = images(1, (4, 6), 3)[0]
    data = encode_image(rgb, "npy")
    assert image_info(data, name="x", hint="") == (3, 4, 6)
    assert torch.equal(decode_image(data, channels=3, name="x", hint=""), chw(rgb))
    from PIL import Image

    grey = np.array(Image.fromarray(rgb).convert("L"))
    got = decode_image(data, channels=1, name="x", hint="")
    assert got.shape == (1, 4, 6) and (got[0].int() - torch.from_numpy(grey).int()).abs().max() <= 1
    png = encode_image(rgb[:, :, :1], "png")
    assert image_info(png, name="x", hint="") == (1, 4, 6)
    assert torch.equal(decode_image(png, channels=3, name="x", hint="")[1], torch.from_numpy(rgb[:, :, 0]))
    x = torch.from_numpy(images(2, (9, 9), 1)).permute(0, 3, 1, 2)
    assert resize_uint8(x, 9) is x and resize_uint8(x, 4).shape == (2, 1, 4, 4)
    with pytest.raises(DataError, match=r"cannot decode image bad\.png \(.*\); fix it"):
        decode_image(io.BytesIO(b"\x89PNG\r\n\x1a\nxx").getvalue(), channels=1, name="bad.png", hint="fix it")


def test_the_decoders_check_sees_the_header_before_the_pixels_are_decoded(monkeypatch):
    """``check`` gets what image_info reports (and whether it is a .npy) once the header is read; raising refuses
    the image before Pillow decodes its pixels (a query service's size limit), and passing decodes it as before."""
    rgb = images(1, (4, 6), 3)[0]
    png, npy = encode_image(rgb, "png"), encode_image(rgb, "npy")
    seen = []
    for data in (png, npy):
        got = decode_image(data, channels=3, name="x", hint="", check=lambda *a: seen.append(a))
        assert torch.equal(got, decode_image(data, channels=3, name="x", hint=""))
    assert seen == [(3, 4, 6, False), (3, 4, 6, True)]

    class TooLarge(Exception):
        pass

    def refuse(*_):
        raise TooLarge

    decoded = []
    from PIL import ImageFile

    real = ImageFile.ImageFile.load
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: decoded.append(1) or real(self))
    with pytest.raises(TooLarge):
        decode_image(png, channels=3, name="x", hint="", check=refuse)
    assert decoded == []
