"""Data-parallel training inside the loop: what one rank of a ``torch.distributed`` group does differently.

The semantics (docs/design.md §7.13) make a run on N ranks the single-process run, up to float rounding:

* ``train.batch_size`` is the *global* batch. Every rank draws the same permutation and the same augmentation
  parameters, reads only its contiguous part of each global batch (:func:`~components.data.batches.shard_bounds`)
  and runs the model on it, wrapped in :class:`~torch.nn.parallel.DistributedDataParallel`.
* Batch norm normalises with the global batch's statistics (:func:`sync_batch_norm`; ``nn.SyncBatchNorm`` refuses
  CPU tensors, so gloo ranks could not use it).
* The model outputs (new, old, reference) and the labels are gathered across ranks (:func:`gather_output`), and
  the base loss and the alignment loss are computed on the whole global batch on every rank. So every loss that
  couples the items of a batch — HBCT's RINCE and the InfoNCE baselines (batch negatives), HOC's negatives, BT²'s
  and the mixed-geometry contrastive terms — sees the same negatives as in one process, and per-item means are
  over the global batch. The old and reference models run on each rank's own part (no gradients, no traffic).
* Gathered rows of other ranks carry no gradient; the rank's own rows have their gradient scaled by N in the
  backward pass (:func:`~components.autograd.scale_grad`), so DDP's gradient average sums exactly the
  single-process gradient. Parameters used on the global batch outside the model's forward (a learnt curvature in
  the loss, the loss's own parameters) get the same full gradient on every rank.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor, nn

from components.autograd import scale_grad
from components.data.batches import shard_bounds
from components.models.encoder import ModelOutput

__all__ = ["Ranks", "current_ranks", "data_parallel", "gather_output", "gather_rows", "sync_batch_norm"]


@dataclass(frozen=True)
class Ranks:
    """This process's place in the training group (``world`` 1: not distributed)."""

    rank: int = 0
    world: int = 1

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def leader(self) -> bool:
        """Rank 0: the one process that writes checkpoints and reports progress."""
        return self.rank == 0

    @property
    def shard(self) -> tuple[int, int]:
        return self.rank, self.world

    def rows(self, n: int) -> tuple[int, int]:
        """``(start, n)``: where this rank's part of a global batch of ``n`` begins, and ``n``."""
        return shard_bounds(n, self.world, self.rank)[0], n


def current_ranks() -> Ranks:
    """The initialised default process group's rank and size, or a single process."""
    if dist.is_available() and dist.is_initialized():
        return Ranks(dist.get_rank(), dist.get_world_size())
    return Ranks()


def gather_rows(t: Tensor, n: int, ranks: Ranks) -> Tensor:
    """Every rank's part ``t`` (B_r, ...) of a global batch of ``n`` rows → the global batch (n, ...), in rank order.

    Other ranks' rows are detached; this rank's rows keep their graph, with the gradient scaled by the world size
    (module docstring). Bool tensors travel as uint8, half-precision ones as float32 (gloo moves neither).
    """
    sizes = [hi - lo for lo, hi in (shard_bounds(n, ranks.world, r) for r in range(ranks.world))]
    send = t.detach()
    if send.dtype == torch.bool or send.dtype in (torch.bfloat16, torch.float16):  # gloo moves neither
        send = send.to(torch.uint8 if send.dtype == torch.bool else torch.float32)
    if send.shape[0] < max(sizes):  # all_gather moves equal shapes: pad, then trim
        send = torch.cat([send, send.new_zeros((max(sizes) - send.shape[0], *send.shape[1:]))])
    parts = [torch.empty_like(send) for _ in sizes]
    dist.all_gather(parts, send.contiguous())
    out = [p[:s].to(t.dtype) for p, s in zip(parts, sizes, strict=True)]
    out[ranks.rank] = scale_grad(t, float(ranks.world)) if t.requires_grad else t
    return torch.cat(out)


def gather_output(out: ModelOutput | None, n: int, ranks: Ranks) -> ModelOutput | None:
    """:func:`gather_rows` over every per-item field of a model output (z, emb, logits, clipped, aux)."""
    if out is None:
        return None
    return dataclasses.replace(
        out,
        z=gather_rows(out.z, n, ranks),
        emb=gather_rows(out.emb, n, ranks),
        logits=None if out.logits is None else gather_rows(out.logits, n, ranks),
        clipped=gather_rows(out.clipped, n, ranks),
        aux={k: gather_rows(v, n, ranks) for k, v in out.aux.items()},
    )


class _AllReduce(torch.autograd.Function):
    """Sum over ranks, with the gradient summed over ranks too (every rank's loss depends on every rank's input)."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:  # type: ignore[override]
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


def _all_sum(x: Tensor) -> Tensor:
    return _AllReduce.apply(x)


class _GlobalBatchNorm:
    """Batch norm over the global batch: mean and biased variance all-reduced across ranks (two passes, as one
    process computes them), with gradients through the reductions (:class:`_AllReduce`);
    running statistics updated as ``F.batch_norm`` does (unbiased variance). Eval mode, or one rank: the class's own
    forward. Mixed into a copy of the module's own BatchNorm class, so the state dict does not change."""

    def forward(self, x: Tensor) -> Tensor:
        bn: nn.modules.batchnorm._BatchNorm = self  # type: ignore[assignment]
        if not bn.training or not (dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(x)  # type: ignore[misc]
        bn._check_input_dim(x)
        dims = [0, *range(2, x.dim())]
        shape = [1, -1] + [1] * (x.dim() - 2)
        xf = x.float()
        count = _all_sum(xf.new_tensor([x.numel() / x.shape[1]]))[0]
        mean = _all_sum(xf.sum(dims)) / count
        centred = xf - mean.view(shape)
        var = _all_sum(centred.square().sum(dims)) / count
        y = centred * torch.rsqrt(var + bn.eps).view(shape)
        if bn.affine:
            y = y * bn.weight.view(shape) + bn.bias.view(shape)
        if bn.track_running_stats and bn.running_mean is not None and bn.running_var is not None:
            with torch.no_grad():
                bn.num_batches_tracked.add_(1)  # type: ignore[union-attr]
                f = 1.0 / float(bn.num_batches_tracked) if bn.momentum is None else bn.momentum
                bn.running_mean.mul_(1 - f).add_(mean, alpha=f)
                bn.running_var.mul_(1 - f).add_(var * (count / (count - 1).clamp_min(1)), alpha=f)
        return y.to(x.dtype)


_GLOBAL_CLASSES: dict[type, type] = {}


def sync_batch_norm(model: nn.Module, on: bool = True) -> nn.Module:
    """Make every BatchNorm of ``model`` normalise over the global batch (``on``), or back (``off``), in place.

    The module's class is swapped for a subclass with :class:`_GlobalBatchNorm`'s forward: parameters, buffers and
    the state dict stay exactly as they are.
    """
    for m in model.modules():
        cls = type(m)
        if on and isinstance(m, nn.modules.batchnorm._BatchNorm) and not isinstance(m, _GlobalBatchNorm):
            if cls not in _GLOBAL_CLASSES:
                _GLOBAL_CLASSES[cls] = type(f"Global{cls.__name__}", (_GlobalBatchNorm, cls), {})
            m.__class__ = _GLOBAL_CLASSES[cls]
        elif not on and isinstance(m, _GlobalBatchNorm):
            m.__class__ = cls.__mro__[2]  # (Global<X>, _GlobalBatchNorm, X, ...)
    return model


def data_parallel(model: nn.Module, device: torch.device) -> nn.Module:
    """``model`` wrapped in DDP (gradients averaged across ranks during the backward pass).

    Buffers are not broadcast: the global batch norm keeps the running statistics equal on every rank.
    """
    return nn.parallel.DistributedDataParallel(
        model, device_ids=[torch.cuda.current_device()] if device.type == "cuda" else None, forward_sync_buffers=False
    )
