"""A training's epoch checkpoints on disk: ``epoch_NNNN.pt`` (NNNN: the epochs it holds), the newest found by name,
the oldest pruned. What a checkpoint holds and how it is refused for another run: :mod:`components.training.loop`."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["checkpoint_path", "epochs_done", "latest_checkpoint", "prune_checkpoints"]

_NAME = re.compile(r"^epoch_(\d{4,})\.pt$")


def checkpoint_path(checkpoint_dir: Path, epoch: int) -> Path:
    """Where the checkpoint after ``epoch`` epochs goes."""
    return checkpoint_dir / f"epoch_{epoch:04d}.pt"


def _checkpoints(checkpoint_dir: Path) -> list[tuple[int, Path]]:
    """(epochs, path) of each checkpoint in ``checkpoint_dir``, oldest first ([]: none, or no folder)."""
    if not checkpoint_dir.is_dir():
        return []
    return sorted((int(m.group(1)), p) for p in checkpoint_dir.iterdir() if (m := _NAME.match(p.name)))


def latest_checkpoint(checkpoint_dir: Path) -> Path | None:
    """The highest-epoch ``epoch_NNNN.pt`` in ``checkpoint_dir`` (None if there is none)."""
    found = _checkpoints(checkpoint_dir)
    return found[-1][1] if found else None


def epochs_done(checkpoint_dir: Path) -> int:
    """The epochs the newest checkpoint in ``checkpoint_dir`` holds, from its name, without loading it (0: none):
    where a training resumes, when the checkpoint is of its run (:func:`~components.training.loop.train_model`
    checks)."""
    found = _checkpoints(checkpoint_dir)
    return found[-1][0] if found else 0


def prune_checkpoints(checkpoint_dir: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` checkpoints."""
    for _, path in _checkpoints(checkpoint_dir)[:-keep]:
        path.unlink(missing_ok=True)
