"""The workspace: every piece of state lives under one directory (``--home`` / BCTFLOW_HOME).

<home>/
  lineage.db          lineage database (unless lineage.db_url says otherwise)
  mlflow.db           MLflow tracking + registry store (unless tracking.mlflow_uri)
  mlartifacts/        MLflow artifacts
  data/               DVC repository with one manifest snapshot per generation
  datasets/           downloaded / cached datasets (unless data.root)
  generations/gen_NNN committed generations: model.pt, gallery.npz, index/, metrics.json, plots
  staging/gen_NNN     work in progress (moved into generations/ on commit)
  live/               CURRENT (the live-gallery pointer) and backfilled index versions index-vNNN/
  backfills/bf_NNN    work in progress of a backfill (chunks, resumable)
  prefect/            PREFECT_HOME for the ephemeral Prefect server
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from flows.params import Params

__all__ = ["DEFAULT_HOME", "Workspace", "generation_dirname", "resolve_home"]

DEFAULT_HOME = Path(".bctflow")


def resolve_home(home: str | Path | None) -> Path:
    """--home, else $BCTFLOW_HOME, else ./.bctflow (absolute)."""
    chosen = home if home is not None else os.environ.get("BCTFLOW_HOME") or DEFAULT_HOME
    return Path(chosen).expanduser().resolve()


def generation_dirname(gen_id: int) -> str:
    return f"gen_{gen_id:03d}"


@dataclass(frozen=True)
class Workspace:
    home: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "home", Path(self.home))

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def generations_dir(self) -> Path:
        return self.home / "generations"

    @property
    def staging_dir(self) -> Path:
        return self.home / "staging"

    @property
    def mlflow_artifacts(self) -> Path:
        return self.home / "mlartifacts"

    @property
    def live_dir(self) -> Path:
        """The live gallery: the CURRENT pointer and the backfilled index versions."""
        return self.home / "live"

    @property
    def backfills_dir(self) -> Path:
        return self.home / "backfills"

    @property
    def prefect_home(self) -> Path:
        return self.home / "prefect"

    def datasets_dir(self, params: Params) -> Path:
        return Path(params.data.root).expanduser() if params.data.root else self.home / "datasets"

    def lineage_url(self, params: Params) -> str:
        return params.lineage.db_url or f"sqlite:///{self.home / 'lineage.db'}"

    def mlflow_uri(self, params: Params) -> str:
        return params.tracking.mlflow_uri or f"sqlite:///{self.home / 'mlflow.db'}"

    def generation_dir(self, gen_id: int) -> Path:
        return self.generations_dir / generation_dirname(gen_id)

    def staging(self, gen_id: int) -> Path:
        return self.staging_dir / generation_dirname(gen_id)

    def is_empty(self) -> bool:
        return not self.home.exists() or not any(self.home.iterdir())
