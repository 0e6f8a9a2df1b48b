"""Evaluation records: what a method table takes from each new model, kept beside the tables (docs/design.md §6.6).

The model cache (checkpoints and embeddings, megabytes a model) lives in the bench home and goes with the machine,
while the equal-budget tables need about two hundred models a scenario — some ten hours of a 2-core CPU, more than
one session on one machine. A record holds everything a table takes from a new model — its validation and test
metrics against its own old model and φ*, its diagnostics, its training meta and what each role's training reached,
or that its training diverged — in a few kilobytes, as ``<records>/<id>.json`` (``bctflow bench`` keeps them under
``<out>/<profile>/records/``, committed with the tables). A run that finds a new model's record does not train it:
on another machine only the old models and φ* are trained again (new models start from their weights; the
training-free rows are theirs).

A record names its old model and φ* by cache key and by a digest of their test embeddings
(:attr:`ModelRecord.parents_digest`): a row whose parents were trained again since with embeddings that differ (another
torch, another CPU) says so in its note.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from components.evaluation.diagnostics import clip_fraction, uncertainty_seen_unseen, uncertainty_std
from components.indexing.gallery import GalleryEmbeddings
from components.io import atomic_write_text
from components.losses import MethodDiagnostics, choose_alignment
from components.models import ModelSpec

__all__ = ["ModelRecord", "RecordStore", "digest", "evaluate", "parents_digest"]

#: the four retrieval measurements a record holds for a split: the new model's self and cross scores, the old
#: model's and φ*'s self scores (components.evaluation.gallery_metrics dicts: cmc@k, map)
PAIRS = ("self", "cross", "old_self", "ref_self")


def digest(*parts: bytes | str) -> str:
    """sha256 over ``parts`` (hex, the first 16 digits)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class ModelRecord:
    """A new model measured against its old model ``old_key`` and φ* ``ref_key``.

    ``val`` / ``test``: split → {self, cross, old_self, ref_self} metric dicts; ``diagnostics``: the method's own
    (``AlignmentLoss.diagnostics``) and, for Lorentz models, the radius diagnostics of the new model, its old model and
    φ* (``clip_fraction_<role>``, ``uncertainty_std_<role>``, ``uncertainty_<old|new>_<seen|unseen>``); ``meta``: the
    cache's ``done.json`` (training seconds, history, what the method chose from data); ``diverged``: the error when
    training became non-finite (then the metrics are empty).
    """

    key: str
    label: str
    old_key: str
    ref_key: str
    parents_digest: str
    space: str = "embedding"
    meta: dict[str, Any] = field(default_factory=dict)
    val: dict[str, dict[str, float]] = field(default_factory=dict)
    test: dict[str, dict[str, float]] = field(default_factory=dict)
    diagnostics: dict[str, float | None] = field(default_factory=dict)
    diverged: str | None = None
    #: role (``old`` / ``ref`` / ``new``) → what its training reached (:func:`benchmarks.runner.training_summary`:
    #: train_accuracy, epochs, steps, n_train); empty in records made before roles were recorded, whose parents are
    #: not in this machine's cache
    roles: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def seconds(self) -> float | None:
        """Wall seconds the model's training took (None for a model not trained: φ* under a training-free view)."""
        s = self.meta.get("seconds")
        return None if s is None else float(s)

    def radius_diagnostics(self) -> dict[str, float | None]:
        """The test-gallery radius diagnostics by role (``clip_fraction_<role>``, ``uncertainty_std_<role>``)."""
        return {k: v for k, v in self.diagnostics.items() if k.startswith(("clip_fraction_", "uncertainty_std_"))}


class RecordStore:
    """The records of one benchmark profile: one JSON file per (new model, old model, φ*), written atomically."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    def path(self, key: str, old_key: str, ref_key: str) -> Path:
        return self.folder / f"{key}-{digest(old_key, ref_key)[:8]}.json"

    def get(self, key: str, old_key: str, ref_key: str) -> ModelRecord | None:
        """The record of model ``key`` against those parents, or None."""
        path = self.path(key, old_key, ref_key)
        if not path.is_file():
            return None
        return ModelRecord(**json.loads(path.read_text()))

    def put(self, record: ModelRecord) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        body = json.dumps(asdict(record), indent=1, sort_keys=True, default=float)
        atomic_write_text(self.path(record.key, record.old_key, record.ref_key), body + "\n")

    def __len__(self) -> int:
        return len(list(self.folder.glob("*.json"))) if self.folder.is_dir() else 0


class Measured(Protocol):
    """What a record is made from: a benchmark model with its embeddings (:class:`benchmarks.runner.BenchModel`)."""

    key: str
    spec: ModelSpec
    meta: dict[str, Any]
    val: GalleryEmbeddings
    test: GalleryEmbeddings


#: M(φ_query, φ_gallery) on a split ("val" | "test"): :meth:`benchmarks.runner.Bench.metrics`
Metrics = Callable[[Measured, Measured, str], dict[str, float]]


def parents_digest(old: Measured, ref: Measured) -> str:
    """A digest of the old model's and φ*'s test embeddings (what a record's metrics were measured against)."""
    return digest(*(m.test.z.tobytes() for m in (old, ref)))


def evaluate(
    metrics: Metrics,
    label: str,
    new: Measured,
    old: Measured,
    ref: Measured,
    method: str,
    options: dict[str, Any] | None,
    *,
    space: str = "embedding",
) -> ModelRecord:
    """``new`` measured by ``metrics`` against ``old`` and φ* ``ref`` in retrieval ``space`` (``embedding``, or the
    PSP / LSP view the models are given in): self / cross / old self / φ* self on the validation split and the test
    gallery (docs/design.md §6.3), the method's own diagnostics (on the test gallery, with the settings the model
    trained with: HBCT's ε) and, for Lorentz embeddings, the radius diagnostics of all three (§4.5)."""
    pairs = dict(zip(PAIRS, ((new, new), (new, old), (old, old), (ref, ref))))
    val = {name: metrics(q, g, "val") for name, (q, g) in pairs.items()}
    test = {name: metrics(q, g, "test") for name, (q, g) in pairs.items()}
    own = MethodDiagnostics()
    if space == "embedding" and new.test.incompatibility(old.test) is None:
        own = choose_alignment(method, options).diagnostics(new.meta.get("choices", {}), old.test, new.test)
    diag: dict[str, float | None] = {**own.settings, **own.measured}
    if new.spec.space.radius_encodes_confidence and space == "embedding":
        roles = {"new": new, "old": old, "ref": ref}
        radius = {f"clip_fraction_{r}": clip_fraction(m.test.clipped) for r, m in roles.items()}
        radius |= {f"uncertainty_std_{r}": uncertainty_std(m.test.z, m.test.curvature) for r, m in roles.items()}
        diag = {**radius, **diag}
        seen = list(old.spec.class_order)
        for role, m in (("old", old), ("new", new)):
            diag[f"uncertainty_{role}_seen"], diag[f"uncertainty_{role}_unseen"] = uncertainty_seen_unseen(
                m.test.z, m.test.labels, seen, m.test.curvature
            )
    return ModelRecord(new.key, label, old.key, ref.key, parents_digest(old, ref), space, new.meta, val, test, diag)
