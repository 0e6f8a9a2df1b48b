"""ArraySource: the in-memory datasets behind the ImageSource interface; the shared sampler and id lookup."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from components.data.base import ArrayDataset
from components.data.batches import resize_images
from components.data.sources import ArraySource, UnknownIdError
from components.data.sources.base import BatchIndexSampler, epoch_seed
from components.data.sources.memory import TensorBatches
from components.errors import DataError
from tests.components.data.sources.source_files import chw, drain, images


def _source(n: int = 23, channels: int = 1) -> tuple[ArraySource, ArrayDataset]:
    ds = ArrayDataset(images(n, (7, 7), channels), np.arange(n) % 3, 100 + 5 * np.arange(n)[::-1], ("a", "b", "c"))
    return ArraySource(ds, "toy"), ds


@pytest.mark.parametrize("channels", [1, 3])
def test_a_full_pass_yields_every_item_once_in_position_order_with_its_pixels(channels):
    src, ds = _source(channels=channels)
    assert len(src) == 23 and src.channels == channels and src.class_names == ("a", "b", "c") and src.labelled
    np.testing.assert_array_equal(src.ids, ds.ids)
    order, items = drain(src, batch_size=5)
    assert order == ds.ids.tolist()
    for k, sid in enumerate(ds.ids.tolist()):
        img, label = items[sid]
        assert label == ds.labels[k] and torch.equal(img, chw(ds.images[k]))


def test_positions_subset_order_and_drop_last():
    src, ds = _source()
    pos = np.array([20, 3, 7, 0, 11])
    order, _items = drain(src, pos, batch_size=2)
    assert order == ds.ids[pos].tolist()
    batches = list(src.loader(pos, batch_size=2, drop_last=True))
    assert [len(b[0]) for b in batches] == [2, 2]
    assert len(src.loader(pos, batch_size=2)) == 3


def test_shuffle_is_deterministic_per_seed_and_epoch_and_changes_across_epochs():
    src, ds = _source()
    first = drain(src, batch_size=4, shuffle=True, seed=3, epoch=0)[0]
    assert first == drain(src, batch_size=4, shuffle=True, seed=3, epoch=0)[0]
    assert first != drain(src, batch_size=4, shuffle=True, seed=3, epoch=1)[0]
    assert first != drain(src, batch_size=4, shuffle=True, seed=4, epoch=0)[0]
    assert sorted(first) == sorted(ds.ids.tolist()) and first != ds.ids.tolist()
    sub = drain(src, np.arange(5, 15), batch_size=4, shuffle=True, epoch=2)[0]
    assert sorted(sub) == sorted(ds.ids[5:15].tolist())


def test_image_size_resizes_like_resize_images():
    src, ds = _source(channels=3)
    _, items = drain(src, batch_size=8, image_size=4)
    want = resize_images(ds.images, 4)
    for k, sid in enumerate(ds.ids.tolist()):
        assert items[sid][0].shape == (3, 4, 4) and torch.equal(items[sid][0], chw(want[k]))


def test_the_dataset_fetches_whole_batches_through_getitems():
    src, ds = _source()
    batches = TensorBatches(*src.tensors)
    x, y, _i = batches.__getitems__([4, 1])
    assert torch.equal(x[0], chw(ds.images[4])) and y.tolist() == ds.labels[[4, 1]].tolist()
    loader = DataLoader(batches, batch_size=6, collate_fn=lambda b: b)  # torch calls __getitems__
    first = next(iter(loader))
    assert first[0].shape == (6, 1, 7, 7) and first[2].tolist() == ds.ids[:6].tolist()
    one = batches[2]
    assert torch.equal(one[0], chw(ds.images[2])) and int(one[2]) == ds.ids[2]


def test_asking_for_workers_gathers_the_same_batches_in_this_process():
    src, _ds = _source()
    a = [b[2].tolist() for b in src.loader(batch_size=5, shuffle=True, epoch=1)]
    loader = src.loader(batch_size=5, shuffle=True, epoch=1, workers=2)
    assert loader.num_workers == 0  # nothing to decode: no worker process is started
    assert [b[2].tolist() for b in loader] == a


def test_item_positions_and_unknown_ids():
    src, ds = _source()
    np.testing.assert_array_equal(src.item_positions(ds.ids[[5, 0, 9]]), [5, 0, 9])
    with pytest.raises(UnknownIdError, match=r"1 ids are not in source 'toy', e.g. \[7\]") as err:
        src.item_positions([ds.ids[0], 7])
    assert isinstance(err.value, KeyError) and isinstance(err.value, DataError)


def test_bad_selections_are_refused():
    src, _ = _source()
    with pytest.raises(DataError, match=r"positions must lie in \[0, 23\)"):
        src.loader(np.array([0, 23]), batch_size=2)
    with pytest.raises(DataError, match="positions contain duplicates"):
        src.loader(np.array([1, 1]), batch_size=2)
    with pytest.raises(DataError, match="1-D integer array"):
        src.loader(np.array([0.5]), batch_size=2)
    with pytest.raises(DataError, match="batch_size must be at least 1"):
        src.loader(batch_size=0)


def test_fingerprint_follows_the_content():
    src, ds = _source()
    same = ArraySource(ArrayDataset(ds.images.copy(), ds.labels, ds.ids, ds.class_names))
    other = ds.labels.copy()
    other[0] = 2
    changed = ArraySource(ArrayDataset(ds.images, other, ds.ids, ds.class_names))
    assert src.fingerprint() == same.fingerprint() != changed.fingerprint()
    assert ArraySource(ds, fingerprint="given").fingerprint() == "given"


def test_unlabelled_items_and_the_sampler():
    ds = ArrayDataset(images(4), np.array([0, -1, 1, 0]), np.arange(4), ("x", "y"))
    assert not ArraySource(ds).labelled
    s = BatchIndexSampler(np.array([2, 0, 3]), 2, shuffle=False, seed=0, epoch=0, drop_last=False)
    assert [t.tolist() for t in s] == [[2, 0], [3]] and len(s) == 2
    empty = np.array([], dtype=np.int64)
    assert (
        list(ArraySource(ds).loader(empty, batch_size=2)) == []
        and len(ArraySource(ds).loader(empty, batch_size=2)) == 0
    )
    assert epoch_seed(1, 2) == epoch_seed(1, 2) != epoch_seed(1, 3)
