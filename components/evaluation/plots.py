"""Plots logged with each generation (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["compat_heatmap", "training_curves", "uncertainty_histogram"]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def uncertainty_histogram(path: Path, groups: dict[str, np.ndarray], title: str) -> Path:
    """Overlaid histograms of uncertainty values in [0, 1] per named group (paper Fig. 2/6)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=110)
    bins = np.linspace(0.0, 1.0, 41)
    for name, values in groups.items():
        if len(values):
            ax.hist(values, bins=bins, alpha=0.5, label=f"{name} (n={len(values)}, mean={np.mean(values):.3f})")
    ax.set_xlabel("hyperbolic uncertainty  u = 1 − tanh(√K‖z‖)")
    ax.set_ylabel("gallery items")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def training_curves(path: Path, history: list[dict[str, float]], title: str) -> Path:
    """Loss terms (left) and train accuracy / clip fraction (right) per epoch."""
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.2), dpi=110)
    epochs = [h["epoch"] for h in history]
    skip = {"epoch", "lr", "train_accuracy", "clip_fraction", "in_cone_fraction", "q_mean", "bct_known_fraction"}
    for key in sorted({k for h in history for k in h} - skip):
        a1.plot(epochs, [h.get(key, np.nan) for h in history], label=key)
    a1.set_xlabel("epoch")
    a1.set_title("loss terms", fontsize=9)
    a1.legend(fontsize=7)
    for key in ("train_accuracy", "clip_fraction", "in_cone_fraction", "q_mean"):
        if any(key in h for h in history):
            a2.plot(epochs, [h.get(key, np.nan) for h in history], label=key)
    a2.set_xlabel("epoch")
    a2.set_ylim(-0.02, 1.02)
    a2.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def compat_heatmap(path: Path, matrix: list[list[float | None]], labels: list[str], title: str) -> Path:
    """Lower-triangular compatibility matrix C[t][k] (query model t, gallery model k) as an annotated heatmap."""
    plt = _plt()
    m = np.array([[np.nan if v is None else v for v in row] for row in matrix], dtype=float)
    n = len(labels)
    fig, ax = plt.subplots(figsize=(max(3.6, 1.0 + 0.6 * n), max(3.0, 1.0 + 0.55 * n)), dpi=110)
    ax.imshow(m, vmin=0.0, vmax=1.0, cmap="viridis")
    for (i, j), v in np.ndenumerate(m):
        if not np.isnan(v):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="w" if v < 0.6 else "k")
    ax.set_xticks(range(n), labels, fontsize=7)
    ax.set_yticks(range(n), labels, fontsize=7)
    ax.set_xlabel("gallery embedded by", fontsize=8)
    ax.set_ylabel("queries embedded by", fontsize=8)
    ax.set_title(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
