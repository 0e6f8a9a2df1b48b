"""A method table's statistics over the seeds (docs/design.md §6.6): mean ± sample std, the absolute gain over the
old gallery beside P_com, CMC@1 beside mAP, a paired t-test of each method against the best other method over the
same seeds, and the Lorentz diagnostics against the same table's unaligned and saturated models."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from benchmarks.rows import Row
from benchmarks.selection import CONSTRAINT_NOT_MET, MAX_P_COM
from components.evaluation import ILL_CONDITIONED

__all__ = [
    "by_method",
    "compared_by",
    "diagnostics_against_references",
    "mean_std",
    "paired_test",
    "seed_statistics",
]

#: the diagnostics compared with the references, as mean ± std over the seeds
REFERENCE_DIAG = ("clip_fraction_new", "uncertainty_std_new", "uncertainty_std_ref", "epsilon", "in_cone_fraction")


def mean_std(vals: list[float | None], d: int = 4) -> str:
    """``"mean ± sample std"`` (ddof 1) of the values that are not None; the mean alone for one value; "—" for none."""
    v = [x for x in vals if x is not None and not math.isnan(x)]
    if not v:
        return "—"
    return f"{statistics.mean(v):.{d}f}" + (f" ± {statistics.stdev(v):.{d}f}" if len(v) > 1 else "")


def by_method(rows: list[Row]) -> dict[str, list[Row]]:
    """The rows of each method, in table order."""
    out: dict[str, list[Row]] = {}
    for r in rows:
        out.setdefault(r.name, []).append(r)
    return out


def _p_com(r: Row, k: str = "map") -> float:
    v = r.p_com.get(k)
    return math.nan if v is None else v


#: denominators that differ by at most this are one (the same φ* and old model give the same float)
SAME_DENOMINATOR = 1e-9


def compared_by(denominators: Sequence[float | None]) -> str:
    """What orders methods and what their paired test compares, from each method's mean denominator (φ* self − old
    self): ``"p_com_common"`` where every method has the same one and it is at least ILL_CONDITIONED (the field of
    the common-denominator summaries; a per-head table reads it as its own P_com), else ``"abs_gain"`` (cross − old
    self, the ratios' numerator). Old models of two heads or geometries give two denominators, and ratios over
    different denominators do not order methods (one denominator for all, or none); a φ* no better than the old
    models makes every ratio meaningless."""
    known = [x for x in denominators if x is not None]
    one = bool(known) and len(known) == len(denominators) and max(known) - min(known) <= SAME_DENOMINATOR
    return "p_com_common" if one and min(known) >= ILL_CONDITIONED else "abs_gain"


def paired_test(name: str, groups: dict[str, list[Row]], k: str = "map") -> dict[str, Any] | None:
    """``name``'s test P_com (metric ``k``) against the other method with the best mean P_com over the same seeds
    (at least two shared seeds): ``{"other", "seeds", "mean_diff", "t", "p"}`` (two-sided, scipy's ``ttest_rel``;
    t and p are None when every paired difference is the same), or None without such a method."""
    from scipy.stats import ttest_rel

    mine = {r.seed: _p_com(r, k) for r in groups[name]}
    best: tuple[float, str, list[int]] | None = None
    for other, rs in groups.items():
        theirs = {r.seed: _p_com(r, k) for r in rs}
        seeds = sorted(s for s in set(mine) & set(theirs) if not math.isnan(mine[s]) and not math.isnan(theirs[s]))
        if other == name or len(seeds) < 2:
            continue
        mean = statistics.mean(theirs[s] for s in seeds)
        if best is None or mean > best[0]:
            best = (mean, other, seeds)
    if best is None:
        return None
    _, other, seeds = best
    theirs = {r.seed: _p_com(r, k) for r in groups[other]}
    a, b = [mine[s] for s in seeds], [theirs[s] for s in seeds]
    diffs = [x - y for x, y in zip(a, b)]
    t, p = (None, None) if len(set(diffs)) == 1 else (float(x) for x in ttest_rel(a, b))
    return {"other": other, "seeds": seeds, "mean_diff": statistics.mean(diffs), "t": t, "p": p}


def _gain(rs: list[Row], k: str) -> str:
    """Mean ± std of cross − old self: what a new query gains on the old gallery over an old query."""
    return mean_std([r.cross[k] - r.old_self[k] for r in rs])


def _rule(r: Row) -> str:
    """The rule that chose a row's configuration, short."""
    short = {MAX_P_COM: "max P_com at P_up ≥ floor", CONSTRAINT_NOT_MET: "**constraint not met**: max P_up"}
    return short.get(r.selection_rule, r.selection_rule or "—")


def seed_statistics(rows: list[Row]) -> tuple[list[str], list[list[str]], dict[str, Any], str]:
    """The seed-statistics table: its header, one line per method, the paired tests by method name and what they
    compare (:func:`compared_by` of the methods' mean mAP denominators: P_com, or the gain cross − old self)."""
    groups = by_method(rows)
    by = compared_by([statistics.mean(r.p_com_den["map"] for r in rs) for rs in groups.values()])
    compared = groups
    if by == "abs_gain":  # the test's rows carry the gain where it reads P_com
        compared = {
            n: [replace(r, p_com={"map": r.cross["map"] - r.old_self["map"]}) for r in rs] for n, rs in groups.items()
        }
    header = [
        "method",
        "configs",
        "selected by",
        "seeds",
        "self mAP",
        "cross mAP",
        "gain mAP (cross − old self)",
        "P_com mAP",
        "its denominator",
        "P_up mAP",
        "cross CMC@1",
        "gain CMC@1",
        "P_com CMC@1",
        "its denominator",
        f"vs best other ({'P_com' if by == 'p_com_common' else 'gain'} mAP)",
        "paired t p",
    ]
    tests: dict[str, Any] = {}
    body = []
    for n, rs in groups.items():
        test = paired_test(n, compared)
        tests[n] = test
        vs = "—" if test is None else f"{test['other']}: {test['mean_diff']:+.4f}"
        p = "—" if test is None or test["p"] is None else f"{test['p']:.3f}"
        body.append(
            [
                n,
                "—" if rs[0].configurations is None else str(rs[0].configurations),
                _rule(rs[0]),
                ", ".join(str(r.seed) for r in rs),
                mean_std([r.self_["map"] for r in rs]),
                mean_std([r.cross["map"] for r in rs]),
                _gain(rs, "map"),
                mean_std([r.p_com["map"] for r in rs]),
                mean_std([r.p_com_den["map"] for r in rs]),
                mean_std([r.p_up["map"] for r in rs]),
                mean_std([r.cross["cmc@1"] for r in rs]),
                _gain(rs, "cmc@1"),
                mean_std([r.p_com["cmc@1"] for r in rs]),
                mean_std([r.p_com_den["cmc@1"] for r in rs]),
                vs,
                p,
            ]
        )
    return header, body, tests, by


#: a configuration is the table's saturated reference when at least this share of its new gallery is at the bound
SATURATED_AT = 0.5


def most_clipped(tried: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The Lorentz configuration tried at seed 0 with the most of its new test gallery at the clip radius (None when
    no Lorentz configuration was tried); it is the table's saturated reference when that share is ≥
    :data:`SATURATED_AT`."""
    lorentz = [h for h in tried if h.get("clip_fraction_new") is not None]
    return max(lorentz, key=lambda h: h["clip_fraction_new"]) if lorentz else None


def diagnostics_against_references(
    rows: list[Row], tried: list[dict[str, Any]]
) -> tuple[list[str], list[list[str]], str]:
    """The Lorentz rows' diagnostics over the seeds beside the same table's references: the unaligned φ* of each
    row's own lineage and the most saturated configuration tried (:func:`saturated_reference`). Returns the header,
    one line per Lorentz method, and the sentence naming the saturated reference ("" when there are no Lorentz rows)."""
    groups = {n: rs for n, rs in by_method(rows).items() if all("uncertainty_std_new" in r.diagnostics for r in rs)}
    if not groups:
        return [], [], ""
    top = most_clipped(tried)
    sat = top if top is not None and top["clip_fraction_new"] >= SATURATED_AT else None
    sat_u = None if sat is None else sat.get("uncertainty_std_new")
    header = ["method", "head", "seeds", *REFERENCE_DIAG, "÷ φ* (unaligned)", "÷ saturated"]
    body = []
    for n, rs in groups.items():
        u = statistics.mean(r.diagnostics["uncertainty_std_new"] or 0.0 for r in rs)
        refs = [r.diagnostics.get("uncertainty_std_ref") for r in rs]
        u_ref = statistics.mean(x for x in refs if x is not None) if any(x is not None for x in refs) else None
        body.append(
            [
                n,
                rs[0].head or "—",
                ", ".join(str(r.seed) for r in rs),
                *(mean_std([r.diagnostics.get(k) for r in rs], 3) for k in REFERENCE_DIAG),
                "—" if not u_ref else f"{u / u_ref:.2f}×",
                "—" if not sat_u else f"{u / sat_u:.2f}×",
            ]
        )
    if top is None:
        where = "no Lorentz configuration was tried"
    elif sat is None:
        where = (
            f"no configuration tried saturated (the most: {top['clip_fraction_new']:.3f} of the new gallery at the "
            f"bound, below {SATURATED_AT:g}), so there is no saturated reference"
        )
    else:
        where = (
            f"saturated reference: {sat['method']} on head {sat['head']} at λ = {sat['weight']:g} (seed 0), "
            f"{sat['clip_fraction_new']:.3f} of its new gallery at the bound, uncertainty std {sat_u:.3f}"
        )
    return header, body, where
