"""DVC snapshots of each generation's data manifest.

The workspace's ``data/`` folder is a DVC repository (``dvc init --no-scm``;
it also works nested inside the project's own DVC repo under ``dvc repro``).
Each generation's manifest is ``dvc add``-ed; the DVC md5 of the manifest is
the generation's data hash, and the DVC cache keeps every version. DVC runs as a
library, quietly (:func:`quiet_dvc`): its progress bars, spinners and routine lines
stay off the console, which the snapshot step's own one line serves.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from components.data.selection import DataManifest

__all__ = ["DataSnapshots", "SnapshotInfo", "quiet_dvc"]

#: DVC's loggers; importing DVC gives each its own console handlers (as its command line wants)
_DVC_LOGGERS = ("dvc", "dvc_objects", "dvc_data")


@contextlib.contextmanager
def quiet_dvc() -> Iterator[None]:
    """DVC as a library, without console output of its own while the block runs.

    Its INFO lines ("Initialized DVC repository.", printed twice: by DVC's own handler and again by the root
    logger's) are dropped; a warning reaches the console once, through the root logger (DVC's own handlers are
    detached); its progress bars (``dvc.progress``: shown unless that logger is above ERROR) and its status spinner
    ("Checking graph", on DVC's rich error console) draw nothing.
    """
    from dvc.ui import ui
    from rich.console import Console

    loggers = [logging.getLogger(n) for n in _DVC_LOGGERS]
    bars = logging.getLogger("dvc.progress")
    saved = [(lg, lg.level, list(lg.handlers)) for lg in [*loggers, bars]]
    spinner = ui.__dict__.get("error_console")  # a cached property: set on the instance once used
    for lg in loggers:
        lg.setLevel(logging.WARNING)
        for handler in list(lg.handlers):
            lg.removeHandler(handler)
    bars.setLevel(logging.CRITICAL)
    ui.error_console = Console(stderr=True, quiet=True)  # type: ignore[misc]
    try:
        yield
    finally:
        for lg, level, handlers in saved:
            lg.setLevel(level)
            for handler in handlers:
                lg.addHandler(handler)
        if spinner is None:
            ui.__dict__.pop("error_console", None)
        else:
            ui.error_console = spinner  # type: ignore[misc]


@dataclass(frozen=True)
class SnapshotInfo:
    name: str
    path: Path
    data_hash: str  # DVC md5 of the manifest file


class DataSnapshots:
    """A DVC repository holding one manifest per snapshot name."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _ensure_repo(self) -> None:
        if (self.root / ".dvc").is_dir():
            return
        from dvc.repo import Repo

        self.root.mkdir(parents=True, exist_ok=True)
        with quiet_dvc():
            Repo.init(str(self.root), no_scm=True)

    def snapshot(self, name: str, manifest: DataManifest) -> SnapshotInfo:
        """Write ``snapshots/<name>/manifest.json`` and ``dvc add`` it. Idempotent."""
        from dvc.repo import Repo

        self._ensure_repo()
        target = self.root / "snapshots" / name / "manifest.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(manifest.to_json())
        os.replace(tmp, target)
        with quiet_dvc(), Repo(str(self.root)) as repo:
            repo.add(str(target))
        return SnapshotInfo(name, target, self.read_hash(name))

    def read_hash(self, name: str) -> str:
        dvc_file = self.root / "snapshots" / name / "manifest.json.dvc"
        meta = yaml.safe_load(dvc_file.read_text())
        return str(meta["outs"][0]["md5"])

    def load(self, name: str) -> DataManifest:
        return DataManifest.from_json((self.root / "snapshots" / name / "manifest.json").read_text())
