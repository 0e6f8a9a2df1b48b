"""The training loop (components/training/loop.py): checkpoints, resume, divergence, alignment methods."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from components.data import create_dataset
from components.data.batches import to_image_tensor
from components.errors import CheckpointMismatchError, ConfigError
from components.losses import create_alignment
from components.models import build_model
from components.training import (
    TrainConfig,
    TrainingDivergedError,
    latest_checkpoint,
    train_model,
)
from tests.helpers import tiny_spec, train_config


def fresh_model(seed: int, **kw):
    torch.manual_seed(seed)
    return build_model(tiny_spec(**kw))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    splits = create_dataset("digits", tmp_path_factory.mktemp("digits"))
    sub = splits.train.subset(np.arange(64)).decode()
    return to_image_tensor(sub.images, sub.labels)  # digits: original class == position in range(10)


def cfg(**kw) -> TrainConfig:
    base = dict(epochs=2, batch_size=16, lr=0.05, device="cpu", keep_checkpoints=2, crop_padding=1, hflip=True, seed=3)
    base.update(kw)
    return train_config(**base)


def _ckpts(d):
    return sorted(p.name for p in d.glob("epoch_*.pt"))


def test_two_epochs_write_checkpoints_and_history(tmp_path, data):
    seen = []
    result = train_model(
        fresh_model(0),
        data,
        cfg(keep_checkpoints=1),
        create_alignment("independent"),
        tmp_path / "d",
        on_epoch=lambda e, rec: seen.append((e, rec["loss"])),
    )
    assert result.epochs_run == 2 and result.resumed_from is None and result.device == "cpu"
    assert len(result.history) == 2
    assert [r["epoch"] for r in result.history] == [1.0, 2.0]
    for rec in result.history:
        assert math.isfinite(rec["loss"]) and math.isfinite(rec["base"])
        assert rec["loss"] == pytest.approx(rec["base"])  # independent adds no term
        assert 0.0 <= rec["train_accuracy"] <= 1.0 and 0.0 <= rec["clip_fraction"] <= 1.0
    assert [e for e, _ in seen] == [1, 2]
    assert _ckpts(tmp_path / "d") == ["epoch_0002.pt"]  # keep_checkpoints=1
    assert latest_checkpoint(tmp_path / "d").name == "epoch_0002.pt"
    assert not result.model.training
    assert result.method_stats["epoch"] == 2.0


def test_keep_checkpoints_two_of_three(tmp_path, data):
    train_model(fresh_model(0), data, cfg(epochs=3), create_alignment("independent"), tmp_path / "d")
    assert _ckpts(tmp_path / "d") == ["epoch_0002.pt", "epoch_0003.pt"]
    state = torch.load(tmp_path / "d" / "epoch_0003.pt", weights_only=True)
    assert state["epoch"] == 3 and len(state["history"]) == 3
    assert latest_checkpoint(tmp_path / "empty") is None


def test_training_changes_weights_and_is_seeded(tmp_path, data):
    a = train_model(fresh_model(0), data, cfg(epochs=1), create_alignment("independent"), tmp_path / "a").model
    b = train_model(fresh_model(0), data, cfg(epochs=1), create_alignment("independent"), tmp_path / "b").model
    init = fresh_model(0)
    key = "backbone.layer1.0.conv1.weight"
    assert not torch.equal(a.state_dict()[key], init.state_dict()[key])
    for k, v in a.state_dict().items():
        assert torch.equal(b.state_dict()[k], v), k


class _Interrupt(Exception):
    pass


def _interrupt_after_first_epoch(epoch, record):
    if epoch == 1:
        raise _Interrupt


def test_resume_after_interruption_matches_uninterrupted_run(tmp_path, data):
    full = train_model(fresh_model(0), data, cfg(), create_alignment("independent"), tmp_path / "full", run_key="r")

    with pytest.raises(_Interrupt):
        train_model(
            fresh_model(0),
            data,
            cfg(),
            create_alignment("independent"),
            tmp_path / "cut",
            run_key="r",
            on_epoch=_interrupt_after_first_epoch,
        )
    assert _ckpts(tmp_path / "cut") == ["epoch_0001.pt"]

    resumed = train_model(fresh_model(99), data, cfg(), create_alignment("independent"), tmp_path / "cut", run_key="r")
    assert resumed.resumed_from == 1 and resumed.epochs_run == 1
    assert len(resumed.history) == 2
    assert resumed.history[0] == full.history[0]
    assert resumed.history[1]["loss"] == pytest.approx(full.history[1]["loss"], rel=1e-6)
    for k, v in full.model.state_dict().items():
        assert torch.allclose(resumed.model.state_dict()[k].float(), v.float(), atol=1e-6, rtol=0), k


def test_on_step_counts_every_batch_of_the_whole_training_on_the_host(tmp_path, data):
    """64 images at batch 16: 4 steps an epoch, 8 in all; a run resumed after its first epoch goes on from step 5."""
    steps: list[tuple[int, int]] = []

    def record(done: int, total: int) -> None:
        steps.append((done, total))

    independent = create_alignment("independent")
    with pytest.raises(_Interrupt):
        train_model(
            fresh_model(0),
            data,
            cfg(),
            independent,
            tmp_path / "d",
            on_epoch=_interrupt_after_first_epoch,
            on_step=record,
        )
    assert steps == [(1, 8), (2, 8), (3, 8), (4, 8)]
    train_model(fresh_model(0), data, cfg(), create_alignment("independent"), tmp_path / "d", on_step=record)
    assert steps[4:] == [(5, 8), (6, 8), (7, 8), (8, 8)]
    assert all(type(d) is int and type(t) is int for d, t in steps)  # host integers: no device value is read
    steps.clear()
    train_model(
        fresh_model(0), data, cfg(batch_size=100), create_alignment("independent"), tmp_path / "e", on_step=record
    )
    assert steps == [(1, 2), (2, 2)]  # fewer images than a batch: one step an epoch


def test_resume_with_more_epochs_constant_schedule(tmp_path, data):
    """Train 1 epoch, then ask for 2 on the same directory: with a constant schedule this is the 2-epoch run."""
    c1, c2 = cfg(epochs=1, schedule="constant"), cfg(epochs=2, schedule="constant")
    full = train_model(fresh_model(0), data, c2, create_alignment("independent"), tmp_path / "full")
    train_model(fresh_model(0), data, c1, create_alignment("independent"), tmp_path / "d")
    resumed = train_model(fresh_model(7), data, c2, create_alignment("independent"), tmp_path / "d")
    assert resumed.resumed_from == 1
    for k, v in full.model.state_dict().items():
        assert torch.allclose(resumed.model.state_dict()[k].float(), v.float(), atol=1e-6, rtol=0), k


def test_resume_of_a_finished_run_trains_nothing(tmp_path, data):
    first = train_model(fresh_model(0), data, cfg(epochs=1), create_alignment("independent"), tmp_path / "d")
    again = train_model(fresh_model(5), data, cfg(epochs=1), create_alignment("independent"), tmp_path / "d")
    assert again.resumed_from == 1 and again.epochs_run == 0 and len(again.history) == 1
    for k, v in first.model.state_dict().items():
        assert torch.equal(again.model.state_dict()[k], v), k


def test_checkpoint_of_another_run_or_model_is_refused(tmp_path, data):
    train_model(
        fresh_model(0), data, cfg(epochs=1), create_alignment("independent"), tmp_path / "d", run_key="gen1:new"
    )
    with pytest.raises(CheckpointMismatchError, match="another training run"):
        train_model(
            fresh_model(0), data, cfg(epochs=2), create_alignment("independent"), tmp_path / "d", run_key="gen2:new"
        )
    with pytest.raises(CheckpointMismatchError, match="zeta"):
        train_model(
            fresh_model(0, zeta=1.2),
            data,
            cfg(epochs=2),
            create_alignment("independent"),
            tmp_path / "d",
            run_key="gen1:new",
        )
    assert _ckpts(tmp_path / "d") == ["epoch_0001.pt"]  # nothing was overwritten


def test_nan_loss_raises_training_diverged(tmp_path, data):
    with pytest.raises(TrainingDivergedError, match="lower train.lr"):
        train_model(fresh_model(0), data, cfg(epochs=2, lr=1e30), create_alignment("independent"), tmp_path / "d")


def test_hbct_training_with_old_model_logs_its_terms(tmp_path, data):
    old = fresh_model(1).eval()
    old_state = {k: v.clone() for k, v in old.state_dict().items()}
    result = train_model(
        fresh_model(2),
        data,
        cfg(epochs=1),
        create_alignment("hbct"),
        tmp_path / "d",
        old_model=old,
    )
    rec = result.history[-1]
    for key in ("entail", "contrast", "in_cone_fraction", "q_mean", "base", "loss"):
        assert key in rec and math.isfinite(rec[key]), key
    assert rec["loss"] == pytest.approx(rec["base"] + 0.3 * (rec["entail"] + rec["contrast"]), rel=1e-5)
    assert 0.0 <= rec["in_cone_fraction"] <= 1.0
    # the old model is frozen: no grad, unchanged weights (BatchNorm statistics included)
    assert all(not p.requires_grad for p in old.parameters())
    for k, v in old.state_dict().items():
        assert torch.equal(v, old_state[k]), k


def test_bct_training_leaves_old_model_untouched(tmp_path, data):
    old = fresh_model(
        1, geometry="euclidean", num_classes=5, class_order=(0, 1, 2, 3, 4)
    ).eval()  # saw classes 0-4 only
    old_state = {k: v.clone() for k, v in old.state_dict().items()}
    result = train_model(
        fresh_model(2, geometry="euclidean"),
        data,
        cfg(epochs=1),
        create_alignment("bct"),
        tmp_path / "d",
        old_model=old,
    )
    rec = result.history[-1]
    assert math.isfinite(rec["influence"]) and 0.0 < rec["bct_known_fraction"] < 1.0
    for k, v in old.state_dict().items():
        assert torch.equal(v, old_state[k]), k


def test_methods_needing_a_parent_are_refused_without_one(tmp_path, data):
    with pytest.raises(CheckpointMismatchError, match="parent"):
        train_model(fresh_model(0), data, cfg(epochs=1), create_alignment("hbct"), tmp_path / "a")
    with pytest.raises(ConfigError, match="lorentz"):
        train_model(
            fresh_model(0, geometry="euclidean"),
            data,
            cfg(epochs=1),
            create_alignment("hbct"),
            tmp_path / "b",
            old_model=fresh_model(1, geometry="euclidean"),
        )
    assert not (tmp_path / "a").exists()  # refused before anything was written


# The epoch records the per-step loop wrote before it stopped synchronising with the device at every step (one
# host read per epoch now, float64 sums on the device): same seeds, same data, same numbers (within float noise).
# Recorded under torch 2.14.1; torch 2.15's CPU kernels round differently (bct's loss moved by 2.8e-5 relative), so
# the tolerance is 1e-4 relative: an epoch mean over a wrong count or a lost term moves them by far more.
_PER_STEP_LOOP = {
    "hbct": [
        {
            "loss": 2.498198152,
            "base": 2.309052706,
            "entail": 1.27852428,
            "contrast": -0.648039654,
            "q_mean": 0.726157635,
            "in_cone_fraction": 0.0,
            "clip_fraction": 0.015625,
            "train_accuracy": 0.109375,
        },
        {
            "loss": 2.328058362,
            "base": 2.312111855,
            "entail": 0.722905785,
            "contrast": -0.669750988,
            "q_mean": 0.735649154,
            "in_cone_fraction": 0.015625,
            "clip_fraction": 0.0,
            "train_accuracy": 0.109375,
        },
    ],
    "bct": [
        {
            "loss": 9.235355377,
            "base": 7.389358163,
            "influence": 6.153322458,
            "bct_known_fraction": 1.0,
            "train_accuracy": 0.078125,
        },
        {
            "loss": 8.406271696,
            "base": 7.119148612,
            "influence": 4.290410221,
            "bct_known_fraction": 1.0,
            "train_accuracy": 0.09375,
        },
    ],
}


@pytest.fixture
def one_thread():
    """The recorded numbers were made with one intra-op thread (kernels reduce in another order with two)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("method", ["hbct", "bct"])
def test_sync_free_loop_reproduces_the_per_step_loop(tmp_path, data, method, one_thread):
    geometry = "lorentz" if method == "hbct" else "euclidean"
    old_seed, new_seed = (1, 2) if method == "hbct" else (4, 5)
    result = train_model(
        fresh_model(new_seed, geometry=geometry),
        data,
        cfg(),
        create_alignment(method),
        tmp_path / "d",
        old_model=fresh_model(old_seed, geometry=geometry).eval(),
    )
    for got, want in zip(result.history, _PER_STEP_LOOP[method], strict=True):
        assert {k: got[k] for k in want} == pytest.approx(want, rel=1e-4, abs=1e-8)


def test_bf16_training_on_cpu_runs_and_differs_only_slightly(tmp_path, data):
    """train.precision: bf16 on CPU: the backbone under bf16 autocast, the losses in float32."""
    runs = {
        prec: train_model(
            fresh_model(0), data, cfg(epochs=1, precision=prec), create_alignment("independent"), tmp_path / prec
        )
        for prec in ("fp32", "bf16")
    }
    a, b = (runs[p].history[0]["loss"] for p in ("fp32", "bf16"))
    assert math.isfinite(b) and a != b and b == pytest.approx(a, rel=0.05)
