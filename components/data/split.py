"""Deterministic stratified train/test split for datasets without an official one."""

from __future__ import annotations

import numpy as np

__all__ = ["stratified_split"]


def stratified_split(labels: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions (train, test), each sorted, with ``test_fraction`` of every class in test.

    Vectorised: one permutation, then a per-class rank via a stable sort by label.
    """
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(labels))
    order = perm[np.argsort(labels[perm], kind="stable")]  # grouped by class, shuffled within
    sorted_labels = labels[order]
    starts = np.searchsorted(sorted_labels, sorted_labels, side="left")
    rank = np.arange(len(order)) - starts
    counts = np.bincount(labels)[sorted_labels]
    n_test = np.rint(counts * test_fraction).astype(int)
    is_test = rank < n_test
    return np.sort(order[~is_test]), np.sort(order[is_test])
