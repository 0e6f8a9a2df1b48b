"""Benchmark reports: markdown + CSV + JSON of a method table (the sequential one: report_sequential), and the
JSON + markdown of the single-run benchmarks (perf, scale, serve, transform: :func:`write_run_report`).

Every report records where its numbers come from — :func:`flows.runtime.provenance.describe_run`, under ``provenance``:
in
the ``context`` of a table's results.json (its header's facts; ``run.py`` puts it there), at the top level of the
single-run benchmarks' JSON — and shows it in one line of report.md."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.profile import CRITERION_ROLES
from benchmarks.report_stats import by_method, diagnostics_against_references, seed_statistics
from benchmarks.rows import option_text
from benchmarks.scenarios import Row, Scenario, TableResult
from benchmarks.selection import RULE_TEXT
from components.evaluation import COMPAT_METRICS, ILL_CONDITIONED, REPORTED_METRICS
from components.io import atomic_write_text
from flows.runtime import describe_run, provenance_line

__all__ = ["fmt", "provenance_lines", "report_header", "write_report_files", "write_run_report", "write_table_report"]


def fmt(v: float | None, d: int = 4) -> str:
    return "—" if v is None else f"{v:.{d}f}"


def provenance_lines(doc: dict[str, Any], prefix: str = "- ") -> list[str]:
    """The report line of ``doc``'s ``provenance`` (none for a report written before it was recorded)."""
    p = doc.get("provenance")
    return [f"{prefix}provenance: {provenance_line(p)}"] if p else []


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
        *provenance_lines(ctx),
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


def write_run_report(out: Path, name: str, res: dict[str, Any], render: Callable[[dict[str, Any]], str]) -> Path:
    """Record :func:`~flows.runtime.provenance.describe_run` in ``res`` (``provenance``), then write ``out/name``
    (JSON) and
    ``out/report.md`` (``render(res)``); returns report.md. The writer of each single-run benchmark's report."""
    res["provenance"] = describe_run()
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / name, json.dumps(res, indent=1, default=float) + "\n")
    md = out / "report.md"
    atomic_write_text(md, render(res))
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
    header, body, tests, by = seed_statistics(res.rows)
    lines += _section("Every method over the seeds", header, "---|---|---|---", body)
    lines += _spread_notes(res)
    lines += _references(res)
    lines += _diagnostics_table(res.rows)
    lines += _heads_table(res.heads)
    lines += roles_table(res.rows, ctx.get("train_criterion"), ctx.get("criterion_roles", CRITERION_ROLES))
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
            "configurations": {n: rs[0].configurations for n, rs in by_method(res.rows).items()},
            "paired_tests": tests,
            "paired_tests_by": by,
        },
    )


def _table_intro(sc: Scenario, ctx: dict[str, Any]) -> list[str]:
    """Report lines: the backbones, epochs and selection rule of a table, how P_com / P_up are measured."""
    floor = ctx.get("p_up_floor")
    rule = (
        RULE_TEXT.format(floor=floor) + f", on the validation split from λ ∈ {ctx['tune_weights']} for *tuned* methods"
        if floor is not None
        else f"λ from {ctx['tune_weights']} and the head chosen on the validation split by the earlier rule (the best "
        f"validation cross mAP among runs whose validation self mAP ≥ {ctx.get('tune_tol', 0):g}× the reference's, "
        "else the best validation self mAP)"
    )
    return [
        f"Backbones: old `{sc.old_arch.backbone} {sc.old_arch.backbone_kwargs}`, "
        f"new `{sc.new_arch.backbone} {sc.new_arch.backbone_kwargs}`; "
        f"epochs {ctx['epochs']}. Selection: {rule}. Every number below is on the test gallery.",
        "",
        "Each method is measured in its own retrieval space: old self and φ* self (the independent reference, "
        "same architecture and data as the new model) are in that space, "
        "so P_com = (cross − old self)/(φ* self − old self) and P_up = (self − φ* self)/φ* self.",
        "",
    ]


def _head(r: Row) -> str:
    """A row's head and options-grid values, "—" when it has neither."""
    return " ".join(x for x in (r.head, option_text(r.options)) if x) or "—"


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
            "| method | space | head | λ | old self | self | cross | gain | P_up | P_com | P_com denominator "
            "| train s |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in first.values():
            flag = " ⚠" if abs(r.p_com_den[k]) < ILL_CONDITIONED else ""
            weight = fmt(r.weight, 2) if r.weight is not None else "—"
            lines.append(
                f"| {r.name} | {r.geometry}/{r.space} | {_head(r)} | {weight} | {fmt(r.old_self[k])} | "
                f"{fmt(r.self_[k])} | {fmt(r.cross[k])} | {fmt(r.cross[k] - r.old_self[k])} | {fmt(r.p_up[k])} | "
                f"{fmt(r.p_com[k], 3)}{flag} | {fmt(r.p_com_den[k])} | {fmt(r.seconds, 0)} |"
            )
    return lines


def _spread_notes(res: TableResult) -> list[str]:
    """Report lines under the seed statistics: what the columns are."""
    best = f" Best Euclidean baseline by validation mAP P_com: **{res.best_baseline}**." if res.best_baseline else ""
    return [
        "",
        "Mean ± sample std (ddof 1) over the seeds; each seed trains its own old model, φ* and new model, in the "
        "configuration chosen at seed 0. *configs*: the configurations the method was tried with at seed 0; "
        "*gain*: cross − old self, what a new query gains on the old gallery; *paired t p*: two-sided paired t-test "
        "of the method's test mAP P_com against the other method with the best mean over the same seeds." + best,
    ]


def _references(res: TableResult) -> list[str]:
    """Report lines: the Lorentz rows' diagnostics beside this table's unaligned and saturated references."""
    header, body, where = diagnostics_against_references(res.rows, res.heads)
    if not body:
        return []
    title = "Lorentz diagnostics against this dataset's references (test gallery)"
    lines = _section(title, header, "---|---|---", body)
    return [*lines, "", f"÷ φ*: the new model's uncertainty std over its own unaligned φ*'s; {where}."]


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
    """Report lines: every configuration tried at seed 0 with its validation mAP P_com and P_up, whether it was
    chosen, and for Lorentz heads the test-gallery clip fraction / uncertainty std of the new model, its old model and
    φ* (none if every method had one configuration)."""
    if len(heads) == len({h["method"] for h in heads}):
        return []
    cols = ("clip_fraction_new", "clip_fraction_old", "clip_fraction_ref", "uncertainty_std_new", "uncertainty_std_ref")
    body = [
        [
            h["method"],
            h["head"],
            option_text(h.get("options", {})) or "—",
            fmt(h["weight"], 2),
            fmt(h.get("val_p_com"), 3),
            fmt(h.get("val_p_up"), 3),
            "**yes**" if h.get("chosen") else ("diverged" if h.get("diverged") else ""),
        ]
        + [fmt(h.get(c), 3) for c in cols]
        for h in heads
    ]
    title = "Configurations tried (seed 0; chosen on validation, diagnostics on the test gallery)"
    header = ["method", "head", "options", "λ", "val mAP P_com", "val mAP P_up", "chosen", *cols]
    return _section(title, header, "---|---|---|---:|---:|---:|---", body)


def roles_table(rows: list[Row], criterion: float | None, held: Sequence[str] = CRITERION_ROLES) -> list[str]:
    """Report lines: every row's old model, φ* and new model — last-epoch train accuracy and SGD steps — against the
    profile's ``train_criterion``. The roles in ``held`` (the profile's ``criterion_roles``: ``old``, ``reference``)
    are trained to it and one below it is marked; a new model is not held to it (it has φ*'s budget), nor is φ* where
    the profile holds only the old model (a budget study, where φ*'s budget is what varies). A row whose record
    predates role records says so."""
    if not any(r.roles for r in rows):  # tables whose records all predate role records
        return []
    roles = ("old", "ref", "new")
    checked = {"old": "old" in held, "ref": "reference" in held, "new": False}
    below: list[str] = []

    def cell(r: Row, role: str) -> list[str]:
        t = r.roles.get(role)
        if t is None:
            return ["not recorded", "—"]
        low = criterion is not None and checked[role] and not t["train_accuracy"] >= criterion
        if low:
            below.append(f"{r.name} seed {r.seed} {role}")
        return [fmt(t["train_accuracy"], 3) + (" **below**" if low else ""), f"{t['steps']:.0f}"]

    body = [[r.name, str(r.seed), r.head or "—", *(c for role in roles for c in cell(r, role))] for r in rows]
    header = ["method", "seed", "head"] + [f"{n} {w}" for n in ("old", "φ*", "new") for w in ("train acc", "steps")]
    names = {"old": "old models", "reference": "φ*"}
    rule = (
        "none"
        if criterion is None
        else f"last-epoch train accuracy ≥ {criterion:g}, held by the "
        + " and ".join(names[h] for h in ("old", "reference") if h in held)
    )
    lines = _section(f"Every role's training (criterion: {rule})", header, "---|---|---", body)
    verdict = "none" if not below else f"{len(below)}: {', '.join(below)}"
    if criterion is not None:
        lines += ["", f"Roles below the criterion: {verdict}."]
    return lines


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
        f"- selection for **{r.name}**: {r.selection}"
        for r in first.values()
        if r.selection not in ("fixed", "training-free", "not applicable")
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
    "head",
    "options",
    "weight",
    "configurations",
    "selection_rule",
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
                        r.head,
                        json.dumps(r.options, sort_keys=True),
                        r.weight,
                        r.configurations,
                        r.selection_rule,
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
