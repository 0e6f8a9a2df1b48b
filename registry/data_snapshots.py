"""DVC snapshots of each generation's data manifest.

The workspace's ``data/`` folder is a DVC repository (``dvc init --no-scm``;
it also works nested inside the project's own DVC repo under ``dvc repro``).
Each generation's manifest is ``dvc add``-ed; the DVC md5 of the manifest is
the generation's data hash, and the DVC cache keeps every version.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from components.data.selection import DataManifest

__all__ = ["DataSnapshotStore", "SnapshotInfo"]


@dataclass(frozen=True)
class SnapshotInfo:
    name: str
    path: Path
    data_hash: str  # DVC md5 of the manifest file


class DataSnapshotStore:
    """A DVC repository holding one manifest per snapshot name."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _ensure_repo(self) -> None:
        if (self.root / ".dvc").is_dir():
            return
        from dvc.repo import Repo

        self.root.mkdir(parents=True, exist_ok=True)
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
        with Repo(str(self.root)) as repo:
            repo.add(str(target))
        return SnapshotInfo(name, target, self.read_hash(name))

    def read_hash(self, name: str) -> str:
        dvc_file = self.root / "snapshots" / name / "manifest.json.dvc"
        meta = yaml.safe_load(dvc_file.read_text())
        return str(meta["outs"][0]["md5"])

    def load(self, name: str) -> DataManifest:
        return DataManifest.from_json((self.root / "snapshots" / name / "manifest.json").read_text())
