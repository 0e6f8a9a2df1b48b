"""One training loop for every alignment method.

L = L_base + λ · Σ terms(alignment)   (HBCT Eq. (13); the base loss is cross-entropy on the model's classifier
logits — Lorentz MLR or linear).

* device chosen automatically; bf16 autocast + channels_last by ``precision`` (CUDA: pinned, non-blocking
  copies, a small selection resident on the GPU); the forward passes compiled by ``compile`` (auto: on CUDA);
* the old model is frozen (eval, no grad) and sees the *same augmented view*;
* a checkpoint per epoch (atomic), the last ``keep_checkpoints`` kept;
* resume from the last checkpoint in ``checkpoint_dir`` — refused if it was written for another model or another
  run (``run_key``);
* shuffling and augmentation are seeded per (seed, epoch), so a resumed run sees the same batches as an
  uninterrupted one;
* the data is a :class:`~components.training.data.TrainData`: held in memory, or streamed from disk through a
  DataLoader (docs/design.md §7.11);
* before the first step the method prepares with what it may look at (components/training/context.py);
* inside an initialised ``torch.distributed`` group (components/training/launch.py) each rank trains on its part of
  every global batch with DDP, and the losses see the whole batch (components/training/distributed.py, §7.13).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from components.data.batches import ImageTensor, augment_batch
from components.errors import CheckpointMismatchError
from components.losses.base import AlignmentLoss, LossOutput
from components.losses.base_losses import base_loss
from components.models.checkpoint import check_spec, load_torch_safe, read_spec, save_torch_atomic
from components.models.encoder import EmbeddingModel
from components.training.checkpoints import checkpoint_path, latest_checkpoint, prune_checkpoints
from components.training.compile import Compile, CompileMode, compiled
from components.training.context import alignment_context
from components.training.data import EpochRead, TrainData, as_train_data
from components.training.device import Precision, autocast, prepare_module, select_device, to_memory_format
from components.training.distributed import (
    Ranks,
    current_ranks,
    data_parallel,
    gather_output,
    gather_rows,
    sync_batch_norm,
)
from components.training.meter import FINITE_CHECK_EVERY, EpochMeter, TrainingDivergedError
from components.training.optim import build_optimizer, build_scheduler

__all__ = ["TRAIN_FORMAT", "TrainConfig", "TrainResult", "TrainingDivergedError", "train_model"]

TRAIN_FORMAT = "bctflow-train/1"


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """How to train (params ``train:``, ``data.augment`` and ``alignment.weight``).

    The params schema holds every default. ``align_weight`` is λ of HBCT Eq. (13); ``base_loss`` /
    ``base_options`` choose L_base (docs/design.md §4.2, §5.9).
    """

    epochs: int
    batch_size: int
    optimizer: str
    lr: float
    momentum: float
    weight_decay: float
    schedule: str
    warmup_epochs: int
    seed: int
    device: str
    keep_checkpoints: int
    crop_padding: int
    hflip: bool
    align_weight: float
    base_loss: str
    base_options: dict
    #: cross-entropy label smoothing (0: none); lowers the reward for radius the Lorentz MLR logits give
    label_smoothing: float = 0.0
    #: bf16 autocast + channels_last for the backbone: auto | fp32 | bf16 (components/training/device.py)
    precision: Precision = "auto"
    #: torch.compile the step's forward passes: auto | off | on, in ``compile_mode`` (components/training/compile.py)
    compile: Compile = "off"
    compile_mode: CompileMode = "default"


@dataclass
class TrainResult:
    model: EmbeddingModel
    history: list[dict[str, float]]
    epochs_run: int
    resumed_from: int | None
    device: str
    seconds: float
    method_stats: dict[str, float] = field(default_factory=dict)
    #: hyperparameters the alignment method chose from data before training, with their reasons
    #: (:attr:`~components.losses.base.AlignmentLoss.choices`, e.g. HBCT's ε by the view_angle rule)
    choices: dict[str, Any] = field(default_factory=dict)


def _epoch_generator(seed: int, epoch: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + epoch)


@dataclass
class _Run:
    """The parts of one training run the epoch loop works with."""

    model: EmbeddingModel
    method: AlignmentLoss
    old_model: EmbeddingModel | None
    reference_model: EmbeddingModel | None
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LRScheduler
    base_fn: Callable[..., Tensor]
    device: torch.device
    drop_last: bool
    steps_per_epoch: int
    #: the model as the step calls it: the model itself, or its DDP wrapper; compiled where ``train.compile`` says
    forward: Callable[..., object]
    ranks: Ranks
    #: the frozen old / reference models as the step calls them (compiled like ``forward``)
    old_forward: Callable[..., object] | None = None
    ref_forward: Callable[..., object] | None = None


def _frozen(
    model: EmbeddingModel | None,
    device: torch.device,
    needed: bool,
    what: str,
    method: AlignmentLoss,
    precision: Precision = "auto",
) -> EmbeddingModel | None:
    """A frozen copy of ``model`` on ``device`` when the method needs it (eval mode, no gradients)."""
    if not needed:
        return None
    if model is None:
        raise CheckpointMismatchError(f"alignment {method.name!r} needs {what}, none was given")
    model = prepare_module(model, device, precision).eval()
    model.requires_grad_(False)
    return model


def _setup(
    model: EmbeddingModel,
    data: TrainData,
    cfg: TrainConfig,
    method: AlignmentLoss,
    old_model: EmbeddingModel | None,
    reference_model: EmbeddingModel | None,
) -> _Run:
    """Device, frozen old / reference models, the method's one-off preparation, optimiser and schedule."""
    device = select_device(cfg.device)  # type: ignore[arg-type]
    ranks = current_ranks()
    torch.manual_seed(cfg.seed)
    model = prepare_module(sync_batch_norm(model) if ranks.distributed else model, device, cfg.precision)
    old_model = _frozen(
        old_model, device, method.trains and method.requires_old, "the parent model", method, cfg.precision
    )
    reference_model = _frozen(
        reference_model,
        device,
        method.trains and method.needs_reference(method.options),
        "an independently trained new model as its target",
        method,
        cfg.precision,
    )
    old_spec = old_model.spec if old_model is not None else None
    method.check_models(
        method.options,
        model.spec.geometry,
        model.spec.embed_dim,
        old_spec and old_spec.geometry,
        old_spec and old_spec.embed_dim,
    )
    base_fn = base_loss(cfg.base_loss, cfg.base_options, cfg.label_smoothing)
    method.prepare(
        alignment_context(
            model.spec,
            device,
            data,
            batch_size=cfg.batch_size,
            seed=cfg.seed,
            crop_padding=cfg.crop_padding,
            hflip=cfg.hflip,
            old_model=old_model,
            reference_model=reference_model,
        )
    )
    method.to(device)
    opt = build_optimizer(
        list(model.parameters()) + list(method.parameters()), cfg.optimizer, cfg.lr, cfg.momentum, cfg.weight_decay
    )
    drop_last = len(data) > cfg.batch_size
    steps_per_epoch = len(data) // cfg.batch_size if drop_last else 1
    sched = build_scheduler(opt, cfg.epochs * steps_per_epoch, cfg.warmup_epochs * steps_per_epoch, cfg.schedule)
    forward = data_parallel(model, device) if ranks.distributed else model

    def step_call(m: Callable[..., object] | None) -> Callable[..., object] | None:
        return None if m is None else compiled(m, device, cfg.compile, cfg.compile_mode, ranks.distributed)

    return _Run(
        model,
        method,
        old_model,
        reference_model,
        opt,
        sched,
        base_fn,
        device,
        drop_last,
        steps_per_epoch,
        step_call(forward),  # type: ignore[arg-type]
        ranks,
        step_call(old_model),
        step_call(reference_model),
    )


def _resume(run: _Run, checkpoint_dir: Path, run_key: str) -> tuple[int, list[dict[str, float]]]:
    """Restore the last epoch checkpoint of this run, if any. Returns (epochs done, history)."""
    last = latest_checkpoint(checkpoint_dir)
    if last is None:
        return 0, []
    state = load_torch_safe(last)
    check_spec(read_spec(state, last), run.model.spec, last)
    if state.get("format") != TRAIN_FORMAT or state.get("run_key") != run_key:
        raise CheckpointMismatchError(
            f"checkpoint {last} belongs to another training run "
            f"(run key {state.get('run_key')!r}, expected {run_key!r}); "
            f"delete {checkpoint_dir} to start over or use the parameters of that run"
        )
    run.model.load_state_dict(state["model"])
    run.method.load_state_dict(state["method"])
    run.opt.load_state_dict(state["optimizer"])
    run.sched.load_state_dict(state["scheduler"])
    return int(state["epoch"]), list(state["history"])


def _train_epoch(
    run: _Run, data: TrainData, cfg: TrainConfig, epoch: int, on_step: Callable[[int, int], None] | None
) -> dict[str, float]:
    """One pass over the shuffled, augmented data; returns the epoch's mean losses, stats and accuracy.

    No step waits for the device: losses, stats and the accuracy count are summed on the device and read once at the
    end of the epoch; the loss is checked for NaN/inf every :data:`FINITE_CHECK_EVERY` steps; ``on_step(done, total)``
    after each step: steps of the whole training, counted on the host (no device synchronisation).
    """
    model, method, device, ranks = run.model, run.method, run.device, run.ranks
    model.train()
    gen = _epoch_generator(cfg.seed, epoch)
    meter = EpochMeter(device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    seen = 0
    read = EpochRead(cfg.batch_size, device, True, cfg.seed, epoch, gen, run.drop_last, ranks.shard)
    batches = data.batches(read)
    for x, y in batches:
        n = min(cfg.batch_size, len(data) - seen)  # the global batch this rank holds a part of
        x = augment_batch(x, crop_padding=cfg.crop_padding, hflip=cfg.hflip, generator=gen, rows=ranks.rows(n))
        x = to_memory_format(x, device, cfg.precision)
        with autocast(device, cfg.precision):
            out = run.forward(x)
            old_out = ref_out = None
            with torch.no_grad():
                if run.old_forward is not None:
                    old_out = run.old_forward(x, with_logits=False)
                if run.ref_forward is not None:
                    ref_out = run.ref_forward(x, with_logits=False)
        if ranks.distributed:  # the losses see the global batch (components/training/distributed.py)
            out, old_out, ref_out = (gather_output(o, n, ranks) for o in (out, old_out, ref_out))
            y = gather_rows(y, n, ranks)
        base = run.base_fn(out, y, model.curvature.to(device))
        if not method.trains:
            align = LossOutput({})
        elif run.reference_model is not None:
            align = method(out, old_out, y, ref=ref_out)
        else:  # plugins that need no reference may keep the 3-argument forward
            align = method(out, old_out, y)
        loss = base + cfg.align_weight * sum(align.terms.values(), torch.zeros((), device=device))
        run.opt.zero_grad(set_to_none=True)
        loss.backward()
        run.opt.step()
        run.sched.step()
        meter.step(loss, {"base": base, **align.terms})
        meter.add(
            {"loss": loss, "base": base, **align.terms, **align.stats, "clip_fraction": out.clipped.float().mean()}
        )
        correct += (out.logits.detach().argmax(1) == y).sum()
        seen += n
        if meter.steps % FINITE_CHECK_EVERY == 0:
            meter.check_finite(epoch)
        if on_step is not None:
            on_step(epoch * run.steps_per_epoch + meter.steps, cfg.epochs * run.steps_per_epoch)
    meter.check_finite(epoch)
    record = meter.means()
    record["train_accuracy"] = int(correct) / max(1, seen)
    record["lr"] = float(run.sched.get_last_lr()[0])
    record["epoch"] = float(epoch + 1)
    return record


def _save_epoch(run: _Run, checkpoint_dir: Path, run_key: str, epoch: int, history: list[dict[str, float]]) -> None:
    save_torch_atomic(
        {
            "format": TRAIN_FORMAT,
            "metadata": run.model.spec.to_dict(),
            "run_key": run_key,
            "epoch": epoch,
            "model": {k: v.detach().cpu() for k, v in run.model.state_dict().items()},
            "method": {k: v.detach().cpu() for k, v in run.method.state_dict().items()},
            "optimizer": run.opt.state_dict(),
            "scheduler": run.sched.state_dict(),
            "history": history,
        },
        checkpoint_path(checkpoint_dir, epoch),
    )


def train_model(
    model: EmbeddingModel,
    data: TrainData | ImageTensor,
    cfg: TrainConfig,
    method: AlignmentLoss,
    checkpoint_dir: Path,
    *,
    old_model: EmbeddingModel | None = None,
    reference_model: EmbeddingModel | None = None,
    run_key: str = "",
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> TrainResult:
    """Train ``model`` on ``data`` (labels = positions in the model's class order): in memory
    (:class:`~components.training.data.TensorData`, or a bare :class:`ImageTensor`) or streamed from disk
    (:class:`~components.training.data.StreamData`).

    ``old_model``: the frozen parent (its class order maps new labels to old ones). ``reference_model``: frozen
    independently trained new model, for methods that need one (BT²). ``run_key`` identifies the run; a checkpoint
    of another run is refused. ``on_epoch(epoch, record)`` after each epoch and ``on_step(done, total)`` after each
    step (on the leader rank). Returns the trained model in eval mode on the training device.
    """
    t0 = time.perf_counter()
    data = as_train_data(data)
    run = _setup(model, data, cfg, method, old_model, reference_model)
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    start_epoch, history = _resume(run, checkpoint_dir, run_key)
    for epoch in range(start_epoch, cfg.epochs):
        record = _train_epoch(run, data, cfg, epoch, on_step if run.ranks.leader else None)
        history.append(record)
        if run.ranks.leader:  # every rank holds the same weights; one writes them
            _save_epoch(run, checkpoint_dir, run_key, epoch + 1, history)
            prune_checkpoints(checkpoint_dir, cfg.keep_checkpoints)
            if on_epoch is not None:
                on_epoch(epoch + 1, record)
    if run.ranks.distributed:
        sync_batch_norm(run.model, on=False)
    run.model.eval()
    final_stats = dict(history[-1]) if history else {}
    resumed_from = start_epoch if start_epoch else None
    return TrainResult(
        run.model,
        history,
        cfg.epochs - start_epoch,
        resumed_from,
        str(run.device),
        time.perf_counter() - t0,
        final_stats,
        dict(run.method.choices),
    )
