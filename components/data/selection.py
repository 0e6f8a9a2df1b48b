"""A generation's data: a deterministic selection of the training split.

The selection (class subset in a fixed order and/or a random fraction) is
written as a manifest — sample ids, labels, class order — whose bytes are
deterministic, so its hash identifies the generation's data exactly.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from components.data.sources.split import SourceDataset
from components.errors import DataError

__all__ = ["MANIFEST_VERSION", "DataManifest", "label_positions", "resolve_class_order", "select_training_data"]

MANIFEST_VERSION = 1


def resolve_class_order(
    requested: Sequence[int] | Literal["all"],
    num_classes: int,
    parent_order: Sequence[int] | None = None,
) -> list[int]:
    """The class order (original class indices, in model-label order).

    The parent's classes keep their positions (so old classifier rows and
    label indices stay aligned); new classes follow in the requested order.
    A parent class missing from ``requested`` is dropped (the order then no
    longer extends the parent's; methods that need an extension refuse it).
    """
    req = list(range(num_classes)) if requested == "all" else [int(c) for c in requested]
    if not req:
        raise DataError("the class selection is empty; list at least one class or use 'all'")
    bad = [c for c in req if not 0 <= c < num_classes]
    if bad:
        raise DataError(f"classes {bad} do not exist (the dataset has classes 0..{num_classes - 1}); fix `classes:`")
    if len(set(req)) != len(req):
        raise DataError(f"class selection {req} lists a class twice; list each class once")
    if parent_order is None:
        return req
    req_set = set(req)
    kept = [c for c in parent_order if c in req_set]
    kept_set = set(kept)
    return kept + [c for c in req if c not in kept_set]


def label_positions(new_order: Sequence[int], old_order: Sequence[int]) -> np.ndarray:
    """(C_new,) int64: the old model's label index of each new label, −1 for classes the old model never saw."""
    pos = {int(c): i for i, c in enumerate(old_order)}
    return np.asarray([pos.get(int(c), -1) for c in new_order], dtype=np.int64)


@dataclass(frozen=True)
class DataManifest:
    """ids: (N,) int64 sorted; labels: (N,) int64 original class indices."""

    dataset: str
    fingerprint: str
    class_order: tuple[int, ...]
    class_names: tuple[str, ...]
    fraction: float
    seed: int
    ids: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def model_labels(self) -> np.ndarray:
        """(N,) int64: each label's position in ``class_order`` (what the classifier predicts)."""
        lut = np.full(max(max(self.class_order), int(self.labels.max(initial=0))) + 1, -1, dtype=np.int64)
        lut[list(self.class_order)] = np.arange(len(self.class_order))
        return lut[self.labels]

    def to_json(self) -> str:
        body = {
            "version": MANIFEST_VERSION,
            "dataset": self.dataset,
            "fingerprint": self.fingerprint,
            "class_order": list(self.class_order),
            "class_names": list(self.class_names),
            "fraction": self.fraction,
            "seed": self.seed,
            "count": len(self.ids),
            "ids": self.ids.tolist(),
            "labels": self.labels.tolist(),
        }
        return json.dumps(body, separators=(",", ":"), sort_keys=True) + "\n"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    @classmethod
    def from_json(cls, text: str) -> DataManifest:
        try:
            b = json.loads(text)
            if b.get("version") != MANIFEST_VERSION:
                raise DataError(
                    f"data manifest version {b.get('version')} is not supported (expected {MANIFEST_VERSION}); "
                    "recreate the snapshot"
                )
            m = cls(
                dataset=b["dataset"],
                fingerprint=b["fingerprint"],
                class_order=tuple(b["class_order"]),
                class_names=tuple(b["class_names"]),
                fraction=float(b["fraction"]),
                seed=int(b["seed"]),
                ids=np.asarray(b["ids"], dtype=np.int64),
                labels=np.asarray(b["labels"], dtype=np.int64),
            )
            count = int(b["count"])
        except (KeyError, ValueError, TypeError) as err:
            raise DataError(f"data manifest is malformed (missing or bad field {err}); recreate the snapshot") from None
        if len(m.ids) != count or len(m.labels) != count:
            raise DataError(
                "data manifest count does not match its ids/labels; the file is corrupted, recreate the snapshot"
            )
        return m

    def take(self, data: SourceDataset) -> SourceDataset:
        """The manifest's rows of ``data`` (checks that labels agree)."""
        try:
            pos = data.positions_of(self.ids)
        except KeyError as err:
            raise DataError(
                f"manifest refers to samples missing from dataset {self.dataset!r}: {err}; "
                "the dataset changed, snapshot again"
            ) from None
        sub = data.subset(pos)
        if not np.array_equal(sub.labels, self.labels):
            raise DataError(
                f"manifest labels disagree with dataset {self.dataset!r}; the dataset changed, snapshot again"
            )
        return sub


def select_training_data(
    train: SourceDataset,
    *,
    dataset: str,
    fingerprint: str,
    class_order: Sequence[int],
    fraction: float = 1.0,
    seed: int = 0,
) -> DataManifest:
    """Select the rows of ``train`` whose class is in ``class_order``, then a random ``fraction``.

    Deterministic in (train, class_order, fraction, seed). ids are returned sorted.
    """
    if not 0.0 < fraction <= 1.0:
        raise DataError(f"fraction must be in (0, 1] (got {fraction}); e.g. 0.3 keeps 30% of the selected samples")
    mask = np.isin(train.labels, np.asarray(list(class_order), dtype=np.int64))
    pos = np.flatnonzero(mask)
    if fraction < 1.0:
        keep = round(fraction * len(pos))
        if keep == 0:
            raise DataError(f"fraction {fraction} of {len(pos)} samples keeps nothing; raise the fraction")
        pos = np.sort(np.random.default_rng(seed).permutation(pos)[:keep])
    if len(pos) == 0:
        raise DataError(f"no training samples in classes {list(class_order)}; check `classes:`")
    order = np.argsort(train.ids[pos], kind="stable")
    pos = pos[order]
    missing = sorted(set(class_order) - set(np.unique(train.labels[pos]).tolist()))
    if missing:
        raise DataError(f"classes {missing} have no samples in this selection; drop them or raise the fraction")
    return DataManifest(
        dataset=dataset,
        fingerprint=fingerprint,
        class_order=tuple(int(c) for c in class_order),
        class_names=tuple(train.class_names[c] for c in class_order),
        fraction=float(fraction),
        seed=int(seed),
        ids=train.ids[pos].astype(np.int64),
        labels=train.labels[pos].astype(np.int64),
    )
