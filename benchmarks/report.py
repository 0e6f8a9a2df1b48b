"""Benchmark reports: markdown + CSV + JSON (+ heatmaps for the sequential scenario)."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.scenarios import SequentialResult, TableResult
from components.evaluation import COMPAT_METRICS, REPORTED_METRICS
from components.io import atomic_write_text

__all__ = ["write_sequential_report", "write_table_report"]

ILL = 0.05  # |P_com denominator| below this is flagged


def _f(v: float | None, d: int = 4) -> str:
    return "—" if v is None else f"{v:.{d}f}"


def report_header(title: str, ctx: dict[str, Any]) -> list[str]:
    return [
        f"# {title}",
        "",
        f"- command: `{ctx['command']}`",
        f"- profile: `{ctx['profile']}` — {ctx['profile_description']}",
        f"- dataset: {ctx['dataset']}; train {ctx['n_train']} (after carving a {ctx['val_fraction']:.0%} validation split of {ctx['n_val']}), "
        f"gallery = query set = test split of {ctx['n_test']} (leave-one-out)",
        f"- machine: {ctx['machine']}; total wall time {ctx['wall_seconds'] / 60:.1f} min; seeds {ctx['seeds']}",
        f"- date: {ctx['date']}",
        "",
    ]


def write_table_report(res: TableResult, ctx: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    sc = res.scenario
    first = {}
    for r in res.rows:
        first.setdefault(r.name, r)
    lines = report_header(f"{sc.name}: {sc.description}", ctx)
    lines += [
        f"Backbones: old `{sc.old_arch.backbone} {sc.old_arch.backbone_kwargs}`, new `{sc.new_arch.backbone} {sc.new_arch.backbone_kwargs}`; "
        f"epochs {ctx['epochs']}. λ is selected on the validation split from {ctx['tune_weights']} for methods marked *tuned* "
        f"(the best validation cross mAP among runs whose validation self mAP ≥ {ctx['tune_tol']:g}× the reference's); HBCT uses the paper's fixed "
        "λ = 0.3, τ = 0.5, β = 0.01. Every number below is on the test gallery.",
        "",
        "Each method is measured in its own retrieval space: old self and φ* self (the independent reference, same architecture and data as "
        "the new model) are in that space, so P_com = (cross − old self)/(φ* self − old self) and P_up = (self − φ* self)/φ* self.",
        "",
        "## Old model (self) per retrieval space",
        "",
        "| space | CMC@1 | CMC@5 | mAP |",
        "|---|---:|---:|---:|",
    ]
    spaces = {}
    for r in first.values():
        spaces.setdefault(f"{r.geometry}/{r.space}", r.old_self)
    for sp, v in spaces.items():
        lines.append(f"| {sp} | {_f(v['cmc@1'])} | {_f(v['cmc@5'])} | {_f(v['map'])} |")
    for k in COMPAT_METRICS:
        lines += [
            "",
            f"## {k.upper().replace('MAP', 'mAP')} (seed {ctx['seeds'][0]})",
            "",
            "| method | space | λ | old self | self | cross | P_up | P_com | P_com denominator | train s |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in first.values():
            flag = " ⚠" if abs(r.p_com_den[k]) < ILL else ""
            lines.append(
                f"| {r.name} | {r.geometry}/{r.space} | {_f(r.weight, 2) if r.weight is not None else '—'} | {_f(r.old_self[k])} | {_f(r.self_[k])} | {_f(r.cross[k])} | "
                f"{_f(r.p_up[k])} | {_f(r.p_com[k], 3)}{flag} | {_f(r.p_com_den[k])} | {_f(r.seconds, 0)} |"
            )
    multi = {}
    for r in res.rows:
        multi.setdefault(r.name, []).append(r)
    multi = {n: rs for n, rs in multi.items() if len(rs) > 1}
    if multi:
        lines += [
            "",
            "## Seed-to-seed spread",
            "",
            f"Best Euclidean baseline (chosen by validation cross mAP): **{res.best_baseline}**.",
            "",
            "| method | seeds | self mAP | cross mAP | P_com mAP | P_up mAP | cross CMC@1 | P_com CMC@1 |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for n, rs in multi.items():

            def ms(vals: list[float | None]) -> str:
                v = [x for x in vals if x is not None]
                return "—" if not v else f"{statistics.mean(v):.4f} ± {statistics.pstdev(v):.4f}"

            lines.append(
                f"| {n} | {', '.join(str(r.seed) for r in rs)} | {ms([r.self_['map'] for r in rs])} | {ms([r.cross['map'] for r in rs])} | "
                f"{ms([r.p_com['map'] for r in rs])} | {ms([r.p_up['map'] for r in rs])} | {ms([r.cross['cmc@1'] for r in rs])} | {ms([r.p_com['cmc@1'] for r in rs])} |"
            )
        lines += [
            "",
            "(mean ± population std over the seeds; the old model and φ* are the seed-0 models in every case)",
        ]
    diag = [r for r in res.rows if r.diagnostics]
    if diag:
        keys = list(diag[0].diagnostics)
        lines += [
            "",
            "## HBCT diagnostics (test gallery)",
            "",
            "| method | seed | " + " | ".join(keys) + " |",
            "|---|---|" + "---:|" * len(keys),
        ]
        for r in diag:
            lines.append(f"| {r.name} | {r.seed} | " + " | ".join(_f(r.diagnostics[k], 3) for k in keys) + " |")
    notes = [f"- **{r.name}**: {r.note}" for r in first.values() if r.note]
    ill = [
        f"{r.name} ({k}: denominator {r.p_com_den[k]:.4f})"
        for r in first.values()
        for k in COMPAT_METRICS
        if abs(r.p_com_den[k]) < ILL
    ]
    if ill:
        notes.append("- ⚠ ill-conditioned P_com (|denominator| < 0.05): " + "; ".join(ill))
    notes += [
        f"- λ selection for **{r.name}**: {r.selection}"
        for r in first.values()
        if r.selection not in ("fixed", "training-free")
    ]
    lines += ["", "## Notes", ""] + notes
    lines += [
        "",
        "Base models: "
        + "; ".join(
            f"{g} old {m['old']['seconds']:.0f}s, φ* {m['reference']['seconds']:.0f}s" for g, m in res.models.items()
        ),
    ]
    md = out_dir / "report.md"
    atomic_write_text(md, "\n".join(lines) + "\n")
    with (out_dir / "results.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "scenario",
                "method",
                "geometry",
                "space",
                "seed",
                "weight",
                "metric",
                "old_self",
                "self",
                "cross",
                "ref_self",
                "p_up",
                "p_com",
                "p_com_denominator",
                "train_seconds",
            ]
        )
        for r in res.rows:
            for k in REPORTED_METRICS:
                w.writerow(
                    [
                        sc.name,
                        r.name,
                        r.geometry,
                        r.space,
                        r.seed,
                        r.weight,
                        k,
                        r.old_self[k],
                        r.self_[k],
                        r.cross[k],
                        r.ref_self[k],
                        r.p_up.get(k),
                        r.p_com.get(k),
                        r.p_com_den.get(k),
                        r.seconds,
                    ]
                )
    atomic_write_text(
        out_dir / "results.json",
        json.dumps(
            {
                "context": ctx,
                "scenario": sc.__dict__ | {"old_arch": sc.old_arch.model_dump(), "new_arch": sc.new_arch.model_dump()},
                "best_baseline": res.best_baseline,
                "rows": [r.as_dict() for r in res.rows],
                "base_models": res.models,
            },
            indent=1,
            default=str,
        ),
    )
    return md


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
        ax.set_title(f"{name}\nAC {_f(s['ac'], 2)} AA {_f(s['aa'], 2)} ACA {_f(s['aca'], 2)}", fontsize=8)
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
    t = len(res.stages)
    lines = report_header(f"sequential: classes in {t} stages", ctx)
    lines += [
        "Stages (classes known to model t, backbone): "
        + "; ".join(f"t{i}: {len(c)} classes, {a}" for i, (c, a) in enumerate(zip(res.stages, res.archs))),
        "",
        "Each model is aligned to its predecessor (t−1) with the profile's default λ (no tuning in the sequential run); "
        "C[t][k] = M(φ_t queries, φ_k gallery) on the whole test gallery. AC = share of pairs k < t with C[t][k] > C[k][k]; "
        "AA = mean of the lower triangle; ACA = Σ of the compatible cross entries / number of cross pairs "
        "(papers/probability-simplex-compatible.md §4.1). `independent` is the unaligned lower bound.",
        "",
        "| method | AC (mAP) | AA (mAP) | ACA (mAP) | AC (CMC@1) | AA (CMC@1) | ACA (CMC@1) | train s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in res.summary.items():
        m, c = s["map"], s["cmc@1"]
        lines.append(
            f"| {name} | {_f(m['ac'], 3)} | {_f(m['aa'], 3)} | {_f(m['aca'], 3)} | {_f(c['ac'], 3)} | {_f(c['aa'], 3)} | {_f(c['aca'], 3)} | {res.seconds[name]:.0f} |"
        )
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
    png = {k: _heatmaps(res, k, out_dir / f"compat_matrix_{k.replace('@', '')}.png") for k in COMPAT_METRICS}
    lines += ["", f"Heatmaps: `{png['map'].name}`, `{png['cmc@1'].name}`."]
    md = out_dir / "report.md"
    atomic_write_text(md, "\n".join(lines) + "\n")
    with (out_dir / "results.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["method", "metric", "t", "k", "value"])
        for name, mats in res.matrices.items():
            for metric, mat in mats.items():
                for i, row in enumerate(mat):
                    for j, v in enumerate(row):
                        if j <= i and v is not None:
                            w.writerow([name, metric, i, j, v])
    atomic_write_text(
        out_dir / "results.json",
        json.dumps(
            {
                "context": ctx,
                "stages": res.stages,
                "archs": res.archs,
                "matrices": res.matrices,
                "summary": res.summary,
                "train_seconds": res.seconds,
            },
            indent=1,
            default=str,
        ),
    )
    return md
