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
    the host once, by :meth:`means`; a sticky flag records a non-finite loss for :meth:`check_finite`."""

    def __init__(self, device: torch.device) -> None:
        self.sums: dict[str, Tensor | float] = {}
        self.steps = 0
        self.nonfinite = torch.zeros((), dtype=torch.bool, device=device)
        self.first_bad: dict[str, Tensor] = {}

    def add(self, values: dict[str, Tensor | float]) -> None:
        for k, v in values.items():
            v = v.detach().double() if isinstance(v, Tensor) else float(v)  # float64 sums, as Python floats were
            self.sums[k] = self.sums[k] + v if k in self.sums else v

    def step(self, loss: Tensor, terms: dict[str, Tensor]) -> None:
        """Count a step; remember (on the device) whether its loss was finite and, for the first bad step, the terms."""
        bad = ~torch.isfinite(loss.detach())
        fresh = bad & ~self.nonfinite  # this step is the first bad one
        for k, v in terms.items():
            v = v.detach().float()
            self.first_bad[k] = torch.where(fresh, v, self.first_bad[k]) if k in self.first_bad else v
        self.nonfinite = self.nonfinite | bad
        self.steps += 1

    def check_finite(self, epoch: int) -> None:
        """Raise :class:`TrainingDivergedError` if any step so far had a NaN/inf loss (one host sync)."""
        if bool(self.nonfinite):
            raise TrainingDivergedError(
                f"loss became non-finite in epoch {epoch + 1} (terms of the first bad step: "
                + ", ".join(f"{k}={float(v):.4g}" for k, v in self.first_bad.items())
                + "); lower train.lr or the alignment weight"
            )

    def means(self) -> dict[str, float]:
        """The per-step means, read from the device in one transfer."""
        keys = [k for k, v in self.sums.items() if isinstance(v, Tensor)]
        on_device = torch.stack([self.sums[k] for k in keys]).tolist() if keys else []
        values = dict(zip(keys, on_device, strict=True))
        values.update({k: float(v) for k, v in self.sums.items() if not isinstance(v, Tensor)})
        return {k: values[k] / max(1, self.steps) for k in self.sums}
