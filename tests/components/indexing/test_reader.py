"""The one reader a backfill reads a part store through: its rows read once, a selection, windows."""

from __future__ import annotations

import numpy as np
import pytest

from components.errors import IndexIntegrityError
from components.indexing.mixed import item_uncertainty
from components.indexing.parts import PartWriter, StoredPart
from components.indexing.reader import PartReader
from tests.components.indexing.gallery_data import lorentz_gallery as _gallery


def _store(path, stamps: list[int], chunk: int = 4) -> PartReader:
    """A finished part store of len(stamps) items (ids 100…), written 3 items at a time, parts of ``chunk``."""
    writer = PartWriter(path, chunk_size=chunk)
    ids = np.arange(100, 100 + len(stamps))
    for start in range(0, len(stamps), 3):
        rows = slice(start, start + 3)
        writer.add(StoredPart(_gallery(ids[rows], seed=start), np.asarray(stamps[rows], np.int64)))
    writer.finish()
    return PartReader(path)


def test_rows_are_the_stores_ids_and_stamps_in_store_order(tmp_path):
    stamps = [0, 0, 2, 1, 2, 0, 1, 2, 2, 0]
    reader = _store(tmp_path / "s", stamps)
    assert len(reader) == len(reader.rows) == 10
    np.testing.assert_array_equal(reader.rows.ids, np.arange(100, 110))
    np.testing.assert_array_equal(reader.rows.stamps, stamps)
    assert reader.rows.ids.dtype == reader.rows.stamps.dtype == np.int64
    assert reader.rows.generations() == [0, 1, 2]
    assert int(reader.rows.stamped(2).sum()) == 4
    assert reader.rows is reader.rows  # read once, kept


def test_a_single_file_gallery_reads_with_the_generation_that_holds_it(tmp_path):
    _gallery(np.arange(5), seed=0).save(tmp_path / "gallery.npz")
    reader = PartReader(tmp_path / "gallery.npz", generation=3)
    np.testing.assert_array_equal(reader.rows.stamps, np.full(5, 3))
    assert reader.first().z.shape == (5, 4)


def test_selection_orders_every_row_and_leaves_out_what_a_generation_embedded(tmp_path):
    stamps = [0, 0, 2, 1, 2, 0, 1, 2, 2, 0]
    reader = _store(tmp_path / "s", stamps)
    for order in ("random", "oldest", "uncertainty"):
        ranked = reader.selection(order, seed=5)
        assert sorted(ranked.tolist()) == list(range(10))
        np.testing.assert_array_equal(reader.selection(order, seed=5), ranked)  # seeded
    oldest = reader.selection("oldest", seed=1)
    assert np.all(np.diff(np.asarray(stamps)[oldest]) >= 0)
    u = item_uncertainty(reader.embeddings())
    assert np.all(np.diff(u[reader.selection("uncertainty")]) <= 0)  # the least certain vectors first
    skipped = reader.selection("random", seed=5, skip=2)
    np.testing.assert_array_equal(skipped, [p for p in reader.selection("random", seed=5) if stamps[p] != 2])


def test_windows_cut_the_rows_to_any_size_across_parts(tmp_path):
    reader = _store(tmp_path / "s", [1] * 10, chunk=4)  # parts of 4, 4, 2
    windows = list(reader.windows(3))
    assert [len(w) for w in windows] == [3, 3, 3, 1]
    np.testing.assert_array_equal(np.concatenate([w.gallery.ids for w in windows]), reader.rows.ids)
    assert len(reader.first()) == 4  # the first part only
    assert reader.digest() == PartReader(tmp_path / "s").digest()


def test_an_unfinished_store_is_refused_in_one_line(tmp_path):
    writer = PartWriter(tmp_path / "s", chunk_size=2)
    writer.add(StoredPart(_gallery(np.arange(2), seed=0), np.zeros(2, np.int64)))
    with pytest.raises(IndexIntegrityError, match="never finished; run it again to resume"):
        PartReader(tmp_path / "s")
