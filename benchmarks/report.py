"""Benchmark reports: markdown + CSV + JSON (+ heatmaps for the sequential scenario)."""

from __future__ import annotations

import csv
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.scenarios import Row, Scenario, TableResult
from benchmarks.sequential import SequentialResult
from components.evaluation import COMPAT_METRICS, ILL_CONDITIONED, REPORTED_METRICS
from components.io import atomic_write_text

__all__ = ["write_sequential_report", "write_table_report"]


def _f(v: float | None, d: int = 4) -> str:
    return "—" if v is None else f"{v:.{d}f}"


def report_header(title: str, ctx: dict[str, Any]) -> list[str]:
    return [
        f"# {title}",
        "",
        f"- command: `{ctx['command']}`",
        f"- profile: `{ctx['profile']}` — {ctx['profile_description']}",
        f"- dataset: {ctx['dataset']}; train {ctx['n_train']} "
        f"(after carving a {ctx['val_fraction']:.0%} validation split of {ctx['n_val']}), "
        f"gallery = query set = test split of {ctx['n_test']} (leave-one-out)",
        f"- machine: {ctx['machine']}; total wall time {ctx['wall_seconds'] / 60:.1f} min; seeds {ctx['seeds']}",
        f"- date: {ctx['date']}",
        "",
    ]


def write_report_files(
    out_dir: Path, lines: list[str], write_csv: Callable[[Path], None], results: Callable[[], dict[str, Any]]
) -> Path:
    """Write ``report.md`` (``lines``), then ``results.csv`` (by ``write_csv``), then ``results.json`` (``results()``).

    Returns the path of ``report.md``.
    """
    md = out_dir / "report.md"
    atomic_write_text(md, "\n".join(lines) + "\n")
    write_csv(out_dir / "results.csv")
    atomic_write_text(out_dir / "results.json", json.dumps(results(), indent=1, default=str))
    return md


def write_table_report(res: TableResult, ctx: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    sc = res.scenario
    first: dict[str, Row] = {}
    for r in res.rows:
        first.setdefault(r.name, r)
    lines = report_header(f"{sc.name}: {sc.description}", ctx)
    lines += _table_intro(sc, ctx)
    lines += _old_self_table(first)
    lines += _compat_tables(first, ctx)
    lines += _seed_spread(res)
    lines += _diagnostics_table(res.rows)
    lines += _table_notes(res, first)
    return write_report_files(
        out_dir,
        lines,
        lambda path: _write_table_csv(res, path),
        lambda: {
            "context": ctx,
            "scenario": sc.__dict__ | {"old_arch": sc.old_arch.model_dump(), "new_arch": sc.new_arch.model_dump()},
            "best_baseline": res.best_baseline,
            "rows": [r.as_dict() for r in res.rows],
            "base_models": res.models,
        },
    )


def _table_intro(sc: Scenario, ctx: dict[str, Any]) -> list[str]:
    """Report lines: the backbones, epochs and λ selection of a table, how P_com / P_up are measured."""
    return [
        f"Backbones: old `{sc.old_arch.backbone} {sc.old_arch.backbone_kwargs}`, "
        f"new `{sc.new_arch.backbone} {sc.new_arch.backbone_kwargs}`; "
        f"epochs {ctx['epochs']}. λ is selected on the validation split from {ctx['tune_weights']} for methods marked "
        "*tuned* (the best validation cross mAP among runs whose validation self mAP "
        f"≥ {ctx['tune_tol']:g}× the reference's); HBCT uses the paper's fixed "
        "λ = 0.3, τ = 0.5, β = 0.01. Every number below is on the test gallery.",
        "",
        "Each method is measured in its own retrieval space: old self and φ* self (the independent reference, "
        "same architecture and data as the new model) are in that space, "
        "so P_com = (cross − old self)/(φ* self − old self) and P_up = (self − φ* self)/φ* self.",
        "",
    ]


def _old_self_table(first: dict[str, Row]) -> list[str]:
    """Report lines: the old model's self scores once per retrieval space (first row of each method)."""
    lines = [
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
    return lines


def _compat_tables(first: dict[str, Row], ctx: dict[str, Any]) -> list[str]:
    """Report lines: one table per compatibility metric of every method's first seed (ill-conditioned P_com ⚠)."""
    lines = []
    for k in COMPAT_METRICS:
        lines += [
            "",
            f"## {k.upper().replace('MAP', 'mAP')} (seed {ctx['seeds'][0]})",
            "",
            "| method | space | λ | old self | self | cross | P_up | P_com | P_com denominator | train s |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in first.values():
            flag = " ⚠" if abs(r.p_com_den[k]) < ILL_CONDITIONED else ""
            weight = _f(r.weight, 2) if r.weight is not None else "—"
            lines.append(
                f"| {r.name} | {r.geometry}/{r.space} | {weight} | {_f(r.old_self[k])} | {_f(r.self_[k])} | "
                f"{_f(r.cross[k])} | {_f(r.p_up[k])} | {_f(r.p_com[k], 3)}{flag} | {_f(r.p_com_den[k])} | "
                f"{_f(r.seconds, 0)} |"
            )
    return lines


def _mean_std(vals: list[float | None]) -> str:
    """``"mean ± population std"`` of the values that are not None, "—" when there are none."""
    v = [x for x in vals if x is not None]
    return "—" if not v else f"{statistics.mean(v):.4f} ± {statistics.pstdev(v):.4f}"


def _seed_spread(res: TableResult) -> list[str]:
    """Report lines: mean ± std over the seeds of the methods run with more than one seed (none if no such method)."""
    multi: dict[str, list[Row]] = {}
    for r in res.rows:
        multi.setdefault(r.name, []).append(r)
    multi = {n: rs for n, rs in multi.items() if len(rs) > 1}
    if not multi:
        return []
    lines = [
        "",
        "## Seed-to-seed spread",
        "",
        f"Best Euclidean baseline (chosen by validation mAP P_com): **{res.best_baseline}**.",
        "",
        "| method | seeds | self mAP | cross mAP | P_com mAP | P_up mAP | cross CMC@1 | P_com CMC@1 |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for n, rs in multi.items():
        lines.append(
            f"| {n} | {', '.join(str(r.seed) for r in rs)} | {_mean_std([r.self_['map'] for r in rs])} | "
            f"{_mean_std([r.cross['map'] for r in rs])} | {_mean_std([r.p_com['map'] for r in rs])} | "
            f"{_mean_std([r.p_up['map'] for r in rs])} | {_mean_std([r.cross['cmc@1'] for r in rs])} | "
            f"{_mean_std([r.p_com['cmc@1'] for r in rs])} |"
        )
    return [
        *lines,
        "",
        "(mean ± population std over the seeds; each seed trains its own old model, φ* and new model, with the head and λ "
        "chosen at seed 0)",
    ]


def _diagnostics_table(rows: list[Row]) -> list[str]:
    """Report lines: the HBCT diagnostics of every row that has them (none if no row has)."""
    diag = [r for r in rows if r.diagnostics]
    if not diag:
        return []
    keys = list(diag[0].diagnostics)
    lines = [
        "",
        "## HBCT diagnostics (test gallery)",
        "",
        "| method | seed | " + " | ".join(keys) + " |",
        "|---|---|" + "---:|" * len(keys),
    ]
    for r in diag:
        lines.append(f"| {r.name} | {r.seed} | " + " | ".join(_f(r.diagnostics[k], 3) for k in keys) + " |")
    return lines


def _table_notes(res: TableResult, first: dict[str, Row]) -> list[str]:
    """Report lines: method notes, ill-conditioned P_com, λ selections, and the base models' training times."""
    notes = [f"- **{r.name}**: {r.note}" for r in first.values() if r.note]
    ill = [
        f"{r.name} ({k}: denominator {r.p_com_den[k]:.4f})"
        for r in first.values()
        for k in COMPAT_METRICS
        if abs(r.p_com_den[k]) < ILL_CONDITIONED
    ]
    if ill:
        notes.append(f"- ⚠ ill-conditioned P_com (|denominator| < {ILL_CONDITIONED:g}): " + "; ".join(ill))
    notes += [
        f"- λ selection for **{r.name}**: {r.selection}"
        for r in first.values()
        if r.selection not in ("fixed", "training-free")
    ]
    base = "; ".join(
        f"{g} old {m['old']['seconds']:.0f}s, φ* {m['reference']['seconds']:.0f}s" for g, m in res.models.items()
    )
    return ["", "## Notes", "", *notes, "", "Base models: " + base]


#: HBCT health diagnostics of a Lorentz row (empty for Euclidean rows), as results.csv columns
DIAGNOSTIC_COLUMNS = (
    "clip_fraction_new",
    "clip_fraction_old",
    "uncertainty_std_new",
    "uncertainty_std_old",
    "in_cone_fraction",
    "uncertainty_new_seen",
    "uncertainty_new_unseen",
    "uncertainty_old_seen",
    "uncertainty_old_unseen",
)
_CSV_COLUMNS = [
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
    *DIAGNOSTIC_COLUMNS,
]


def _write_table_csv(res: TableResult, path: Path) -> None:
    """``results.csv``: one line per (row, reported metric) with every score of the row."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(_CSV_COLUMNS)
        for r in res.rows:
            for k in REPORTED_METRICS:
                w.writerow(
                    [
                        res.scenario.name,
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
                        *(r.diagnostics.get(d) for d in DIAGNOSTIC_COLUMNS),
                    ]
                )


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
            f"| {name} | {_f(m['ac'], 3)} | {_f(m['aa'], 3)} | {_f(m['aca'], 3)} | "
            f"{_f(c['ac'], 3)} | {_f(c['aa'], 3)} | {_f(c['aca'], 3)} | {res.seconds[name]:.0f} |"
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
