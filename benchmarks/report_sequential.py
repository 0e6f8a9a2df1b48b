"""The sequential scenario's report: summary, compatibility matrices (markdown and heatmaps), CSV, JSON."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.report import fmt, report_header, write_report_files
from benchmarks.sequential import SequentialResult
from components.evaluation import COMPAT_METRICS

__all__ = ["write_sequential_report"]


def _heatmaps(res: SequentialResult, metric: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(res.matrices)
    cols = min(4, len(names))
    rows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows), dpi=110, squeeze=False)
    for ax, name in zip(axes.flat, names):
        m = np.array([[np.nan if v is None else v for v in row] for row in res.matrices[name][metric]], dtype=float)
        ax.imshow(m, vmin=0, vmax=1, cmap="viridis")
        for (i, j), v in np.ndenumerate(m):
            if not np.isnan(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6, color="w" if v < 0.6 else "k")
        s = res.summary[name][metric]
        ax.set_title(f"{name}\nAC {fmt(s['ac'], 2)} AA {fmt(s['aa'], 2)} ACA {fmt(s['aca'], 2)}", fontsize=8)
        ax.set_xlabel("gallery model k", fontsize=7)
        ax.set_ylabel("query model t", fontsize=7)
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_sequential_report(res: SequentialResult, ctx: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = report_header(f"sequential: classes in {len(res.stages)} stages", ctx)
    lines += _sequential_summary(res)
    lines += _sequential_matrices(res)
    png = {k: _heatmaps(res, k, out_dir / f"compat_matrix_{k.replace('@', '')}.png") for k in COMPAT_METRICS}
    lines += ["", f"Heatmaps: `{png['map'].name}`, `{png['cmc@1'].name}`."]
    return write_report_files(
        out_dir,
        lines,
        lambda path: _write_sequential_csv(res, path),
        lambda: {
            "context": ctx,
            "stages": res.stages,
            "archs": res.archs,
            "matrices": res.matrices,
            "summary": res.summary,
            "train_seconds": res.seconds,
        },
    )


def _sequential_summary(res: SequentialResult) -> list[str]:
    """Report lines: the stages, how AC / AA / ACA are defined, and each method's AC / AA / ACA and training time."""
    lines = [
        "Stages (classes known to model t, backbone): "
        + "; ".join(f"t{i}: {len(c)} classes, {a}" for i, (c, a) in enumerate(zip(res.stages, res.archs))),
        "",
        "Each model is aligned to its predecessor (t−1) with the profile's default λ "
        "(no tuning in the sequential run); "
        "C[t][k] = M(φ_t queries, φ_k gallery) on the whole test gallery. "
        "AC = share of pairs k < t with C[t][k] > C[k][k]; "
        "AA = mean of the lower triangle; ACA = Σ of the compatible cross entries / number of cross pairs "
        "(the Simplex paper §4.1, docs/design.md §6.5). `independent` is the unaligned lower bound.",
        "",
        "| method | AC (mAP) | AA (mAP) | ACA (mAP) | AC (CMC@1) | AA (CMC@1) | ACA (CMC@1) | train s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in res.summary.items():
        m, c = s["map"], s["cmc@1"]
        lines.append(
            f"| {name} | {fmt(m['ac'], 3)} | {fmt(m['aa'], 3)} | {fmt(m['aca'], 3)} | "
            f"{fmt(c['ac'], 3)} | {fmt(c['aa'], 3)} | {fmt(c['aca'], 3)} | {res.seconds[name]:.0f} |"
        )
    return lines


def _sequential_matrices(res: SequentialResult) -> list[str]:
    """Report lines: each method's lower-triangular mAP matrix C[t][k] (T, T) as a table."""
    t = len(res.stages)
    lines: list[str] = []
    for name, mats in res.matrices.items():
        lines += [
            "",
            f"### {name} (mAP)",
            "",
            "| t \\ k | " + " | ".join(str(k) for k in range(t)) + " |",
            "|---|" + "---:|" * t,
        ]
        for i, row in enumerate(mats["map"]):
            lines.append(
                f"| {i} | " + " | ".join("" if v is None or j > i else f"{v:.3f}" for j, v in enumerate(row)) + " |"
            )
    return lines


def _write_sequential_csv(res: SequentialResult, path: Path) -> None:
    """``results.csv``: one line per (method, metric, t, k) entry of the lower triangle, k <= t."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["method", "metric", "t", "k", "value"])
        for name, mats in res.matrices.items():
            for metric, mat in mats.items():
                for i, row in enumerate(mat):
                    for j, v in enumerate(row):
                        if j <= i and v is not None:
                            w.writerow([name, metric, i, j, v])
