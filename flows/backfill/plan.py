"""A backfill's plan: what it keeps current, with which generation, how — the one object every backfill step takes
(made by :func:`flows.backfill.make.plan_backfill`, saved as ``plan.json`` in its work folder)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from components.indexing.version import GalleryVersion
from flows.backfill.transform import PlannedBridge
from flows.params import Params
from flows.runtime.workspace import Workspace

__all__ = ["BackfillGallery", "BackfillPlan"]


class BackfillGallery(BaseModel):
    """A gallery the backfill keeps current: the live version's ``evaluation`` gallery or its serving ``corpus``,
    with its items (``total``) and how many this backfill re-embeds (``selected``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Literal["evaluation", "corpus"]
    total: int
    selected: int

    @property
    def corpus(self) -> bool:
        return self.name == "corpus"


class BackfillPlan(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    home: str
    params: Params
    target: int
    target_checkpoint: str
    source_generation: int
    source_pointer_version: int
    #: the live version's evaluation index the backfill replaces (the lineage pointer row's ``index_path``)
    source_index: str
    kind: str  # full | partial | ingest (new corpus items embedded by the live gallery's own model)
    fraction: float
    order: str
    seed: int
    chunk_size: int
    throttle_s: float
    restart_zeta: bool
    zeta: float | None
    #: the evaluation gallery first, then the serving corpus when there is one
    galleries: tuple[BackfillGallery, ...]
    started_at: str
    forced: bool = False
    #: a gallery transform (flows/backfill/transform.py): the bridge that carries the live rows; None: re-embedding
    bridge: PlannedBridge | None = None
    #: the generations whose queries the new version accepts (None: the target's only; an ingest keeps the live's)
    compatible: tuple[int, ...] | None = None
    #: a partial backfill that tops the target's share of the gallery up to ``fraction``: items it embeds already
    #: are not embedded again (the lifecycle's re-embedding continued over nights)
    top_up: bool = False

    @property
    def workspace(self) -> Workspace:
        return Workspace(Path(self.home))

    @property
    def work_dir(self) -> Path:
        return self.workspace.backfill_in_progress

    @property
    def work_version(self) -> GalleryVersion:
        """The re-embedded parts, laid out as a gallery version in the work folder."""
        return GalleryVersion(self.work_dir)

    @property
    def live_version(self) -> GalleryVersion:
        """The gallery version the live pointer names (the one this backfill replaces)."""
        return GalleryVersion.of_index(self.source_index)

    @property
    def event_kind(self) -> str:
        """The backfill event's kind: ``full`` / ``partial``, or ``transform`` for a gallery transform."""
        return self.kind if self.bridge is None else "transform"

    def reason(self) -> str:
        """The live pointer's reason: ``full backfill with generation 2``, ``gallery transform into generation 2 by
        bridge v1 (procrustes)``."""
        if self.kind == "ingest":
            new = sum(g.selected for g in self.galleries)
            return f"ingest of {new} new corpus items embedded by generation {self.target}"
        if self.bridge is None:
            return f"{self.kind} backfill with generation {self.target}"
        return f"gallery transform into generation {self.target} by bridge v{self.bridge.version} ({self.bridge.kind})"

    @property
    def accepts(self) -> list[int]:
        """The generations whose queries the new version accepts."""
        return list(self.compatible) if self.compatible is not None else [self.target]

    @property
    def evaluation(self) -> BackfillGallery:
        return self.galleries[0]

    @property
    def n_parts(self) -> int:
        """Parts of ``chunk_size`` items the selected items fill, over every gallery."""
        return sum((g.selected + self.chunk_size - 1) // self.chunk_size for g in self.galleries)

    def source_in_workspace(self) -> str:
        """``source_index`` relative to the workspace (where it lies in it): the same in a copied workspace."""
        src, home = Path(self.source_index), Path(self.home)
        return src.relative_to(home).as_posix() if src.is_relative_to(home) else str(src)

    def same_request(self, other: BackfillPlan) -> bool:
        keys = ("target", "kind", "fraction", "order", "seed", "chunk_size", "forced", "bridge", "top_up")
        same_source = self.source_in_workspace() == other.source_in_workspace()
        names = [g.name for g in self.galleries] == [g.name for g in other.galleries]
        return same_source and names and all(getattr(self, k) == getattr(other, k) for k in keys)

    def repeats(self, done: BackfillPlan) -> bool:
        """Whether this plan asks for what the finished backfill ``done`` did: the same generation, kind, fraction,
        order, seed and galleries under the same params (the gallery it replaces is ``done``'s result)."""
        keys = ("target", "kind", "fraction", "order", "seed", "forced", "restart_zeta", "zeta", "galleries", "bridge")
        return self.params.as_dict() == done.params.as_dict() and all(
            getattr(self, k) == getattr(done, k) for k in keys
        )
