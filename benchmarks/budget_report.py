"""The budget study's views: ``<out>/<profile>/budget/`` — budget.json (:func:`benchmarks.budget.summarise_budget`
with the provenance of the summary), report.md (P_com against the common φ* per method × budget, what moved) and
budget.png (P_com against the new model's SGD steps, one line per method)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from benchmarks.budget import summarise_budget
from benchmarks.common_reference_report import mean_pm
from benchmarks.report import provenance_lines
from components.evaluation import ILL_CONDITIONED
from components.io import atomic_write_text
from flows.runtime import describe_run

__all__ = ["write_budget"]


def _entry(doc: dict[str, Any], budget: str, method: str) -> dict[str, Any] | None:
    return next((e for e in doc["entries"] if e["budget"] == budget and e["method"] == method), None)


def _moves(doc: dict[str, Any]) -> list[str]:
    """Lines on the ordering: each measured budget's (and by what), and which pairs swap between consecutive
    budgets."""
    order = {b: o["methods"] for b, o in doc["ordering"].items()}
    lines = [f"- {b}: " + " > ".join(ms) + f" (by {doc['ordering'][b]['by']})" for b, ms in order.items()]
    budgets = list(order)
    for a, b in itertools.pairwise(budgets):
        ra, rb = ({m: i for i, m in enumerate(order[x])} for x in (a, b))
        common = [m for m in order[a] if m in rb]
        swaps = [
            f"{m} / {n}" for i, m in enumerate(common) for n in common[i + 1 :] if (ra[m] - ra[n]) * (rb[m] - rb[n]) < 0
        ]
        lines.append(f"- {a} → {b}: " + (f"swapped: {', '.join(swaps)}" if swaps else "the same order"))
    return lines


def render(doc: dict[str, Any]) -> list[str]:
    """report.md's lines from budget.json's content."""
    measured = [p for p in doc["points"] if p["status"] == "measured"]
    methods = list(dict.fromkeys(e["method"] for e in doc["entries"]))
    lines = [
        f"# How the ranking moves with the training budget: {doc['profile']}, {doc['scenario']}",
        "",
        f"- command: `{doc['command']}`",
        *provenance_lines(doc),
        f"- the denominator: {doc['reference_rule']}",
        "- each point is an ordinary method table (its report: `"
        + doc["scenario"]
        + "-<budget>/report.md`), every method in one fixed configuration chosen on validation by the equal-budget "
        "tables; budget `n<images per class>-e<epochs>`; steps: the new model's SGD steps",
        "",
        "## P_com against the common φ* (mean ± sample std over the point's seeds; P_up in brackets)",
        "",
        "| method | config | "
        + " | ".join(f"{p['budget']} ({_steps(doc, p['budget'])} steps)" for p in measured)
        + " |",
        "|---|---|" + "---:|" * len(measured),
    ]
    for m in methods:
        cells = []
        for p in measured:
            e = _entry(doc, p["budget"], m)
            ill = e is not None and not (e["p_com_common_denominator"]["mean"] or 0.0) >= ILL_CONDITIONED
            cells.append(
                "—" if e is None else f"{mean_pm(e['p_com_common'])}{' ⚠' if ill else ''} ({mean_pm(e['p_up_common'])})"
            )
        first = next(e for e in doc["entries"] if e["method"] == m)
        c = first["config"]
        opts = " ".join(f"{k}={v}" for k, v in c["options"].items())
        lines.append(f"| {m} | {c['head']} λ={c['weight']:g} {opts} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"⚠: the denominator φ* self − old self is below {ILL_CONDITIONED:g} (or negative): φ* is no better than the "
        "old model at this budget, and the ratio means nothing; read the absolute gain.",
        "",
        "Absolute gain (cross − old self, mAP), no denominator:",
        "",
    ]
    lines += ["| method | " + " | ".join(p["budget"] for p in measured) + " |", "|---|" + "---:|" * len(measured)]
    for m in methods:
        cells = [mean_pm(e["abs_gain"], 4) if (e := _entry(doc, p["budget"], m)) else "—" for p in measured]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## The ordering (by P_com common where all rows share one denominator, not ⚠; else by the gain), what moved",
        "",
        *_moves(doc),
    ]
    lines += ["", "## Each point's φ* and roles", ""]
    for p in doc["points"]:
        if p["status"] != "measured":
            lines.append(f"- {p['budget']} (seeds {p['seeds']}): {p['status']}")
            continue
        refs = "; ".join(
            f"seed {s}: {r['geometry']} {r['head']} (val {r['val']:.4f}, test {r['test']:.4f})"
            for s, r in p["references"].items()
        )
        roles = "; ".join(
            f"{role} ≥ {r['min_train_accuracy']:.3f} train accuracy at {', '.join(map(str, r['steps']))} steps"
            for role, r in p["roles"].items()
        )
        measured = p["seeds_measured"]
        seeds = f"seeds {measured}" + (f" of {p['seeds']} asked" if measured != p["seeds"] else "")
        lines.append(f"- {p['budget']} ({seeds}, {p['n_train']} training images): φ* {refs}; {roles}")
    return lines


def _steps(doc: dict[str, Any], budget: str) -> str:
    steps = {e["steps"] for e in doc["entries"] if e["budget"] == budget and e["steps"] is not None}
    return "/".join(str(int(s)) for s in sorted(steps)) or "?"


def plot(doc: dict[str, Any], path: Path) -> None:
    """P_com common (mean, with the seeds' spread as error bars) against the new model's steps, one line a method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for m in dict.fromkeys(e["method"] for e in doc["entries"]):
        pts = [e for e in doc["entries"] if e["method"] == m and e["steps"] and e["p_com_common"]["mean"] is not None]
        pts.sort(key=lambda e: e["steps"])
        ax.errorbar(
            [e["steps"] for e in pts],
            [e["p_com_common"]["mean"] for e in pts],
            yerr=[e["p_com_common"]["std"] or 0.0 for e in pts],
            marker="o",
            capsize=3,
            label=m,
        )
    ax.set_xscale("log")
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xlabel("new model's SGD steps (log)")
    ax.set_ylabel("test mAP P_com, common φ*")
    ax.set_title(f"{doc['profile']} {doc['scenario']}: P_com against the training budget")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_budget(out: Path, profile: str, params_path: Path, command: str) -> Path:
    """Summarise ``profile``'s budget points under ``out`` into ``out/<profile>/budget/``; returns its report.md."""
    doc = summarise_budget(out, profile, params_path, command) | {"provenance": describe_run()}
    folder = out / doc["profile"] / "budget"
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / "budget.json", json.dumps(doc, indent=1) + "\n")
    if doc["entries"]:
        plot(doc, folder / "budget.png")
    md = folder / "report.md"
    atomic_write_text(md, "\n".join(render(doc)) + "\n")
    return md
