"""The lifecycle benchmark's stream: N nights of training data, a serving corpus that grows, held-out queries.

docs/design.md §11 describes what the stream exercises; this module makes it from the profile's dataset
(Fashion-MNIST at the cpu profile's resolution) and the :class:`StreamSettings`:

* training data — night t trains on classes ``0 … min(C, classes_start + t) − 1`` (classes arriving: ext-class) with
  ``data.max_train_per_class = per_class_start + per_class_step · t`` images per class (more data: ext-data); one
  night (``arch_night``) brings a wider backbone (new-arch), trained from then on; one night (``degraded_night``)
  trains on a small ``degraded_fraction`` of its data for ``degraded_epochs`` epochs: a model not to promote.
* the serving corpus — training-split images no training selection can hold (each class's images ranked after
  ``max_train_per_class``'s largest value in the dataset's own per-class order), written once as PNG files, and a
  manifest (``gallery.source: manifest``) that lists ``corpus_start + corpus_step · t`` of them on night t: the
  night's new items are ingested into the live gallery by the live gallery's model, as production embeds new items.
* queries — test-split images outside the evaluation split (ranked after ``max_test_per_class``), labelled, the same
  every night: what production's users ask.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from components.data.prepare import per_class_subsample
from components.data.sources.writer import encode_image, write_manifest
from components.errors import ConfigError
from flows.params import Params

__all__ = ["Night", "StreamSettings", "night_plan", "queries", "write_corpus"]


class StreamSettings(BaseModel):
    """The stream of a lifecycle benchmark (a profile's ``lifecycle:`` section; defaults: the cpu profile's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nights: int = Field(8, ge=2)
    classes_start: int = Field(4, ge=2)
    per_class_start: int = Field(300, gt=0)
    per_class_step: int = Field(100, ge=0)
    per_class_max: int = Field(1000, gt=0)
    arch_night: int | None = 6
    arch: dict[str, Any] = Field(default_factory=lambda: {"backbone_kwargs": {"channels": [24, 48, 96, 192]}})
    degraded_night: int | None = 4
    degraded_fraction: float = Field(0.05, gt=0.0, le=1.0)
    degraded_epochs: int = Field(1, gt=0)
    corpus_start: int = Field(2000, gt=0)
    corpus_step: int = Field(400, ge=0)
    queries: int = Field(1000, gt=0)
    epochs: int = Field(6, gt=0)
    #: params overrides of every workspace (the season's training budget, e.g. ``train.batch_size=64``)
    params: list[str] = Field(default_factory=list)
    #: the policies run and their settings (params lifecycle.*); budget's items per night
    policies: list[str] = Field(default_factory=lambda: ["never", "rules", "every_k", "budget", "always"])
    budget_items: int = Field(2000, gt=0)
    every_k: int = Field(3, ge=1)
    #: a night needed a backfill when, without one, served mAP fell below old-old or below this share of always's
    need_ratio: float = Field(0.95, gt=0.0, le=1.0)

    @model_validator(mode="after")
    def _nights_fit(self) -> StreamSettings:
        for name in ("arch_night", "degraded_night"):
            night = getattr(self, name)
            if night is not None and not 1 <= night < self.nights:
                raise ValueError(
                    f"{name} {night} is not a night after the first of {self.nights}; pick 1..{self.nights - 1}"
                )
        return self


@dataclass(frozen=True)
class Night:
    """Night ``t``: the params overrides and the generation spec of its training, the corpus size it serves."""

    t: int
    classes: list[int]
    per_class: int
    corpus: int
    overrides: list[str]
    spec: dict[str, Any]
    kind: str  # "classes" | "data" | "arch" | "degraded" (what is new tonight, for the report)


def night_plan(s: StreamSettings, num_classes: int) -> list[Night]:
    """Every night of the stream, in order."""
    out = []
    for t in range(s.nights):
        k = min(num_classes, s.classes_start + t)
        per_class = min(s.per_class_max, s.per_class_start + s.per_class_step * t)
        spec: dict[str, Any] = {"name": f"n{t}", "classes": list(range(k)), "reference": False, "epochs": s.epochs}
        kind = "classes" if t and k > min(num_classes, s.classes_start + t - 1) else "data"
        if s.arch_night is not None and t >= s.arch_night:  # the new architecture, from its night on
            spec |= s.arch
            kind = "arch" if t == s.arch_night else kind
        if t == s.degraded_night:
            spec |= {"fraction": s.degraded_fraction, "epochs": s.degraded_epochs}
            kind = "degraded"
        overrides = [f"data.max_train_per_class={per_class}"]
        out.append(Night(t, list(range(k)), per_class, s.corpus_start + s.corpus_step * t, overrides, spec, kind))
    return out


def _ranked_after(labels: np.ndarray, first: int, count: int, seed: int) -> np.ndarray:
    """Per class, the items ranked ``first … first + count − 1`` in the dataset's own seeded per-class order (the
    order :func:`~components.data.prepare.per_class_subsample` takes the first ``first`` of): disjoint from every
    subsample of at most ``first``. Sorted positions, ``count`` per class (fewer where a class runs out)."""
    inner = set(per_class_subsample(labels, first, seed).tolist())
    outer = per_class_subsample(labels, first + count, seed)
    return np.array([p for p in outer.tolist() if p not in inner], dtype=np.int64)


def _interleaved(positions: np.ndarray, labels: np.ndarray, seed: int) -> np.ndarray:
    """``positions`` in a seeded order that keeps every prefix class-balanced (the corpus grows by prefixes)."""
    rng = np.random.default_rng(seed)
    by_class = [rng.permutation(positions[labels[positions] == c]) for c in np.unique(labels[positions])]
    rank = np.concatenate([np.arange(len(b)) for b in by_class])
    order = np.concatenate(by_class)
    return order[np.argsort(rank, kind="stable")]


def write_corpus(params: Params, s: StreamSettings, train_images: np.ndarray, train_labels: np.ndarray,
                 train_ids: np.ndarray, folder: Path) -> tuple[np.ndarray, Path]:  # fmt: skip
    """The corpus's PNG files under ``folder`` (written once; the largest night's items), in the order the nights
    take them. Returns (the items' dataset positions in that order, the folder). ``train_*``: the raw training split
    (N, H, W[, C]) uint8, its labels and ids."""
    classes = int(train_labels.max()) + 1
    total = s.corpus_start + s.corpus_step * (s.nights - 1)
    per_class = -(-total // classes)
    seed = params.data.split_seed
    pos = _interleaved(_ranked_after(train_labels, s.per_class_max, per_class, seed), train_labels, seed)[:total]
    if len(pos) < total:
        raise ConfigError(
            f"the training split holds {len(pos)} images beyond {s.per_class_max} per class, the corpus needs {total}; "
            "lower lifecycle corpus_start / corpus_step or per_class_max"
        )
    images = folder / "images"
    images.mkdir(parents=True, exist_ok=True)
    for p in pos.tolist():
        f = images / f"{int(train_ids[p])}.png"
        if not f.exists():
            f.write_bytes(encode_image(train_images[p], "png"))
    return pos, folder


def corpus_manifest(folder: Path, pos: np.ndarray, labels: np.ndarray, ids: np.ndarray, n: int) -> Path:
    """The manifest of the corpus's first ``n`` items (night t's corpus), at the one path the params name."""
    take = pos[:n]
    paths = [f"images/{int(ids[p])}.png" for p in take.tolist()]
    return write_manifest(folder / "corpus.csv", paths, ids=ids[take], labels=labels[take])


def queries(params: Params, s: StreamSettings, test_labels: np.ndarray) -> np.ndarray:
    """Positions in the raw test split of the held-out queries: ``queries`` items, class-balanced, outside every
    evaluation split of at most ``data.max_test_per_class`` per class."""
    classes = int(test_labels.max()) + 1
    cap = params.data.max_test_per_class
    if cap is None:
        raise ConfigError("the lifecycle benchmark needs data.max_test_per_class: its queries lie beyond it")
    per_class = -(-s.queries // classes)
    pos = _ranked_after(test_labels, cap, per_class, params.data.split_seed + 1)
    return _interleaved(pos, test_labels, params.data.split_seed)[: s.queries]
