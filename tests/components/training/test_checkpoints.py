"""A training's epoch checkpoints on disk (components/training/checkpoints.py), found and pruned by their names."""

from __future__ import annotations

from pathlib import Path

from components.training.checkpoints import checkpoint_path, epochs_done, latest_checkpoint, prune_checkpoints


def test_the_newest_by_epoch_not_by_name_and_the_epochs_it_holds(tmp_path: Path):
    assert latest_checkpoint(tmp_path / "none") is None and epochs_done(tmp_path / "none") == 0
    for epoch in (2, 9, 10):
        checkpoint_path(tmp_path, epoch).touch()
    (tmp_path / "epoch_0011.pt.tmp").touch()  # an unfinished atomic write is no checkpoint
    (tmp_path / "model.pt").touch()
    assert checkpoint_path(tmp_path, 10).name == "epoch_0010.pt"
    assert latest_checkpoint(tmp_path) == tmp_path / "epoch_0010.pt" and epochs_done(tmp_path) == 10
    prune_checkpoints(tmp_path, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "epoch_0009.pt",
        "epoch_0010.pt",
        "epoch_0011.pt.tmp",
        "model.pt",
    ]
