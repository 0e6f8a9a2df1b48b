"""The part store of a large gallery: chunked writes, resume, streaming reads, mixing a partial backfill."""

from __future__ import annotations

import json

import numpy as np
import pytest

from components.errors import IndexIntegrityError
from components.indexing.parts import GalleryParts, PartWriter, StoredPart, link_store, mix_stores
from tests.components.indexing.gallery_data import lorentz_gallery as _gallery


def _part(ids: np.ndarray, generation: int, seed: int = 0) -> StoredPart:
    return StoredPart(_gallery(ids, seed), np.full(len(ids), generation, np.int64))


def test_writer_cuts_parts_of_chunk_size_and_the_store_streams_them_back(tmp_path):
    writer = PartWriter(tmp_path / "s", chunk_size=4)
    for start in (0, 3, 6):  # batches of 3 items: parts of 4, 4, 1
        writer.add(_part(np.arange(start, start + 3), generation=2, seed=start))
    store = writer.finish()
    assert len(store) == 9
    assert [len(p) for p in store.parts()] == [4, 4, 1] == store.part_sizes()  # the sizes from store.json
    assert [p.gallery.ids[0] for p in store.parts(1)] == [4, 8]  # from the second part
    np.testing.assert_array_equal(store.column("ids"), np.arange(9))
    np.testing.assert_array_equal(store.column("stamps"), np.full(9, 2))
    whole = store.load_all().gallery
    np.testing.assert_array_equal(whole.z[3:6], _gallery(np.arange(3, 6), seed=3).z)
    # index chunks: hyperboloid points (d+1), one chunk per part
    chunks = list(store.index_chunks()())
    assert [c[0].shape for c in chunks] == [(4, 5), (4, 5), (1, 5)]
    assert np.allclose(chunks[0][0][:, 0] ** 2 - (chunks[0][0][:, 1:] ** 2).sum(1), 1.0)


def test_a_killed_writer_keeps_finished_parts_and_the_resumed_one_writes_only_the_missing_ones(tmp_path):
    first = PartWriter(tmp_path / "s", chunk_size=4)
    first.add(_part(np.arange(0, 6), generation=1))  # one part written, 2 items still buffered: "killed" here
    resumed = PartWriter(tmp_path / "s", chunk_size=4, first_part=1)
    assert resumed.missing_parts(3) == [1, 2]  # part 0 (items 0–3) kept
    resumed.add(_part(np.arange(4, 10), generation=1))
    store = resumed.finish()
    np.testing.assert_array_equal(np.sort(store.column("ids")), np.arange(10))


def test_an_unfinished_store_and_duplicate_ids_are_refused(tmp_path):
    w = PartWriter(tmp_path / "s", chunk_size=2)
    w.add(_part(np.arange(2), generation=0))
    with pytest.raises(IndexIntegrityError, match="never finished; run it again to resume"):
        GalleryParts(tmp_path / "s")
    w.add(_part(np.arange(1, 3), generation=0))
    with pytest.raises(IndexIntegrityError, match="duplicate ids"):
        w.finish()
    with pytest.raises(IndexIntegrityError, match="the gallery source is empty"):
        PartWriter(tmp_path / "empty", chunk_size=2).finish()


def test_a_legacy_single_file_gallery_reads_as_one_part_with_its_stamps(tmp_path):
    g = _gallery(np.arange(5))
    g.save(tmp_path / "gallery.npz")
    store = GalleryParts(tmp_path / "gallery.npz", generation=3)
    np.testing.assert_array_equal(store.column("stamps"), np.full(5, 3))
    np.save(tmp_path / "stamps.npy", np.array([0, 1, 2, 3, 4]))
    np.testing.assert_array_equal(GalleryParts(tmp_path / "gallery.npz").column("stamps"), np.arange(5))


def test_mixing_swaps_exactly_the_reembedded_items_part_by_part(tmp_path):
    cw = PartWriter(tmp_path / "cur", chunk_size=4)
    cw.add(_part(np.arange(10), generation=0, seed=1))
    current = cw.finish()
    rw = PartWriter(tmp_path / "rep", chunk_size=4)
    rw.add(_part(np.array([7, 2, 5]), generation=4, seed=2))
    mixed = mix_stores(current, rw.finish(), PartWriter(tmp_path / "mix", chunk_size=4))
    stamps = mixed.column("stamps")
    np.testing.assert_array_equal(np.flatnonzero(stamps == 4), [2, 5, 7])
    z = mixed.load_all().gallery.z
    rep = _gallery(np.array([7, 2, 5]), seed=2).z
    np.testing.assert_array_equal(z[[7, 2, 5]], rep)
    np.testing.assert_array_equal(z[[0, 1, 3]], _gallery(np.arange(10), seed=1).z[[0, 1, 3]])
    stray = PartWriter(tmp_path / "stray", chunk_size=4)
    stray.add(_part(np.array([42]), generation=4))
    with pytest.raises(IndexIntegrityError, match="not in the live gallery"):
        mix_stores(current, stray.finish(), PartWriter(tmp_path / "mix2", chunk_size=4))


def test_windows_cut_the_rows_in_store_order_whatever_the_parts_sizes(tmp_path):
    writer = PartWriter(tmp_path / "s", chunk_size=5)
    writer.add(_part(np.arange(12), generation=1, seed=3))  # parts of 5, 5, 2
    store = writer.finish()
    windows = list(store.windows(4))
    assert [len(w) for w in windows] == [4, 4, 4]
    np.testing.assert_array_equal(np.concatenate([w.gallery.ids for w in windows]), np.arange(12))
    np.testing.assert_array_equal(windows[1].gallery.z, _gallery(np.arange(12), seed=3).z[4:8])
    assert [len(w) for w in store.windows(7)] == [7, 5]


def test_rows_a_bridge_carried_keep_its_id_through_the_store_and_a_mix(tmp_path):
    """A gallery transform stamps each row with the bridge that carried it (0: embedded by a model); the column
    reads back, defaults to 0 for parts without it, and survives a partial backfill's mix row by row."""
    cw = PartWriter(tmp_path / "cur", chunk_size=4)
    ids = np.arange(6)
    cw.add(StoredPart(_gallery(ids), np.full(6, 2, np.int64), np.full(6, 9, np.int64)))  # carried by bridge 9
    current = cw.finish()
    np.testing.assert_array_equal(current.column("bridges"), np.full(6, 9))
    rw = PartWriter(tmp_path / "rep", chunk_size=4)
    rw.add(_part(np.array([4, 1]), generation=2, seed=5))  # re-embedded by generation 2's model
    replacement = rw.finish()
    np.testing.assert_array_equal(replacement.column("bridges"), [0, 0])
    mixed = mix_stores(current, replacement, PartWriter(tmp_path / "mix", chunk_size=4))
    np.testing.assert_array_equal(mixed.column("bridges"), [9, 0, 9, 9, 0, 9])
    np.testing.assert_array_equal(mixed.load_all().bridge_ids(), [9, 0, 9, 9, 0, 9])


def test_parts_of_another_producer_are_stale_and_the_store_starts_over(tmp_path):
    first = PartWriter(tmp_path / "s", chunk_size=4, producer="model a")
    first.add(_part(np.arange(0, 6), generation=1))  # one part written, then "killed"
    same = PartWriter(tmp_path / "s", chunk_size=4, producer="model a")
    assert same.missing_parts(2) == [1]  # the same model resumes
    other = PartWriter(tmp_path / "s", chunk_size=4, producer="model b")  # trained again: its parts are stale
    assert other.missing_parts(2) == [0, 1] and other.part_files() == []
    other.add(_part(np.arange(3), generation=2))
    store = other.finish()
    np.testing.assert_array_equal(store.column("stamps"), [2, 2, 2])
    np.testing.assert_array_equal(store.embeddings().z, _gallery(np.arange(3)).z)


def test_a_finished_store_is_linked_into_another_folder_without_copying(tmp_path):
    w = PartWriter(tmp_path / "work", chunk_size=4)
    w.add(_part(np.arange(10), generation=3))
    work = w.finish()
    linked = link_store(work, tmp_path / "published")
    assert len(linked) == 10 and linked.meta == work.meta
    for a, b in zip(work.part_paths(), linked.part_paths()):
        assert a.stat().st_ino == b.stat().st_ino  # the same file: hard links
    np.testing.assert_array_equal(linked.column("stamps"), np.full(10, 3))
    _gallery(np.arange(5)).save(tmp_path / "gallery.npz")
    with pytest.raises(IndexIntegrityError, match="single-file gallery, not a part store"):
        link_store(GalleryParts(tmp_path / "gallery.npz"), tmp_path / "nope")


def _finished(tmp_path, name: str = "s") -> GalleryParts:
    writer = PartWriter(tmp_path / name, chunk_size=4)
    writer.add(_part(np.arange(10), generation=1))
    return writer.finish()


def test_store_json_pins_every_part_and_verify_finds_a_replaced_one(tmp_path):
    """``store.json`` lists each part with its sha256, so the sha256 of ``store.json`` (:meth:`GalleryParts.digest`,
    what the lineage pins) pins the whole gallery; :meth:`GalleryParts.verify` checks the parts against it."""
    store = _finished(tmp_path)
    store.verify()
    digest = store.digest()
    assert all(len(entry) == 3 and len(entry[2]) == 64 for entry in store.meta["parts"])
    assert digest == _finished(tmp_path, "again").digest()  # the same rows, the same pin
    other = PartWriter(tmp_path / "other", chunk_size=4)
    other.add(_part(np.arange(10), generation=1, seed=5))
    replacement = other.finish().part_paths()[1]
    store.part_paths()[1].write_bytes(replacement.read_bytes())  # a valid part, but not this store's
    with pytest.raises(IndexIntegrityError) as info:
        GalleryParts(store.path).verify()
    msg = str(info.value)
    assert f"gallery part {store.part_paths()[1]} is not the file {store.path / 'store.json'} lists" in msg
    assert "restore" in msg and "\n" not in msg
    assert GalleryParts(store.path).digest() == digest  # store.json untouched: verify is what finds it


@pytest.mark.parametrize("where", ["part", "store.json", "legacy gallery.npz"])
def test_garbage_in_a_gallery_is_refused_without_numpys_pickle_advice(tmp_path, where: str):
    """numpy refuses bytes it cannot read as an .npz archive with advice to load them with ``allow_pickle``, which
    would run code the file carries: bctflow's message never passes it on."""
    store = _finished(tmp_path)
    garbage = b"this is no gallery" * 50
    if where == "part":
        meta = json.loads((store.path / "store.json").read_text())
        meta["parts"] = [entry[:2] for entry in meta["parts"]]  # a store written before the parts' digests
        (store.path / "store.json").write_text(json.dumps(meta))
        store.part_paths()[0].write_bytes(garbage)
        path = store.path
    elif where == "store.json":
        (store.path / "store.json").write_bytes(garbage)
        path = store.path
    else:
        path = tmp_path / "gallery.npz"
        path.write_bytes(garbage)
    with pytest.raises(IndexIntegrityError) as info:
        GalleryParts(path).verify()
    msg = str(info.value)
    assert "allow_pickle" not in msg and "pickle.load" not in msg and "\n" not in msg, msg
    assert "damaged" in msg and ("re-embed" in msg or "restore" in msg), msg


def test_an_ingest_appends_rows_with_logits_to_a_mixed_gallery_without(tmp_path):
    """A partial backfill with a generation of another class count leaves logits of width 0 (mix_stores); an ingest
    then appends rows the live model embedded, with its logits: the rows go in, logits dropped (one width per store)."""
    from dataclasses import replace

    from components.indexing.parts import append_stores

    mixed = PartWriter(tmp_path / "mixed", chunk_size=4)
    part = _part(np.arange(6), 0)
    mixed.add(StoredPart(replace(part.gallery, logits=np.zeros((6, 0), np.float32)), part.stamps))
    new = PartWriter(tmp_path / "new", chunk_size=4)
    new.add(_part(np.arange(100, 103), 0))
    out = append_stores(mixed.finish(), new.finish(), PartWriter(tmp_path / "out", chunk_size=4))
    assert len(out) == 9 and out.load_all().gallery.logits.shape == (9, 0)
    np.testing.assert_array_equal(out.column("ids"), [0, 1, 2, 3, 4, 5, 100, 101, 102])


def test_columns_read_several_arrays_in_one_pass_as_column_reads_each(tmp_path):
    writer = PartWriter(tmp_path / "s", chunk_size=4)
    for start in (0, 3, 6):
        writer.add(_part(np.arange(start, start + 3), generation=start, seed=start))
    _gallery(np.arange(5)).save(tmp_path / "gallery.npz")
    for store in (writer.finish(), GalleryParts(tmp_path / "gallery.npz", generation=3)):
        names = ("ids", "stamps", "bridges", "uncertainty")
        table = store.columns(*names)
        assert list(table) == list(names)
        for name in names:
            np.testing.assert_array_equal(table[name], store.column(name))
        stored = store.columns("ids", "stamps")
        np.testing.assert_array_equal(stored["stamps"], store.column("stamps"))
