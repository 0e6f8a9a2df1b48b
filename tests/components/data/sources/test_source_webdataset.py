"""WebDatasetSource: tar shards written by write_webdataset, their index, selection, workers, shuffling."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest
import torch

from components.data.batches import resize_images
from components.data.sources import WebDatasetSource, create_source, write_webdataset
from components.data.sources.shard_index import INDEX_NAME
from components.errors import DataError
from tests.components.data.sources.source_files import chw, drain, images

N = 53


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """53 grey 6×5 images in shards of 20 (3 shards), ids 500 - 3k, labels k % 4 with every 7th unlabelled."""
    folder = tmp_path_factory.mktemp("wds") / "shards"
    imgs = images(N)
    labels = np.where(np.arange(N) % 7 == 3, -1, np.arange(N) % 4)
    ids = 500 - 3 * np.arange(N)
    batches = [(imgs[s : s + 8], labels[s : s + 8], ids[s : s + 8]) for s in range(0, N, 8)]
    src = write_webdataset(folder, batches, shard_size=20, class_names=["a", "b", "c", "d"])
    return src, imgs, labels, ids


def test_len_ids_labels_come_from_the_index(corpus):
    src, _, labels, ids = corpus
    assert len(src) == N and src.index.shards == ("shard-000000.tar", "shard-000001.tar", "shard-000002.tar")
    np.testing.assert_array_equal(src.ids, ids)
    np.testing.assert_array_equal(src.labels, labels)
    np.testing.assert_array_equal(src.index.position, np.arange(N) % 20)
    assert src.class_names == ("a", "b", "c", "d") and not src.labelled
    assert src.channels == 1 and src.native_hw == (6, 5)
    np.testing.assert_array_equal(src.item_positions(ids[[9, 40]]), [9, 40])


@pytest.mark.parametrize("workers", [0, 2])
def test_a_full_pass_yields_every_item_once_with_its_label_and_pixels(corpus, workers):
    src, imgs, labels, ids = corpus
    order, items = drain(src, batch_size=6, workers=workers)
    assert sorted(order) == sorted(ids.tolist()) and len(order) == N
    if workers == 0:
        assert order == ids.tolist()  # one reader: index order
    for k, sid in enumerate(ids.tolist()):
        assert items[sid][1] == labels[k] and torch.equal(items[sid][0], chw(imgs[k]))


def test_a_subset_reads_only_its_shards(corpus, monkeypatch):
    src, imgs, _, ids = corpus
    pos = np.array([45, 2, 50, 7])
    opened = []
    real = tarfile.open

    def spy(*a, **kw):
        opened.append(str(kw.get("fileobj", a[0] if a else None)))
        return real(*a, **kw)

    monkeypatch.setattr(tarfile, "open", spy)
    order, items = drain(src, pos, batch_size=3)
    assert sorted(order) == sorted(ids[pos].tolist())
    assert torch.equal(items[ids[45]][0], chw(imgs[45]))
    assert len(opened) == 2 and not any("shard-000001" in o for o in opened)  # shards 0 and 2 only
    _, items2 = drain(src, pos, batch_size=3, workers=2)
    assert sorted(items2) == sorted(ids[pos].tolist())


def test_a_subset_reads_only_its_samples_in_storage_order(corpus, monkeypatch):
    """A partial read seeks to the selected samples: it reads their members' headers (3 each at most: cls, id,
    image), not every member of the shards that hold them."""
    src, imgs, _, ids = corpus
    headers = []
    real = tarfile.TarInfo.fromtarfile.__func__

    def spy(cls, tf):
        headers.append(1)
        return real(cls, tf)

    monkeypatch.setattr(tarfile.TarInfo, "fromtarfile", classmethod(spy))
    pos = np.array([45, 2, 50, 7])
    order, items = drain(src, pos, batch_size=3)
    assert order == ids[np.sort(pos)].tolist()  # storage order, whatever the order asked
    assert all(torch.equal(items[ids[k]][0], chw(imgs[k])) for k in pos)
    assert len(headers) <= 2 + 3 * len(pos)  # the 2 shards' first headers (opening), then each sample's members


def test_shuffle_is_seeded_per_epoch(corpus):
    src, _, _, ids = corpus
    a = drain(src, batch_size=5, shuffle=True, seed=2, epoch=0)[0]
    assert a == drain(src, batch_size=5, shuffle=True, seed=2, epoch=0)[0]
    assert a != drain(src, batch_size=5, shuffle=True, seed=2, epoch=1)[0]
    assert sorted(a) == sorted(ids.tolist()) and a != ids.tolist()
    w = drain(src, batch_size=5, shuffle=True, seed=2, epoch=0, workers=2)[0]
    assert sorted(w) == sorted(ids.tolist())
    sub = drain(src, np.arange(10, 30), batch_size=5, shuffle=True, epoch=3)[0]
    assert sorted(sub) == sorted(ids[10:30].tolist())


def test_image_size_and_drop_last(corpus):
    src, imgs, _, ids = corpus
    _, items = drain(src, batch_size=8, image_size=3)
    want = resize_images(imgs, 3)
    assert all(torch.equal(items[sid][0], chw(want[k])) for k, sid in enumerate(ids.tolist()))
    sizes = [len(b[2]) for b in src.loader(batch_size=10, drop_last=True)]
    assert sizes == [10] * 5 and len(src.loader(batch_size=10)) == 6


def test_a_deleted_index_is_rebuilt_identically(corpus):
    src, _, _, _ = corpus
    index = src.path / INDEX_NAME
    assert WebDatasetSource(src.path).fingerprint() == src.fingerprint()
    index.unlink()
    again = WebDatasetSource(src.path)
    assert index.is_file() and not list(src.path.glob(".index.parquet.*"))  # cached, no temp file left
    assert again.fingerprint() == src.fingerprint()
    for a, b in zip(
        (again.ids, again.labels, again.index.shard, again.index.position),
        (src.ids, src.labels, src.index.shard, src.index.position),
    ):
        np.testing.assert_array_equal(a, b)
    assert again.native_hw == src.native_hw and again.channels == src.channels
    assert again.class_names == ("0", "1", "2", "3")  # names were only in the deleted index
    assert WebDatasetSource(src.path, class_names=list("abcd")).class_names == tuple("abcd")


def test_unlabelled_samples_and_rgb(tmp_path):
    rgb = images(5, (4, 4), 3)
    src = write_webdataset(tmp_path / "rgb", [(rgb, -np.ones(5, np.int64), np.arange(5))], image_format="npy")
    assert src.channels == 3 and src.class_names == () and not src.labelled
    _, items = drain(src)
    assert all(torch.equal(items[k][0], chw(rgb[k])) and items[k][1] == -1 for k in range(5))
    with tarfile.open(src.shard_paths[0]) as tf:
        assert sorted(tf.getnames())[:2] == ["0.id", "0.npy"] and "0.cls" not in tf.getnames()


def test_broken_corpora_are_refused_with_the_fix(tmp_path):
    with pytest.raises(DataError, match=r"WebDataset folder .*nope does not exist"):
        WebDatasetSource(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds no .tar shards; write them with write_webdataset"):
        create_source("webdataset", tmp_path / "empty")
    two = [(images(3), np.zeros(3, np.int64), np.array([1, 2, 3]))] * 2
    with pytest.raises(DataError, match=r"has 3 duplicated ids, e.g. \[1, 2, 3\]"):
        write_webdataset(tmp_path / "dup", two)
    with pytest.raises(DataError, match=r"has 3 duplicated ids"):
        WebDatasetSource(tmp_path / "dup")  # the scan of the shards finds them too
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "a.tar").write_bytes(b"not a tar at all" * 100)
    with pytest.raises(DataError, match=r"cannot read shard .*a\.tar"):
        WebDatasetSource(tmp_path / "junk")


def test_a_corrupt_image_names_the_shard_and_sample(tmp_path):
    folder = tmp_path / "bad"
    write_webdataset(folder, [(images(4), np.zeros(4, np.int64), np.arange(4))])
    shard = folder / "shard-000000.tar"
    with tarfile.open(shard) as tf:
        members = [(ti, tf.extractfile(ti).read()) for ti in tf.getmembers()]
    with tarfile.open(shard, "w") as tf:  # sample 2's png replaced by garbage of the same length
        for ti, data in members:
            if ti.name == "2.png":
                data = b"x" * len(data)
            tf.addfile(ti, io.BytesIO(data))
    src = WebDatasetSource(folder)  # stale index (mtime changed): rebuilt
    with pytest.raises(DataError, match=r"cannot decode image .*shard-000000\.tar:2\.png .*rewrite the shard"):
        drain(src)


def test_a_shard_that_no_longer_matches_its_index_is_refused_with_the_fix(tmp_path):
    """The index is trusted while a shard keeps its size and mtime: one changed behind it (same size, mtime put
    back) is refused where a sample is not where the index says, and a shard deleted after opening is named."""
    import os

    folder = tmp_path / "moved"
    src = write_webdataset(folder, [(images(4), np.zeros(4, np.int64), np.arange(4))])
    shard = src.shard_paths[0]
    st = shard.stat()
    with tarfile.open(shard) as tf:
        members = [(ti, tf.extractfile(ti).read()) for ti in tf.getmembers()]
    with tarfile.open(shard, "w") as tf:  # sample 2's image renamed: no image where the index puts sample 2
        for ti, data in members:
            ti.name = "2.pnx" if ti.name == "2.png" else ti.name
            tf.addfile(ti, io.BytesIO(data))
    assert shard.stat().st_size == st.st_size
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    stale = WebDatasetSource(folder)
    no_image = r"shard-000000\.tar does not match its index\.parquet at byte \d+ \(sample '2' has no image\); rewrite"
    with pytest.raises(DataError, match=no_image):
        drain(stale, np.array([2]))
    with open(shard, "r+b") as fh:  # a header overwritten: its checksum fails
        fh.seek(int(stale.index.offset[1]))
        fh.write(b"x" * 10)
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(DataError, match=r"does not match its index\.parquet at byte \d+ \(bad checksum\)"):
        drain(stale, np.array([1]))
    shard.unlink()
    with pytest.raises(DataError, match=r"cannot read WebDataset shard .*shard-000000\.tar \(FileNotFoundError"):
        drain(stale, np.array([0]))


def test_foreign_shards_are_indexed_by_a_scan_and_a_new_shard_is_noticed(tmp_path):
    import webdataset as wds

    from components.data.sources.writer import encode_image

    imgs = images(6, (4, 4), 3)
    folder = tmp_path / "foreign"
    folder.mkdir()

    def shard(name, ks):
        with wds.TarWriter(str(folder / name), encoder=False) as w:
            for k in ks:
                sample = {"__key__": f"dir/s{k:04d}", "jpeg" if k == 0 else "png": encode_image(imgs[k], "png")}
                sample["id"] = f" {70 + k}\n".encode()
                if k % 2:
                    sample["cls"] = str(k // 2).encode()
                w.write(sample)

    shard("a.tar", [0, 1, 2])
    src = WebDatasetSource(folder)
    np.testing.assert_array_equal(src.ids, [70, 71, 72])
    np.testing.assert_array_equal(src.labels, [-1, 0, -1])
    assert src.channels == 3 and src.native_hw == (4, 4) and (folder / INDEX_NAME).is_file()
    shard("b.tar", [3, 4, 5])
    grown = WebDatasetSource(folder)
    assert len(grown) == 6 and grown.index.shards == ("a.tar", "b.tar")
    np.testing.assert_array_equal(grown.labels, [-1, 0, -1, 1, -1, 2])
    _, items = drain(grown, np.array([0, 5]), workers=2)
    assert torch.equal(items[70][0], chw(imgs[0])) and items[75][1] == 2
