"""The report of `bctflow bench routes` (benchmarks/routes.py): report.md, results.csv, results.json."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from benchmarks.report import report_header, write_report_files
from benchmarks.routes import MAP_KINDS, PAIRED_FRACTIONS, RoutesResult, auto_choices, bars, summarise

__all__ = ["write_routes_report"]

#: the gallery sizes the cost column is given for beside this one (the scale corpus: 1M)
_SCALE_ITEMS = 1_000_000


def _num(v: Any, std: Any = None, fmt: str = ".4f") -> str:
    if v is None:
        return "—"
    return f"{v:{fmt}}" + (f" ± {std:{fmt}}" if std is not None else "")


def _route_name(r: dict[str, Any]) -> str:
    if r["fraction"] is None:
        return r["route"]
    return f"{r['route']} @ {r['fraction']:.1%} ({r['pairs']} pairs)"


def _lines(res: RoutesResult, ctx: dict[str, Any], mean: list[dict[str, Any]], auto: list[dict[str, Any]]) -> list[str]:
    base = {k: sum(b[k] for b in res.base.values()) / len(res.base) for k in res.base[res.seeds[0]]}
    lines = report_header(f"upgrade routes: {res.scenario}", ctx)
    lines += [
        f"Scenario {res.scenario}; per seed its own old model φ_o, free new model φ* and HBCT model aligned to φ_o; "
        f"the gallery is the test split ({res.gallery} items). Mean over seeds {res.seeds}: old self mAP "
        f"{base['old_self_map']:.4f}, φ* self {base['ref_self_map']:.4f}, HBCT self {base['new_self_map']:.4f}. "
        f"Map kinds tried per route and fraction: {', '.join(MAP_KINDS)} (defaults); the best on validation served "
        "mAP is reported (kind per seed in the last column). ± is the sample std over seeds.",
        "",
        "| route | served mAP | CMC@1 | CMC@10 | mAP during the window | P_com (denominator) | P_up | gallery s/item "
        "| s for 1M items | µs/query | CMC@10 / backfill's | map kind |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in mean:
        if r["map"] is None:
            why = next((w for w in r["why"] if w), "not fitted")
            lines.append(f"| {_route_name(r)} | not fitted: {why} | | | | | | | | | | |")
            continue
        pc = "—" if r["p_com"] is None else f"{_num(r['p_com'], r['p_com_std'], '.3f')} ({r['p_com_denominator']:.4f})"
        s_item = r["gallery_s_per_item"]
        lines.append(
            f"| {_route_name(r)} | {_num(r['map'], r['map_std'])} | {_num(r['cmc@1'], r['cmc@1_std'])} "
            f"| {_num(r['cmc@10'], r['cmc@10_std'])} | {_num(r['during_map'])} | {pc} "
            f"| {_num(r['p_up'], None, '+.4f')} "
            f"| {s_item:.2e} | {s_item * _SCALE_ITEMS:,.1f} | {_num(r['query_us'], None, '.2f')} "
            f"| {_num(r['recovered_cmc10'], r['recovered_cmc10_std'], '.1%')} "
            f"| {', '.join(k or '—' for k in r['kinds'])} |"
        )
    lines += [
        "",
        "`upgrade.route: auto` on these means (flows/upgrade/route_rule.py), for a gallery of "
        f"{auto[0]['items']:,}, at the "
        "bars the old gallery's own mAP, 95% and 100% of the backfill's (each route at its largest fitted sample):",
        "",
    ]
    lines += [f"* bar {a['bar']:.4f}: **{a['route']}**{'' if a['met_bar'] else ' (bar not met)'}" for a in auto]
    return lines


def _write_csv(res: RoutesResult, path: Path) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        keys = ["route", "fraction", "pairs", "kind", "map", "cmc@1", "cmc@10", "during_map", "p_com",
                "p_com_denominator", "p_up", "gallery_s_per_item", "query_us", "recovered_cmc10"]  # fmt: skip
        w.writerow(["seed", *keys])
        for seed in res.seeds:
            for r in res.rows[seed]:
                w.writerow([seed, *(r.get(k) for k in keys)])


def write_routes_report(res: RoutesResult, ctx: dict[str, Any], out_dir: Path) -> Path:
    """report.md, results.csv and results.json of ``res`` in ``out_dir``; returns report.md."""
    out_dir.mkdir(parents=True, exist_ok=True)
    mean = summarise(res)
    auto = auto_choices(res, bars(mean), _SCALE_ITEMS)
    return write_report_files(
        out_dir,
        _lines(res, ctx, mean, auto),
        lambda p: _write_csv(res, p),
        lambda: {
            "context": ctx,
            "paired_fractions": PAIRED_FRACTIONS,
            "map_kinds": MAP_KINDS,
            "seeds": res.seeds,
            "gallery": res.gallery,
            "base": res.base,
            "rows": res.rows,
            "mean": mean,
            "auto": auto,
        },
    )
