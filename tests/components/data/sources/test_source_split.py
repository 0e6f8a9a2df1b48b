"""SourceDataset (components/data/sources/split.py): a split on disk behaves like an in-memory one for selection,
and streams exactly its own items."""

from __future__ import annotations

import numpy as np
import pytest

from components.data.sources import UnknownIdError, write_webdataset
from components.data.sources.split import SourceDataset
from tests.components.data.sources.source_files import drain, images


@pytest.fixture(scope="module")
def split(tmp_path_factory) -> tuple[SourceDataset, np.ndarray]:
    imgs = images(30, size=(6, 6))
    labels, ids = np.arange(30) % 3, 500 + np.arange(30)[::-1]
    src = write_webdataset(tmp_path_factory.mktemp("split"), [(imgs, labels, ids)], shard_size=7)
    return SourceDataset(src, image_size=6), imgs


def test_a_split_reads_labels_ids_and_shape_from_the_index(split):
    ds, _ = split
    assert len(ds) == 30 and ds.image_shape == (6, 6, 1) and ds.num_classes == 3
    np.testing.assert_array_equal(ds.ids, 500 + np.arange(30)[::-1])
    np.testing.assert_array_equal(ds.labels, np.arange(30) % 3)


def test_subsets_compose_and_stream_exactly_their_items(split):
    ds, imgs = split
    sub = ds.subset(np.array([29, 3, 10, 4])).subset(np.array([0, 2, 3]))  # source rows 29, 10, 4
    np.testing.assert_array_equal(sub.ids, [500, 519, 525])
    np.testing.assert_array_equal(sub.positions_of(np.array([525, 500])), [2, 0])
    order, _ = drain(sub.source, sub._rows, batch_size=2)
    assert sorted(order) == [500, 519, 525]
    got = [ds_ids for ds_ids in sub.loader(batch_size=8)]
    ((x, y, i),) = got
    for img, label, sid in zip(x, y.tolist(), i.tolist()):
        row = 529 - sid
        np.testing.assert_array_equal(img.numpy().transpose(1, 2, 0), imgs[row])
        assert label == row % 3


def test_ids_outside_the_split_are_refused(split):
    ds, _ = split
    sub = ds.subset(np.array([0, 1]))
    with pytest.raises(UnknownIdError, match="not in this split"):
        sub.positions_of(np.array([529, 500]))  # 500 is in the source, not in the subset
    with pytest.raises(KeyError):
        ds.positions_of(np.array([7]))
