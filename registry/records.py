"""Plain records the lineage store writes: a generation, its evaluations, decisions, pointers, backfills."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

__all__ = [
    "ROUTES",
    "BackfillRecord",
    "BridgeRecord",
    "CompatRecord",
    "DecisionRecord",
    "EvaluationRecord",
    "GenerationBundle",
    "GenerationRecord",
    "NightRecord",
    "PointerRecord",
    "RouteChoiceRecord",
    "ZetaRecord",
]


@dataclass
class GenerationRecord:
    id: int
    name: str
    parent_id: int | None
    dataset: str
    data_hash: str
    data_snapshot: str
    class_order: list[int]
    architecture: dict[str, Any]
    geometry: str
    alignment: str
    hyperparameters: dict[str, Any]
    zeta: float | None
    curvature: float
    embed_dim: int
    checkpoint_path: str
    index_path: str
    params_digest: str
    reference_checkpoint_path: str | None = None
    train_seconds: float | None = None
    data_fingerprint: str | None = None
    promoted: bool | None = None
    mlflow_model: str | None = None
    mlflow_version: str | None = None
    mlflow_run_id: str | None = None
    #: the measured fact: cross(new, live) > self(live) on the decision metric (None: recorded before schema v3)
    compatible_with_live: bool | None = None
    #: sha256 of the checkpoint file (None: recorded before lineage revision 0002)
    checkpoint_sha256: str | None = None
    #: digest of the code that shapes a model (None: recorded before lineage revision 0004)
    code_digest: str | None = None
    #: sha256 of its evaluation gallery's store.json (None: recorded before lineage revision 0006)
    gallery_sha256: str | None = None


@dataclass
class EvaluationRecord:
    query_generation_id: int
    gallery_generation_id: int
    metric: str
    value: float
    query_role: str = "model"
    gallery_role: str = "model"


@dataclass
class ZetaRecord:
    parent_zeta: float | None
    delta: float
    zeta: float
    restarted: bool = False


@dataclass
class DecisionRecord:
    required: bool
    reasons: list[str]
    checks: list[dict[str, Any]]
    against_generation_id: int | None


@dataclass
class PointerRecord:
    """A live-gallery pointer: which index serves, embedded by which model, queried by which generations."""

    generation_id: int
    index_path: str
    reason: str
    model_checkpoint: str | None = None
    zeta: float | None = None
    compatible_generations: list[int] = field(default_factory=list)
    backfill_id: int | None = None
    #: sha256 of model_checkpoint (None: recorded before lineage revision 0002)
    model_sha256: str | None = None
    #: sha256 of the index's manifest.json (None: recorded before lineage revision 0005)
    index_sha256: str | None = None
    #: sha256 of the version's evaluation gallery store.json (None: recorded before lineage revision 0006)
    gallery_sha256: str | None = None
    #: the store holding the serving vectors (params gallery.store; None: recorded before lineage revision 0007)
    store: str | None = None
    #: its collection / table of them (None: FAISS files, or recorded before revision 0007)
    collection: str | None = None
    #: rows per generation stamp as written, {"<generation>": rows} (JSON keys; None: recorded before revision 0007)
    rows_by_generation: dict[str, int] | None = None
    #: the ANN index, {"index_type": …, its parameters} (None: recorded before revision 0007)
    index_params: dict[str, Any] | None = None
    #: sha256 of the version's seal.json (components/indexing/seal.py; None: recorded before revision 0011)
    seal_sha256: str | None = None

    def __post_init__(self) -> None:
        if self.rows_by_generation is not None:  # the keys as the JSON column reads them back
            self.rows_by_generation = {str(g): int(n) for g, n in self.rows_by_generation.items()}

    @classmethod
    def of_row(cls, row: Any, **changes: Any) -> PointerRecord:
        """A copy of a ``gallery_pointers`` row (or record) — every field — with ``changes`` (e.g. a new ``reason``,
        ``compatible_generations``). Paths as the row holds them (the store's rows: absolute, resolved)."""
        copied = {f.name: getattr(row, f.name) for f in fields(cls)}
        copied["compatible_generations"] = list(copied["compatible_generations"] or [row.generation_id])
        return cls(**{**copied, **changes})


@dataclass
class CompatRecord:
    metric: str
    generation_ids: list[int]
    matrix: list[list[float | None]]
    ac: float | None
    aa: float | None
    aca: float | None


@dataclass
class BackfillRecord:
    from_generation_id: int
    to_generation_id: int
    kind: str
    fraction: float
    order: str
    total: int
    reembedded: int
    index_path: str
    zeta_restarted: bool
    metrics: dict[str, Any]
    started_at: Any
    duration_s: float


@dataclass
class BridgeRecord:
    """A fitted bridge as the lineage records it (``bridges``, revision 0008); its version is the lineage's to give."""

    from_generation_id: int
    to_generation_id: int
    role: str  # adapter | transform
    kind: str
    path: str
    sha256: str
    sample: int
    fit_error: float
    mlflow_version: str | None = None


#: the upgrade routes, cheapest in kind first (docs/design.md §11; the rule: flows/upgrade/route_rule.py)
ROUTES = ("compatible", "adapter", "transform", "backfill")


@dataclass(frozen=True)
class RouteChoiceRecord:
    """The upgrade route a rule took for generation ``generation_id`` from ``from_generation_id``'s gallery
    (``route_choices``, revision 0009): ``rule`` is ``auto`` or the route the user set; ``evidence`` every route's
    measurement."""

    generation_id: int
    from_generation_id: int
    route: str
    rule: str
    min_map: float | None
    met_bar: bool
    line: str
    evidence: list[dict[str, Any]]


@dataclass(frozen=True)
class NightRecord:
    """A lifecycle night's decision as the lineage records it (``nights``, revision 0010) before its action runs:
    ``night`` its key (the nightly run's date, or the name a caller gives it), the ``policy``, the night's new
    generation, the generations it started from, the chosen ``action`` with ``fraction`` / ``target_generation_id``,
    the one-line ``reason``, the forecast served mAP and every option considered, the shipped rules' ``checks``,
    today's served mAP before the action and what it carries over."""

    night: str
    policy: str
    generation_id: int | None
    live_generation_id: int
    production_id: int | None
    action: str
    fraction: float | None
    target_generation_id: int | None
    reason: str
    forecast_map: float | None
    served_before: float | None
    options: list[dict[str, Any]]
    checks: list[dict[str, Any]]
    carry: dict[str, Any] | None = None


@dataclass
class GenerationBundle:
    generation: GenerationRecord
    evaluations: list[EvaluationRecord] = field(default_factory=list)
    derived: dict[str, float | None] = field(default_factory=dict)
    diagnostics: dict[str, float | None] = field(default_factory=dict)
    zeta: ZetaRecord | None = None
    decision: DecisionRecord | None = None
    pointer: PointerRecord | None = None
    compat: list[CompatRecord] = field(default_factory=list)
    promotion: tuple[int | None, str] | None = None  # (previous production generation, reason) when the gate promotes
