"""Data-parallel training (components/training/distributed.py, launch.py): 2 gloo ranks train the model one process
trains — same data, same seeds, equal within float tolerance — and the pieces that make it so."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch

from components.data import create_dataset
from components.data.batches import augment_batch, iterate_batches, shard_bounds, to_image_tensor
from components.data.sources.base import BatchIndexSampler
from components.errors import ConfigError
from components.losses import create_alignment
from components.models import build_model
from components.training import train_model
from components.training.job import NodeGroup, TrainJob
from components.training.launch import train_distributed
from tests.conftest import REPO
from tests.helpers import tiny_spec, train_config


def fresh_model(seed: int, **kw):
    torch.manual_seed(seed)
    return build_model(tiny_spec(**kw))


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_shard_bounds_cut_a_batch_like_tensor_split(world):
    for n in range(0, 23):
        bounds = [shard_bounds(n, world, r) for r in range(world)]
        sizes = [hi - lo for lo, hi in bounds]
        assert sizes == [len(t) for t in torch.arange(n).tensor_split(world)]
        assert bounds[0][0] == 0 and bounds[-1][1] == n
        assert all(bounds[r][1] == bounds[r + 1][0] for r in range(world - 1))  # contiguous, in rank order


def test_augmentation_of_the_parts_is_the_augmentation_of_the_batch():
    x = torch.rand(11, 1, 8, 8)
    whole = augment_batch(x, crop_padding=2, hflip=True, generator=torch.Generator().manual_seed(5))
    parts = []
    for r in range(3):
        lo, hi = shard_bounds(11, 3, r)
        gen = torch.Generator().manual_seed(5)  # every rank draws from the same seeded generator
        parts.append(augment_batch(x[lo:hi], crop_padding=2, hflip=True, generator=gen, rows=(lo, 11)))
    assert torch.equal(torch.cat(parts), whole)


def test_rank_parts_of_shuffled_batches_are_the_global_batches():
    data = to_image_tensor(np.arange(10 * 4, dtype=np.uint8).reshape(10, 2, 2, 1), np.arange(10))

    def labels(shard):
        gen = torch.Generator().manual_seed(9)
        return [y for _, y in iterate_batches(data, 4, torch.device("cpu"), shuffle=True, generator=gen, shard=shard)]

    one = labels((0, 1))
    assert [len(y) for y in one] == [4, 4, 2]
    for step, (a, b) in enumerate(zip(labels((0, 2)), labels((1, 2)), strict=True)):
        assert torch.equal(torch.cat([a, b]), one[step])

    whole = list(BatchIndexSampler(np.arange(10), 4, shuffle=True, seed=1, epoch=2, drop_last=True))
    assert len(whole) == 2
    for r in (0, 1):  # the sampler the disk-backed sources read through
        parts = list(BatchIndexSampler(np.arange(10), 4, shuffle=True, seed=1, epoch=2, drop_last=True, shard=(r, 2)))
        assert [p.tolist() for p in parts] == [b[2 * r : 2 * r + 2].tolist() for b in whole]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    splits = create_dataset("digits", tmp_path_factory.mktemp("digits"))
    sub = splits.train.subset(np.arange(96)).decode()
    return to_image_tensor(sub.images, sub.labels)


def test_two_gloo_ranks_train_the_model_one_process_trains(tmp_path, data):
    """HBCT (batch negatives in RINCE, the old model's outputs), the backbone's batch norm (batch statistics),
    augmentation on: every part of the step that couples the items of a batch."""
    cfg = train_config(epochs=2, batch_size=32, lr=0.05, device="cpu", crop_padding=1, hflip=True, seed=3)
    old = fresh_model(7)
    one = train_model(fresh_model(0), data, cfg, create_alignment("hbct"), tmp_path / "one", old_model=old)
    job = TrainJob(fresh_model(0), data, cfg, create_alignment("hbct"), tmp_path / "two", old_model=old)
    two = train_distributed(job, 2)

    assert two.device == "cpu x2 (gloo)" and two.epochs_run == 2
    a, b = one.model.state_dict(), two.model.state_dict()
    assert a.keys() == b.keys()
    for k in a:  # weights, BN running statistics and step counts
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-4, msg=k)
    assert int(b["backbone.layer4.1.bn2.num_batches_tracked"]) == 2 * 3  # 2 epochs of 3 global batches, counted once
    for ra, rb in zip(one.history, two.history, strict=True):
        assert rb.keys() == ra.keys()
        for k in ra:
            assert rb[k] == pytest.approx(ra[k], rel=1e-4, abs=1e-6), k
    assert sorted(p.name for p in (tmp_path / "two").glob("epoch_*.pt")) == ["epoch_0001.pt", "epoch_0002.pt"]


def test_a_distributed_run_needs_a_rank_per_batch_item_and_two_ranks(tmp_path, data):
    cfg = train_config(epochs=1, batch_size=2, device="cpu")
    job = TrainJob(fresh_model(0), data, cfg, create_alignment("independent"), tmp_path / "d")
    with pytest.raises(ConfigError, match="global batch"):
        train_distributed(job, 3)
    with pytest.raises(ConfigError, match="at least 2 processes"):
        train_distributed(job, 1)


def test_a_second_node_joins_through_the_job_folder(tmp_path, data):
    """Two nodes of one rank each, on this machine: the leader publishes the job, `bctflow train-node` (its own
    process, as on another machine) reads it, both meet at the c10d rendezvous and train the one-process model."""
    cfg = train_config(epochs=1, batch_size=32, lr=0.05, device="cpu", crop_padding=1, hflip=True, seed=3)
    old, jobs = fresh_model(7), tmp_path / "jobs"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    follower = subprocess.Popen(
        [sys.executable, "-m", "bctflow.cli", "train-node", "--job-dir", str(jobs), "--once"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        nodes = NodeGroup(2, f"127.0.0.1:{port}", jobs, join_timeout=180)
        job = TrainJob(fresh_model(0), data, cfg, create_alignment("hbct"), tmp_path / "two", old_model=old)
        two = train_distributed(job, 1, nodes)
        out, _ = follower.communicate(timeout=120)
    finally:
        follower.kill()
    assert follower.returncode == 0, out
    assert "done" in out and two.device == "cpu x2 (gloo)"
    assert list(jobs.iterdir()) == []  # the leader removed its job once the ranks finished
    one = train_model(fresh_model(0), data, cfg, create_alignment("hbct"), tmp_path / "one", old_model=old)
    a, b = one.model.state_dict(), two.model.state_dict()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-4, msg=k)


def test_more_nodes_need_a_rendezvous_endpoint(tmp_path):
    with pytest.raises(ConfigError, match="rdzv_endpoint"):
        NodeGroup(2, "", tmp_path)
