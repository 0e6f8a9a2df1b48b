"""The plan of a generation: every decision, made once, before anything is written (docs/design.md §7.9).

:func:`flows.planning.make.make_plan` returns one immutable :class:`GenerationPlan` per run; the flow takes it as
its parameter and every step reads what it needs from it — the parent and its verified checkpoint, ζ and why,
the training selection, the spec and training config of each model it trains, and the lineage facts evaluation
and registration show — never reopening the lineage for them and never changing the plan.
:func:`check_current` re-checks, under the workspace lock, that the lineage has not moved since the plan was made.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from components.errors import LineageError
from components.evaluation.lineage_timeline import Timeline
from components.geometry import Space, create_space
from components.losses import AlignmentChoice, choose_alignment
from components.models import ModelSpec
from components.models.checkpoint import Checkpoint, read_checkpoint
from components.models.encoder import EmbeddingModel
from components.training.loop import TrainConfig
from flows.params import Params
from flows.planning.roles import ROLES
from flows.runtime.workspace import Workspace
from registry.lineage import LineageDB

__all__ = [
    "ROLES",
    "CompatValue",
    "GenerationPlan",
    "ParentRef",
    "RolePlan",
    "Selection",
    "ServingGeneration",
    "check_current",
    "parent_checkpoint",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


@functools.lru_cache(maxsize=4)
def _read(path: str, size: int, mtime_ns: int, inode: int) -> Checkpoint:
    return read_checkpoint(Path(path))


def parent_checkpoint(path: str | Path) -> Checkpoint:
    """A parent model file, read once per process while it stays the same file (path, size, mtime, inode): the
    plan verifies it, and ζ from data, the aligned training and the evaluation reuse what was read."""
    p = Path(path)
    st = os.stat(p) if p.is_file() else None
    return _read(str(p), st.st_size, st.st_mtime_ns, st.st_ino) if st else read_checkpoint(p)


class ParentRef(_Frozen):
    """The generation whose embeddings fill the live gallery (the new one aligns to it).

    ``checkpoint`` / ``zeta`` are those of the model that embedded the live gallery: the generation's own, or its
    rescaled copy after a ζ-restarting backfill; ``spec``: that model's spec, read from the file the plan verified.
    ``evaluation_gallery``: the live gallery version's evaluation gallery (the labelled evaluation split as the live
    gallery holds it, beside the live index: rescaled or mixed after a backfill); ``pointer_id``: the live-pointer
    row the plan was made against.
    """

    id: int
    name: str
    checkpoint: str
    evaluation_gallery: str
    zeta: float | None
    curvature: float
    geometry: str
    embed_dim: int
    class_order: tuple[int, ...]
    mlflow_version: str | None
    pointer_id: int
    #: sha256 the lineage recorded for ``checkpoint`` (None: recorded before lineage revision 0002)
    checkpoint_sha256: str | None = None
    spec: ModelSpec | None = None

    @property
    def space(self) -> Space:
        """The parent model's space (its stored ``geometry`` at its ``curvature``)."""
        return create_space(self.geometry, self.curvature)

    def model(self) -> EmbeddingModel:
        """A fresh copy of the parent model (eval mode), from the file read once while planning."""
        return parent_checkpoint(self.checkpoint).model()


class RolePlan(_Frozen):
    """One model the generation trains: what it trains with, its spec and config, its run key."""

    role: str
    alignment: str
    alignment_options: dict[str, Any]
    spec: ModelSpec
    config: TrainConfig
    run_key: str

    def choice(self) -> AlignmentChoice:
        """The alignment this model trains with (its options validated while planning)."""
        return choose_alignment(self.alignment, self.alignment_options)


class Selection(_Frozen):
    """The generation's training data as planned: classes in model-label order, how many images, the manifest's
    sha256 (the snapshot step writes that very manifest) and the dataset fingerprint it was selected from."""

    class_order: tuple[int, ...]
    class_names: tuple[str, ...]
    count: int
    sha256: str
    fingerprint: str


class ServingGeneration(_Frozen):
    """A generation still serving (its queries are measured against its own evaluation gallery) and that gallery's
    part store."""

    id: int
    evaluation_gallery: str


class CompatValue(_Frozen):
    """A committed entry of the compatibility matrix: M(φ_query, φ_gallery) on ``metric`` (None: not comparable)."""

    query: int
    gallery: int
    metric: str
    value: float | None


class GenerationPlan(_Frozen):
    home: str
    params: Params
    #: digest of the model-shaping params and the dataset's content fingerprint (the nightly check hands both over)
    params_digest: str
    data_fingerprint: str | None = None
    #: digest of the model-shaping code (components/code_digest.py), recorded in the lineage
    code_digest: str | None = None
    gen_id: int
    name: str
    parent: ParentRef | None
    #: the other serving generations, each with its evaluation gallery (the new queries are measured against each)
    serving: tuple[ServingGeneration, ...]
    #: the committed compatibility matrix among the serving generations (evaluation adds the new row)
    compat_history: tuple[CompatValue, ...] = ()
    alignment: str
    alignment_options: dict[str, Any]
    geometry: str
    zeta: float | None
    delta_zeta: float
    zeta_prev: float | None
    zeta_restarted: bool
    #: why ζ is what it is, when data chose it (geometry.zeta_rule: percentile; flows/planning/zeta.py)
    zeta_reason: str | None = None
    classes: tuple[int, ...] | str
    fraction: float
    selection: Selection
    backbone: str
    backbone_kwargs: dict[str, Any]
    epochs: int
    #: the models this generation trains, by role ("model", and "reference" when planned)
    roles: dict[str, RolePlan]
    run_key: str
    generations_since_backfill: int
    #: the committed lineage as planned: generations and backfills in order, on the decision metric
    #: (:meth:`registry.lineage.LineageDB.timeline`): the registration's chain text and picture
    timeline: Timeline
    notes: tuple[str, ...] = ()

    @property
    def workspace(self) -> Workspace:
        return Workspace(Path(self.home))

    @property
    def staging_dir(self) -> Path:
        return self.workspace.staging(self.gen_id)

    @property
    def final_dir(self) -> Path:
        return self.workspace.generation_dir(self.gen_id)

    @property
    def reference(self) -> bool:
        """Whether the independent reference φ* is trained (P_com / P_up, or a method that learns from it)."""
        return "reference" in self.roles

    @property
    def serving_ids(self) -> tuple[int, ...]:
        return tuple(s.id for s in self.serving)

    def role_dir(self, role: str) -> Path:
        """Staging folder of the generation's model or of its independent reference."""
        return self.staging_dir if role == "model" else self.staging_dir / "reference"

    def train_config(self, role: str) -> TrainConfig:
        """The role's training config; its seed is the role's own (components/training/seeds.py): the generation's
        model does not start from its parent's weights, and the reference is an independent twin, not a copy."""
        return self.roles[role].config

    def role_run_key(self, role: str) -> str:
        return self.roles[role].run_key

    def compat_value(self, query: int, gallery: int, metric: str) -> float | None:
        """A committed M(φ_query, φ_gallery) on ``metric`` (None: not recorded or not comparable)."""
        return next(
            (c.value for c in self.compat_history if (c.query, c.gallery, c.metric) == (query, gallery, metric)),
            None,
        )


def check_current(plan: GenerationPlan, store: LineageDB) -> None:
    """Refuse a plan the lineage has moved past (another run committed, or the live gallery switched since)."""
    pointer = store.live_pointer()
    now = (store.next_generation_id(), pointer.id if pointer is not None else None)
    planned = (plan.gen_id, plan.parent.pointer_id if plan.parent is not None else None)
    if now != planned:
        raise LineageError(
            f"the lineage changed since generation {plan.gen_id} was planned (next generation {now[0]}, live pointer "
            f"{now[1]}; "
            f"planned against {planned[0]}, {planned[1]}); run the command again to plan on the current lineage"
        )
