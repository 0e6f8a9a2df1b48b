"""Running sums of an epoch's losses and statistics, kept on the device and read on the host once per epoch."""

from __future__ import annotations

import torch
from torch import Tensor

from components.errors import BctflowError

__all__ = ["FINITE_CHECK_EVERY", "EpochMeter", "TrainingDivergedError"]


class TrainingDivergedError(BctflowError):
    """The loss became NaN/inf."""


#: the loop checks the loss for NaN/inf every this many steps (and at the end of each epoch), not at every step:
#: a check reads a device flag on the host, which waits for the GPU (docs/design.md §7.12)
FINITE_CHECK_EVERY = 32


class EpochMeter:
    """Running sums of an epoch's scalars, kept where they are produced (on the device for tensors) and read on
    the host once, by :meth:`means`; a sticky flag records a non-finite loss for :meth:`check_finite`.

    A step's scalars are summed as one stacked float64 vector (one stack, one cast, one add) rather than one small
    kernel per scalar: on a GPU running a small model the step is bound by kernel launches (docs/design.md §7.12).
    The sums are those of the float64 values of each scalar, as before; the order of the keys is kept.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.steps = 0
        self.nonfinite = torch.zeros((), dtype=torch.bool, device=device)
        self._sums: dict[tuple[str, ...], Tensor] = {}  # the keys of one add() call → their (k,) float64 sums
        self._host: dict[str, float] = {}
        self._order: dict[str, None] = {}  # every key, in first-seen order
        self._bad_keys: tuple[str, ...] = ()
        self._first_bad: Tensor | None = None

    def add(self, values: dict[str, Tensor | float]) -> None:
        """Add one step's scalars (0-d tensors or Python numbers) to the sums."""
        self._order.update(dict.fromkeys(values))
        keys = tuple(k for k, v in values.items() if isinstance(v, Tensor))
        if keys:
            vec = torch.stack([values[k].detach().reshape(()) for k in keys]).double()  # type: ignore[union-attr]
            self._sums[keys] = self._sums[keys] + vec if keys in self._sums else vec
        for k, v in values.items():
            if not isinstance(v, Tensor):
                self._host[k] = self._host.get(k, 0.0) + float(v)

    def step(self, loss: Tensor, terms: dict[str, Tensor]) -> None:
        """Count a step; remember (on the device) whether its loss was finite and, for the first bad step, the terms."""
        bad = ~torch.isfinite(loss.detach())
        if terms:
            vec = torch.stack([v.detach().reshape(()) for v in terms.values()]).float()
            fresh = bad & ~self.nonfinite  # this step is the first bad one
            same = self._first_bad is not None and self._bad_keys == tuple(terms)
            self._first_bad = torch.where(fresh, vec, self._first_bad) if same else vec  # type: ignore[arg-type]
            self._bad_keys = tuple(terms)
        self.nonfinite = self.nonfinite | bad
        self.steps += 1

    def check_finite(self, epoch: int) -> None:
        """Raise :class:`TrainingDivergedError` if any step so far had a NaN/inf loss (one host sync)."""
        if bool(self.nonfinite):
            bad = self._first_bad.tolist() if self._first_bad is not None else []
            raise TrainingDivergedError(
                f"loss became non-finite in epoch {epoch + 1} (terms of the first bad step: "
                + ", ".join(f"{k}={v:.4g}" for k, v in zip(self._bad_keys, bad, strict=True))
                + "); lower train.lr or the alignment weight"
            )

    def means(self) -> dict[str, float]:
        """The per-step means, read from the device in one transfer."""
        groups = list(self._sums.items())
        flat = torch.cat([v for _, v in groups]).tolist() if groups else []
        values = dict(self._host)
        for k, v in zip([k for keys, _ in groups for k in keys], flat, strict=True):  # a key may be in several groups
            values[k] = values.get(k, 0.0) + v
        return {k: values[k] / max(1, self.steps) for k in self._order}
