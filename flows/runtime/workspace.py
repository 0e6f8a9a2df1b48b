"""The workspace: every piece of state lives under one directory (``--home`` / BCTFLOW_HOME).

<home>/
  data/               DVC repository with one manifest snapshot per generation
  datasets/           downloaded / cached datasets (unless data.root)
  generations/gen_NNN committed generations: model.pt, gallery/ + index/ (the evaluation gallery), metrics.json,
                      plots; generation 0 also serving.json (and corpus/ when a serving corpus is named)
  staging/gen_NNN     work in progress (moved into generations/ on commit)
  live/               CURRENT (the live pointer) and backfilled gallery versions index-vNNN/
  backfills/          work in progress of a backfill (parts, resumable) and finished ones bf_NNN
  prefect/            PREFECT_HOME for the ephemeral Prefect server
  jobs/               multi-node training jobs the other nodes read (train.job_dir; while a training runs)
  + the lineage database and the MLflow store, unless params point them elsewhere (registry/stores.py)
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from components.errors import ConfigError
from flows.params import Params
from registry.lineage import LineageDB
from registry.stores import STORE_ENTRIES, open_lineage, open_tracking, tracking_uri
from registry.tracking.registered_model import MlflowRegistry

__all__ = ["DEFAULT_HOME", "IN_PROGRESS", "WORKSPACE_ENTRIES", "Workspace", "generation_dirname", "resolve_home"]

#: the folder name of the unfinished backfill under ``backfills/``
IN_PROGRESS = "in_progress"

DEFAULT_HOME = Path(".bctflow")
#: names a bctflow workspace may contain (a reset wipes nothing else)
WORKSPACE_ENTRIES = frozenset(
    {
        "data",
        "datasets",
        "generations",
        "staging",
        "prefect",
        "backfills",
        "live",
        "bench-cache",
        "jobs",
        ".lock",
        *STORE_ENTRIES,
    }
)


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
    def jobs_dir(self) -> Path:
        """Where a multi-node training publishes its job for the other nodes (docs/design.md §7.13)."""
        return self.home / "jobs"

    @property
    def staging_dir(self) -> Path:
        return self.home / "staging"

    @property
    def live_dir(self) -> Path:
        """The live gallery: the CURRENT pointer and the backfilled index versions."""
        return self.home / "live"

    @property
    def backfills_dir(self) -> Path:
        return self.home / "backfills"

    @property
    def backfill_in_progress(self) -> Path:
        """The work folder of the unfinished backfill (its parts, resumable)."""
        return self.backfills_dir / IN_PROGRESS

    def finished_backfill_dir(self, event_id: int) -> Path:
        """Where a committed backfill's work folder is kept (its ``plan.json`` among its files)."""
        return self.backfills_dir / f"bf_{event_id:03d}"

    def datasets_dir(self, params: Params) -> Path:
        return Path(params.data.root).expanduser() if params.data.root else self.home / "datasets"

    def generation_dir(self, gen_id: int) -> Path:
        return self.generations_dir / generation_dirname(gen_id)

    def staging(self, gen_id: int) -> Path:
        return self.staging_dir / generation_dirname(gen_id)

    def lineage(self, params: Params, *, readonly: bool = False, upgrade: bool = False) -> LineageDB:
        """The lineage store params name (default: this workspace's); see :func:`registry.stores.open_lineage`."""
        return open_lineage(params.lineage.db_url, self.home, readonly=readonly, upgrade=upgrade)

    @contextlib.contextmanager
    def session(self, params: Params, store: LineageDB | None = None, *, readonly: bool = False) -> Iterator[LineageDB]:
        """``store``, a lineage session the caller holds (left open for it), else one opened here for the block and
        closed after it (:meth:`lineage`)."""
        if store is not None:
            yield store
            return
        with self.lineage(params, readonly=readonly) as opened:
            yield opened

    def tracking(self, params: Params, *, readonly: bool = False) -> MlflowRegistry:
        """The MLflow store of params ``tracking`` (default: this workspace's); ``readonly``: see
        :func:`registry.stores.open_tracking`."""
        t = params.tracking
        return open_tracking(t.mlflow_uri, self.home, t.experiment, t.registered_model, readonly=readonly)

    def tracking_uri(self, params: Params) -> str:
        return tracking_uri(params.tracking.mlflow_uri, self.home)

    def is_empty(self) -> bool:
        return not self.home.exists() or not any(self.home.iterdir())

    def reset(self, params: Params) -> None:
        """Delete the workspace, refusing when it holds anything that is not bctflow's, or when a lineage database
        outside it (params ``lineage.db_url``) still records generations whose files it holds: deleting them would
        leave that lineage pointing at nothing. The rows are not deleted for the user: that is their database."""
        if self.is_empty():
            return
        if params.lineage.db_url is not None:
            with self.lineage(params, readonly=True) as store:
                n = store.count()
            if n:
                raise ConfigError(
                    f"the lineage database {params.lineage.db_url} (outside {self.home}) records {n} generation(s) "
                    f"whose checkpoints and indexes live in {self.home}; --reset would orphan them. Point "
                    "lineage.db_url at an empty database, or delete that lineage's rows yourself, then reset"
                )
        foreign = sorted(p.name for p in self.home.iterdir() if p.name not in WORKSPACE_ENTRIES)
        if foreign:
            raise ConfigError(
                f"{self.home} holds files that are not bctflow's ({', '.join(foreign[:5])}); refusing to wipe it, pick "
                "another --home"
            )
        shutil.rmtree(self.home)
