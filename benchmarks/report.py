"""Benchmark reports: markdown + CSV + JSON of a method table (the sequential one: report_sequential)."""

from __future__ import annotations

import csv
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.scenarios import Row, Scenario, TableResult
from components.evaluation import COMPAT_METRICS, ILL_CONDITIONED, REPORTED_METRICS
from components.io import atomic_write_text

__all__ = ["fmt", "report_header", "write_report_files", "write_table_report"]


def fmt(v: float | None, d: int = 4) -> str:
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
        f"- machine: {ctx['machine']}; total wall time {ctx['wall_seconds'] / 60:.1f} min "
        f"({ctx['wall_seconds']:.0f} s); seeds {ctx['seeds']}",
        f"- models trained: {ctx.get('execution', 'sequential (one process)')}",
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
    lines += _heads_table(res.heads)
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
            "heads_tried": res.heads,
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
        lines.append(f"| {sp} | {fmt(v['cmc@1'])} | {fmt(v['cmc@5'])} | {fmt(v['map'])} |")
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
            weight = fmt(r.weight, 2) if r.weight is not None else "—"
            lines.append(
                f"| {r.name} | {r.geometry}/{r.space} | {weight} | {fmt(r.old_self[k])} | {fmt(r.self_[k])} | "
                f"{fmt(r.cross[k])} | {fmt(r.p_up[k])} | {fmt(r.p_com[k], 3)}{flag} | {fmt(r.p_com_den[k])} | "
                f"{fmt(r.seconds, 0)} |"
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
        "| method | seeds | self mAP | cross mAP | P_com mAP | its denominator | P_up mAP | cross CMC@1 | P_com CMC@1 "
        "| its denominator |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, rs in multi.items():
        lines.append(
            f"| {n} | {', '.join(str(r.seed) for r in rs)} | {_mean_std([r.self_['map'] for r in rs])} | "
            f"{_mean_std([r.cross['map'] for r in rs])} | {_mean_std([r.p_com['map'] for r in rs])} | "
            f"{_mean_std([r.p_com_den['map'] for r in rs])} | {_mean_std([r.p_up['map'] for r in rs])} | "
            f"{_mean_std([r.cross['cmc@1'] for r in rs])} | {_mean_std([r.p_com['cmc@1'] for r in rs])} | "
            f"{_mean_std([r.p_com_den['cmc@1'] for r in rs])} |"
        )
    lines += [
        "",
        "(mean ± population std over the seeds; each seed trains its own old model, φ* and new model, with the "
        "head and λ chosen at seed 0)",
    ]
    diag = {n: rs for n, rs in multi.items() if all(r.diagnostics for r in rs)}
    if diag:
        body = [
            [
                n,
                ", ".join(str(r.seed) for r in rs),
                *(_mean_std([r.diagnostics.get(k) for r in rs]) for k in SPREAD_DIAG),
            ]
            for n, rs in diag.items()
        ]
        lines += _section(
            "HBCT diagnostics over the seeds (test gallery)", ["method", "seeds", *SPREAD_DIAG], "---|---", body
        )
    return lines


#: the HBCT diagnostics the seed-spread section gives as mean ± std (the issue's saturation and cone checks)
SPREAD_DIAG = ("clip_fraction_new", "uncertainty_std_new", "epsilon", "in_cone_fraction", "uncertainty_std_old")


def _diagnostics_table(rows: list[Row]) -> list[str]:
    """Report lines: the diagnostics of every row that has them (none if no row has), one column per name any row
    has, in the order they first appear ("—" where a row lacks one: a method without HBCT's cones)."""
    diag = [r for r in rows if r.diagnostics]
    if not diag:
        return []
    keys = list(dict.fromkeys(k for r in diag for k in r.diagnostics))
    body = [[r.name, str(r.seed), *(fmt(r.diagnostics.get(k), 3) for k in keys)] for r in diag]
    return _section("HBCT diagnostics (test gallery)", ["method", "seed", *keys], "---|---", body)


def _heads_table(heads: list[dict[str, Any]]) -> list[str]:
    """Report lines: every (method, head) tried at seed 0 with its validation mAP P_com and, for Lorentz heads, the
    test-gallery clip fraction / uncertainty std of the new model, its old model and φ* (none if one head only)."""
    if len({(h["method"], h["head"]) for h in heads}) == len({h["method"] for h in heads}):
        return []
    cols = ("clip_fraction_new", "clip_fraction_old", "clip_fraction_ref", "uncertainty_std_new", "uncertainty_std_ref")
    body = [
        [h["method"], h["head"], fmt(h["weight"], 2), fmt(h["val_p_com"], 3), "yes" if h["kept"] else "no"]
        + [fmt(h.get(c), 3) for c in cols]
        for h in heads
    ]
    title = "Heads tried (seed 0; chosen on validation mAP P_com, diagnostics on the test gallery)"
    return _section(title, ["method", "head", "λ", "val mAP P_com", "keeps self", *cols], "---|---|---:|---:|---", body)


def _section(title: str, header: list[str], text_align: str, body: list[list[str]]) -> list[str]:
    """Report lines of a ``## title`` section holding one markdown table: ``text_align`` is the separator of the
    leading columns (e.g. ``"---|---"``), every further column is right-aligned."""
    n_right = len(header) - text_align.count("|") - 1
    return [
        "",
        f"## {title}",
        "",
        "| " + " | ".join(header) + " |",
        f"|{text_align}|" + "---:|" * n_right,
        *("| " + " | ".join(cells) + " |" for cells in body),
    ]


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


#: diagnostics as results.csv columns: a Lorentz row's radius ones, HBCT's cones (its AlignmentLoss.diagnostics; empty
#: for other methods) — empty where a row has none (every Euclidean row)
DIAGNOSTIC_COLUMNS = (
    "clip_fraction_new",
    "clip_fraction_old",
    "uncertainty_std_new",
    "uncertainty_std_old",
    "epsilon",
    "in_cone_fraction",
    "entail_angle_deg",
    "aperture_deg",
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
