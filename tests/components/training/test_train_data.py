"""What the loop reads (components/training/data.py): the in-memory path yields exactly the batches it always did;
a split on disk streams every selected item once per epoch, with model labels, reproducibly per (seed, epoch); the
loop trains and resumes on it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from components.data import create_dataset
from components.data.batches import iterate_batches, to_image_tensor
from components.data.sources import write_webdataset
from components.data.sources.split import SourceDataset
from components.errors import DataError
from components.losses import create_alignment
from components.models import build_model
from components.training import train_model
from components.training.data import EpochRead, StreamData, TensorData
from tests.helpers import tiny_spec, train_config

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return create_dataset("digits", tmp_path_factory.mktemp("digits")).train.subset(np.arange(90)).decode()


@pytest.fixture(scope="module")
def on_disk(digits, tmp_path_factory) -> SourceDataset:
    src = write_webdataset(
        tmp_path_factory.mktemp("shards"),
        [(digits.images, digits.labels, digits.ids)],
        shard_size=25,
        class_names=digits.class_names,
    )
    return SourceDataset(src, image_size=8)


def _batches(data, epoch: int, bs: int = 16, drop_last: bool = False):
    gen = torch.Generator().manual_seed(epoch)
    return list(data.batches(EpochRead(bs, CPU, shuffle=True, seed=7, epoch=epoch, generator=gen, drop_last=drop_last)))


def test_tensor_data_yields_the_batches_of_iterate_batches(digits):
    t = to_image_tensor(digits.images, digits.labels)
    ours = _batches(TensorData(t), 2)
    ref = list(iterate_batches(t, 16, CPU, shuffle=True, generator=torch.Generator().manual_seed(2)))
    assert len(ours) == len(ref) == 6
    for (x, y), (rx, ry) in zip(ours, ref):
        assert torch.equal(x, rx) and torch.equal(y, ry)


def test_stream_data_yields_every_item_once_per_epoch_with_model_labels(digits, on_disk):
    order = [3, 1, 4, 0, 9, 2, 6, 5, 8, 7]  # model label k = original class order[k]
    data = StreamData(on_disk, order)
    batches = _batches(data, 0)
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    assert x.dtype == torch.float32 and x.shape == (90, 1, 8, 8) and float(x.max()) <= 1.0
    # each streamed image is one of the digits, and its label is the model label of that digit's class
    flat = torch.from_numpy(digits.images.reshape(90, -1)).float() / 255.0
    match = (x.reshape(90, -1)[:, None, :] == flat[None]).all(-1)
    rows = match.float().argmax(1).numpy()
    assert match.any(1).all() and len(set(rows.tolist())) == 90  # every item exactly once
    np.testing.assert_array_equal(y.numpy(), np.argsort(order)[digits.labels[rows]])


def test_stream_data_epochs_are_seeded_and_differ(on_disk):
    data = StreamData(on_disk, list(range(10)))
    first, again, other = _batches(data, 1), _batches(data, 1), _batches(data, 2)
    assert all(torch.equal(a[1], b[1]) for a, b in zip(first, again))
    assert not torch.equal(torch.cat([b[1] for b in first]), torch.cat([b[1] for b in other]))
    assert sum(len(b[1]) for b in _batches(data, 1, drop_last=True)) == 80  # 5 full batches of 16


def test_a_split_with_classes_outside_the_model_order_is_refused(on_disk):
    with pytest.raises(DataError, match="not in the model's class order"):
        StreamData(on_disk, [0, 1, 2])


def test_the_loop_trains_and_resumes_from_a_split_on_disk(on_disk, tmp_path):
    cfg = train_config(epochs=2, batch_size=16, lr=0.05, device="cpu", keep_checkpoints=2, seed=3)

    def run(epochs: int):
        torch.manual_seed(0)
        return train_model(
            build_model(tiny_spec()),
            StreamData(on_disk, list(range(10))),
            dataclasses.replace(cfg, epochs=epochs),
            create_alignment("independent"),
            tmp_path / "ckpt",
            run_key="stream",
        )

    straight = run(2)
    assert straight.epochs_run == 2 and all(np.isfinite(h["loss"]) for h in straight.history)
    assert (tmp_path / "ckpt" / "epoch_0002.pt").exists()
    (tmp_path / "ckpt" / "epoch_0002.pt").unlink()  # as if killed during epoch 2
    resumed = run(2)  # epoch 2 replays the same streamed batches: same weights as the straight run
    assert resumed.resumed_from == 1
    for a, b in zip(straight.model.state_dict().values(), resumed.model.state_dict().values()):
        torch.testing.assert_close(a, b)
