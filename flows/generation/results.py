"""What each step of a generation hands to the next (small, picklable records of paths and numbers)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from components.evaluation import DerivedMetrics
from registry.records import CompatRecord, DecisionRecord, EvaluationRecord

__all__ = ["Evaluation", "EvaluationGallery", "Snapshot", "Trained"]


@dataclass(frozen=True)
class Snapshot:
    name: str
    manifest: str
    data_hash: str
    class_order: tuple[int, ...]
    class_names: tuple[str, ...]
    n_train: int
    data_fingerprint: str  # content fingerprint of the dataset the selection was made from


@dataclass(frozen=True)
class Trained:
    role: str
    checkpoint: str
    history: list[dict[str, float]]
    seconds: float
    device: str
    resumed_from: int | None
    curvature: float
    output_dim: int
    stored_dim: int
    #: the MLflow run the training logged into (the generation's, or the reference's child run)
    run_id: str | None = None
    #: hyperparameters the alignment method chose from data before training, with their reasons (HBCT's ε by the
    #: view_angle rule): recorded in the lineage beside the configured ones
    choices: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EvaluationGallery:
    """A role's evaluation gallery: the labelled evaluation split embedded by its model (``path``: the part store),
    its index (the generation's own model only) and the share of clipped embeddings (Lorentz)."""

    role: str
    path: str
    index_dir: str | None
    count: int
    clip_fraction: float | None


@dataclass
class Evaluation:
    evaluations: list[EvaluationRecord]
    derived: DerivedMetrics
    diagnostics: dict[str, float | None]
    decision: DecisionRecord
    summary: dict[str, Any]
    artifacts: list[str] = field(default_factory=list)
    compat: list[CompatRecord] = field(default_factory=list)
    #: the measured fact (whatever rules are enabled): the new model's queries pass the empirical
    #: compatibility criterion against the live gallery, so the live gallery may accept them
    compatible: bool = True
