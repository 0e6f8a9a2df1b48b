"""The views of :mod:`benchmarks.common_reference` (one φ* per scenario × seed × geometry): results.json's
``common_reference`` block, the section report.md leads with (the methods against the common φ*, the four-floor
table), ``frontier.md`` and ``frontier.png``; :func:`write_common_reference` re-makes a profile's method tables with
them (``bctflow bench common-reference``). Each records the code commit, machine and library versions it was made
with (:func:`flows.runtime.describe_run`, plus numpy / scipy / matplotlib)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common_reference import FLOORS, KEY, analyse_profile
from benchmarks.report import fmt, report_header
from benchmarks.rerender import rerender_table
from benchmarks.rows import option_text
from components.evaluation import ILL_CONDITIONED
from components.io import atomic_write_text
from flows.runtime import describe_run, provenance_line

__all__ = ["floor_lines", "frontier_lines", "lead_lines", "plot_frontier", "render", "write_common_reference"]


def mean_pm(s: dict[str, Any], d: int = 3) -> str:
    """A :func:`~benchmarks.common_reference.seed_stats` dict as "mean ± std" (the mean alone for one seed, "—" when
    undefined)."""
    if s["mean"] is None:
        return "—"
    return f"{s['mean']:.{d}f}" + ("" if s["std"] is None else f" ± {s['std']:.{d}f}")


def _config(d: dict[str, Any]) -> str:
    return " ".join(x for x in (d["head"], option_text(d["options"]), f"λ={d['weight']:g}") if x)


def lead_lines(cr: dict[str, Any]) -> list[str]:
    """The section report.md leads with: the methods against the common φ*, its references, the four floors."""
    refs = cr["references"]
    seeds = sorted(refs, key=int)
    phi = "; ".join(
        f"seed {s}: "
        + ", ".join(
            f"{g} {refs[s][g]['head']} (val {refs[s][g]['val_map']:.4f}, test {refs[s][g]['test_map']:.4f})"
            for g in refs[s]
            if g != "overall"
        )
        + f"; overall {refs[s]['overall']['geometry']}/{refs[s]['overall']['head']}"
        for s in seeds
    )
    by = cr.get("compared_by", "p_com_common")  # an analysis made before it was recorded compared P_com
    what = {"p_com_common": "P_com common", "abs_gain": "abs gain"}[by]
    lines = [
        "## Against one φ* per scenario × seed × geometry",
        "",
        f"- re-analysis of the committed rows and records, no training: "
        f"`{cr['command']}`; provenance: {provenance_line(cr['provenance'])}; numpy {cr['provenance']['numpy']}, "
        f"scipy {cr['provenance']['scipy']}, matplotlib {cr['provenance']['matplotlib']}",
        f"- the denominator: {cr['definition']}. φ* per seed — {phi}.",
        "- φ* available per seed: "
        + "; ".join(f"seed {s}: {', '.join(v)}" for s, v in cr["references_available"].items())
        + " (a φ* is shared by the scenarios: the same cache key in both; `seen_in` in results.json names where "
        "its record is)",
        "- the selection is the committed one (per-head validation scores); *per-head*: the table's own P_com "
        "below, against each head's φ*. psp / lsp (‡) are measured in their own retrieval space (their old self, "
        "self and cross are that space's), so against an embedding-space φ* their ratios mix spaces: shown, "
        "not ranked.",
        "",
        "| method | chosen | seeds | abs gain mAP (cross − old self) | P_com common | its denominator | P_up common "
        f"| P_com per-head | P_up per-head | P_com overall φ* | P_up overall φ* | vs best other ({what}) "
        "| paired t p |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for n, m in cr["methods"].items():
        t = m.get("paired_test")
        vs = "—" if t is None else f"{t['other']}: {t['mean_diff']:+.3f}"
        p = "—" if t is None or t["p"] is None else f"{t['p']:.3f}"
        ill = (
            " ⚠"
            if m["p_com_common_denominator"]["mean"] is not None
            and abs(m["p_com_common_denominator"]["mean"]) < ILL_CONDITIONED
            else ""
        )
        lines.append(
            f"| {n}{'' if m['ranked'] else ' ‡'} | {m['configuration'] or 'training-free'} | "
            f"{', '.join(map(str, m['seeds']))} | {mean_pm(m['abs_gain'], 4)} | "
            f"**{mean_pm(m['p_com_common'])}**{ill} | {mean_pm(m['p_com_common_denominator'], 4)} | "
            f"{mean_pm(m['p_up_common'])} | {mean_pm(m['p_com_per_head'])} | {mean_pm(m['p_up_per_head'])} | "
            f"{mean_pm(m['p_com_common_overall'])} | {mean_pm(m['p_up_common_overall'])} | "
            f"{vs} | {p} |"
        )
    lines += [
        "",
        "Mean ± sample std (ddof 1) over the seeds, test gallery; ⚠: mean denominator below "
        f"{ILL_CONDITIONED:g}; *paired t p*: two-sided paired t-test of the {what} against the ranked method with "
        f"the best mean over the same seeds"
        + (
            "."
            if by == "p_com_common"
            else ": the ranked methods' denominators differ (old models of different heads or geometries) or one is "
            f"below {ILL_CONDITIONED:g}, and ratios over different denominators do not order methods; the gain, "
            "their numerator, does."
        ),
        "",
        *floor_lines(cr),
        "",
        "Every configuration's validation and test P_com against P_up (common φ*, seed 0): "
        "[frontier.md](frontier.md), [frontier.png](frontier.png).",
        "",
        *role_lines(cr.get("roles")),
    ]
    return lines


def role_lines(r: dict[str, Any] | None) -> list[str]:
    """The roles' training against the criterion: seed 0's old models and φ* per head (and the further seeds' where
    the table's own rows do not list them), the new models' range."""
    if not r:
        return []
    c = r["criterion"]
    rule = "none stated" if c is None else f"last-epoch train accuracy ≥ {c:g}"
    lines = [f"### Every role's training (criterion: {rule})", "", "| head | role | train acc | epochs | steps |"]
    lines.append("|---|---|---:|---:|---:|")
    for b in [*({**b, "seed": 0} for b in r["base_seed0"]), *r.get("further_seeds", [])]:
        low = " **below**" if c is not None and not b["train_accuracy"] >= c else ""
        lines.append(f"| {b['head']} | {b['role']} (seed {b['seed']}) | {b['train_accuracy']:.3f}{low} | "
                     f"{b['epochs']:.0f} | {b['steps']:.0f} |")  # fmt: skip
    n = r["new"]
    if n["models"]:
        below = "" if c is None else f"; {n['below']} below {c:g}"
        lines.append(
            f"| every new model ({n['models']}{below}) | new | {n['min_train_accuracy']:.3f} – "
            f"{n['max_train_accuracy']:.3f} | — | {', '.join(map(str, n['steps']))} |"
        )
    verdict = ", ".join(r["below"]) if r["below"] else "none"
    rest = (
        "every row's old model and φ* at every seed: the table's own role section below"
        if r.get("every_seed_in_table")
        else "the further seeds' old models and φ* as their records hold them"
        if r.get("further_seeds")
        else "the further seeds' old models and φ* were not recorded by this table's run (records carry every "
        "role's training since the train criterion was introduced)"
    )
    return [*lines, "", f"Old models and φ* below the criterion: {verdict}; {rest}.", ""]


def floor_lines(cr: dict[str, Any]) -> list[str]:
    """The four-floor table: per method, the configuration the rule picks on common-denominator validation scores
    at each floor, with its seed-0 validation / test P_com common."""
    floors = cr["floors"]
    head = " | ".join(f"P_up ≥ {k}" if k != "none" else "no floor" for k in floors)
    lines = [
        f"### The rule re-applied on common-denominator validation scores, at four P_up floors (seed {0})",
        "",
        "Each cell: the configuration picked, its validation / test mAP P_com common at seed 0 (⁽ᶜ⁾: constraint not "
        "met, the largest validation P_up; * : the configuration the committed table chose; † : not run at seeds "
        "1–2, so seed 0 is all there is for it).",
        "",
        f"| method | {head} |",
        "|---|" + "---|" * len(floors),
    ]
    methods = list(next(iter(floors.values())))
    for n in methods:
        cells = []
        for picks in floors.values():
            c = picks[n]
            mark = ("⁽ᶜ⁾" if c["rule"].startswith("constraint") else "") + ("*" if c["committed_choice"] else "")
            mark += "" if c["further_seeds"] else " †"
            cells.append(f"{_config(c)}{mark}: {fmt(c['val_p_com_common'], 3)} / {fmt(c['test_p_com_common'], 3)}")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines.append("")
    for k, picks in floors.items():
        order = sorted(picks, key=lambda n: -(picks[n]["test_p_com_common"] or -math.inf))
        label = f"P_up ≥ {k}" if k != "none" else "no floor"
        lines.append(
            f"- {label}, by seed-0 test P_com common: "
            + " > ".join(f"{n} {picks[n]['test_p_com_common']:.3f}" for n in order)
        )
    return lines


def frontier_lines(scenario: str, cr: dict[str, Any]) -> list[str]:
    """frontier.md: every configuration tried at seed 0, its validation / test P_com and P_up against the common φ*
    beside the per-head validation scores the committed rule chose on."""
    ref = cr["references"]["0"]
    lines = [
        f"# {scenario}: every configuration at seed 0 against the common φ*",
        "",
        f"- `{cr['command']}`; provenance: {provenance_line(cr['provenance'])}",
        "- φ* (seed 0): "
        + ", ".join(
            f"{g} {r['head']} (val {r['val_map']:.4f}, test {r['test_map']:.4f})"
            for g, r in ref.items()
            if g != "overall"
        )
        + f". Seeds 1–2 hold only the chosen configuration of each method ({cr['further_seed_records']} records "
        "at seeds 1–2 in this table, one per further-seed row), so the frontier is seed 0's.",
        "- *chosen*: the committed choice (per-head validation scores, floor −0.01). "
        "Plot: [frontier.png](frontier.png).",
        "",
        "| method | configuration | val P_com per-head | val P_up per-head | val P_com common | val P_up common "
        "| test P_com common | test P_up common | chosen |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for f in cr["frontier"]:
        lines.append(
            f"| {f['method']} | {_config(f)} | {fmt(f['val_p_com'], 3)} | {fmt(f['val_p_up'], 3)} | "
            f"{fmt(f['val_p_com_common'], 3)} | {fmt(f['val_p_up_common'], 3)} | {fmt(f['test_p_com_common'], 3)} | "
            f"{fmt(f['test_p_up_common'], 3)} | {'**yes**' if f['chosen'] else ''} |"
        )
    return lines


def plot_frontier(scenario: str, cr: dict[str, Any], path: Path) -> None:
    """frontier.png: one panel per trained method (each on its own scale), P_com common (y) against P_up common (x)
    at seed 0, each configuration on validation (open) and test (filled) joined by a line, the committed choice
    starred, the floors dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by: dict[str, list[dict[str, Any]]] = {}
    for f in cr["frontier"]:
        by.setdefault(f["method"], []).append(f)
    n = len(by)
    cols = 4
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.7 * rows), dpi=90)
    flat = np.atleast_1d(axes).ravel()
    shown: list[str] = []
    for ax, (name, cfgs) in zip(flat, by.items()):
        val = np.array([[c["val_p_up_common"], c["val_p_com_common"]] for c in cfgs], float)
        test = np.array([[c["test_p_up_common"], c["test_p_com_common"]] for c in cfgs], float)
        heads = sorted({c["head"] for c in cfgs})
        colour = np.array([heads.index(c["head"]) for c in cfgs])
        for i in range(len(cfgs)):
            ax.plot([val[i, 0], test[i, 0]], [val[i, 1], test[i, 1]], color=f"C{colour[i]}", lw=0.6, alpha=0.5)
        for h in range(len(heads)):
            m = colour == h
            ax.scatter(val[m, 0], val[m, 1], facecolors="none", edgecolors=f"C{h}", s=18, label=f"{heads[h]} val")
            ax.scatter(test[m, 0], test[m, 1], color=f"C{h}", s=14, label=f"{heads[h]} test")
        ch = np.array([c["chosen"] for c in cfgs])
        ax.scatter(test[ch, 0], test[ch, 1], marker="*", s=120, color="k", zorder=5, label="chosen (test)")
        for fl in FLOORS:
            if fl is not None:
                ax.axvline(fl, color="grey", ls=":", lw=0.7)
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
        if heads != shown:  # a legend where the heads change (the first panel of each geometry)
            ax.legend(fontsize=6, loc="lower left")
            shown = heads
    for ax in flat[n:]:
        ax.set_visible(False)
    for ax in flat[:n]:
        ax.set_xlabel("mAP P_up (common φ*)", fontsize=7)
        ax.set_ylabel("mAP P_com (common φ*)", fontsize=7)
    fig.suptitle(
        f"{scenario}, seed 0: every configuration against one φ* per geometry "
        "(open: validation, filled: test; dotted: P_up floors −0.01, −0.02, −0.05)",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def _provenance() -> dict[str, Any]:
    import matplotlib
    import scipy

    return describe_run() | {"numpy": np.__version__, "scipy": scipy.__version__, "matplotlib": matplotlib.__version__}


def render(out_dir: Path, cr: dict[str, Any]) -> tuple[list[str], list[str]]:
    """report.md's lines (the table report with :func:`lead_lines` after its header) and frontier.md's, from
    ``out_dir``'s results.json as the table report writes it and the ``common_reference`` block ``cr``."""
    doc = json.loads((out_dir / "results.json").read_text())
    ctx, sc = doc["context"], doc["scenario"]
    base = (out_dir / "report.md").read_text().rstrip("\n").split("\n")
    n = len(report_header(f"{sc['name']}: {sc['description']}", ctx))
    return base[:n] + lead_lines(cr) + base[n:], frontier_lines(sc["name"], cr)


def write_common_reference(
    out: Path, profile: str, params_path: Path, command: str, references_from: Sequence[str] = ()
) -> list[Path]:
    """Re-make every method table of ``out/<profile>/`` from its results.json (:func:`rerender_table`), then add
    the common-denominator analysis: results.json's ``common_reference``, report.md's lead section, frontier.md and
    frontier.png (``references_from``: :func:`~benchmarks.common_reference.analyse_profile`'s). Returns the
    report.md paths."""
    analyses = analyse_profile(out, profile, params_path, references_from)
    prov = _provenance()
    written = []
    for scenario, cr in analyses.items():
        d = out / profile / scenario
        md = rerender_table(d)  # the committed table's own views, re-made from its numbers (drops an older block)
        cr = {"command": command, "provenance": prov, **cr}
        report, frontier = render(d, cr)
        doc = json.loads((d / "results.json").read_text())
        doc[KEY] = cr
        atomic_write_text(d / "results.json", json.dumps(doc, indent=1, default=str))
        atomic_write_text(md, "\n".join(report) + "\n")
        atomic_write_text(d / "frontier.md", "\n".join(frontier) + "\n")
        plot_frontier(scenario, cr, d / "frontier.png")
        written.append(md)
    return written
