"""Partial-backfill curves: retrieval quality of the newest model over a mixed gallery vs the backfilled fraction.

Setting (ext_class): the old model (Lorentz, base loss, first half of the classes)
embedded the gallery; the new HBCT model queries it. A fraction f of the gallery
is re-embedded by the new model — chosen by ``uncertainty`` (highest hyperbolic
uncertainty of the old vector first) or ``random`` (averaged over seeds) — and the
new model's queries search the mixed gallery (leave-one-out by id). f = 0 is pure
cross retrieval, f = 1 the new model's self retrieval.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.report import report_header, write_report_files
from benchmarks.runner import Bench, BenchModel, ModelRequest
from benchmarks.scenarios import make_scenario
from components.evaluation import COMPAT_METRICS, gallery_metrics
from components.evaluation.served import backfilled, served_maps
from components.geometry import Lorentz
from components.indexing.gallery import GalleryEmbeddings
from components.indexing.mixed import backfill_order

__all__ = ["FRACTIONS", "run_partial_backfill"]

FRACTIONS = (0.0, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0)


@dataclass
class CurveResult:
    fractions: list[float]
    curves: dict[str, dict[str, list[float]]]  # order -> metric -> values (random: mean over seeds)
    spread: dict[str, list[float]]  # random: std of mAP over seeds
    seeds: list[int]
    method: str
    models: dict[str, Any]


def run_partial_backfill(bench: Bench, method: str = "hbct", random_seeds: int = 5) -> CurveResult:
    old, new = _curve_models(bench, method)
    ks = tuple(bench.params.evaluation.cmc_k)
    curves = {"uncertainty": _curve(old.test, new.test, backfill_order(old.test, "uncertainty", seed=0), ks, True)}
    runs = [_curve(old.test, new.test, backfill_order(old.test, "random", seed=s), ks) for s in range(random_seeds)]
    curves["random"] = {k: list(np.mean([r[k] for r in runs], axis=0)) for k in COMPAT_METRICS}
    spread = {k: list(np.std([r[k] for r in runs], axis=0)) for k in COMPAT_METRICS}
    return CurveResult(
        list(FRACTIONS),
        curves,
        spread,
        list(range(random_seeds)),
        method,
        {"old": old.meta, "new": new.meta, "old_self": bench.metrics(old, old), "new_self": bench.metrics(new, new)},
    )


def _curve_models(bench: Bench, method: str) -> tuple[BenchModel, BenchModel]:
    """The ext_class old Lorentz model and the new model aligned to it with ``method``'s options (via φ*)."""
    p = bench.params
    sc = make_scenario(bench, "ext_class")
    entry = next((m for m in bench.settings.methods if m.name == method), None)
    options = entry.options if entry else {}
    old_sel = bench.selection(sc.old_classes, sc.old_fraction, seed=p.data.split_seed)
    new_sel = bench.selection("all")
    z0 = p.geometry.zeta0
    old = bench.train_model(
        "old/lorentz/seed=0",
        ModelRequest(old_sel, geometry=Lorentz.name, arch=sc.old_arch, zeta=z0, epochs=sc.epochs, generation=0),
    )
    ref = bench.train_model(
        "reference/lorentz/seed=0",
        ModelRequest(
            new_sel,
            geometry=Lorentz.name,
            arch=sc.new_arch,
            zeta=z0 + p.geometry.delta_zeta,
            epochs=sc.epochs,
            role="reference",
        ),
    )
    new = bench.train_model(
        f"{method}/λ={p.alignment.weight:g}/seed=0",
        ModelRequest(
            new_sel,
            geometry=Lorentz.name,
            arch=sc.new_arch,
            method="hbct",
            options=options,
            weight=p.alignment.weight,
            seed=0,
            zeta=z0 + p.geometry.delta_zeta,
            old=old,
            reference=ref,
            epochs=sc.epochs,
        ),
    )
    return old, new


def _curve(
    old: GalleryEmbeddings, new: GalleryEmbeddings, order: np.ndarray, ks: tuple[int, ...], served: bool = False
) -> dict[str, list[float]]:
    """CMC@1 and mAP of ``new``'s queries at each of :data:`FRACTIONS`, the first f·N of ``order`` (N,) backfilled;
    ``served``: also the served mAP@R without and with ``serve.merge: rank``
    (:func:`components.evaluation.served.served_maps`)."""
    n = len(old)
    out: dict[str, list[float]] = {"cmc@1": [], "map": []}
    if served:
        out |= {"served_map": [], "served_map_rank": []}
    for f in FRACTIONS:
        pos = np.sort(order[: round(f * n)])
        mixed = backfilled(old, new, pos)
        m = gallery_metrics(new, mixed, ks=ks)
        out["cmc@1"].append(m["cmc@1"])
        out["map"].append(m["map"])
        if served:
            for key, value in served_maps(old, new, mixed, pos).items():
                out[key].append(value)
    return out


def write_partial_report(res: CurveResult, ctx: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    _plot_curves(res, ctx, out_dir / "curve.png")
    area = {o: float(np.trapezoid(res.curves[o]["map"], res.fractions)) for o in ("uncertainty", "random")}
    return write_report_files(
        out_dir,
        _partial_lines(res, ctx, area),
        lambda path: _write_partial_csv(res, path),
        lambda: {
            "context": ctx,
            "fractions": res.fractions,
            "curves": res.curves,
            "spread": res.spread,
            "area_map": area,
            "models": res.models,
        },
    )


def _plot_curves(res: CurveResult, ctx: dict[str, Any], path: Path) -> None:
    """``curve.png``: CMC@1 and mAP vs the backfilled fraction, uncertainty order vs random (mean ± std)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), dpi=110)
    for ax, k in zip(axes, COMPAT_METRICS):
        for order, style in (("uncertainty", "o-"), ("random", "s--")):
            ax.plot(
                res.fractions,
                res.curves[order][k],
                style,
                label=order if order == "uncertainty" else f"random (mean of {len(res.seeds)} seeds)",
            )
        lo = np.array(res.curves["random"][k]) - np.array(res.spread[k])
        hi = np.array(res.curves["random"][k]) + np.array(res.spread[k])
        ax.fill_between(res.fractions, lo, hi, alpha=0.2)
        ax.set_xlabel("fraction of the gallery re-embedded by the new model")
        ax.set_ylabel(k.upper().replace("MAP", "mAP"))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"partial backfill ({ctx['dataset']}): new {res.method} queries over a mixed gallery", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _partial_lines(res: CurveResult, ctx: dict[str, Any], area: dict[str, float]) -> list[str]:
    """The lines of ``report.md``: setting, one table row per fraction, areas under the mAP curves."""
    old_self = ", ".join(f"{k} {v:.4f}" for k, v in res.models["old_self"].items())
    new_self = ", ".join(f"{k} {v:.4f}" for k, v in res.models["new_self"].items())
    lines = report_header("partial backfill: retrieval quality vs backfilled fraction", ctx)
    lines += [
        "Setting: ext_class — the old model (Lorentz, base loss, first half of the classes) embedded the gallery; "
        f"the new model ({res.method}, aligned to it) queries a gallery in which a fraction f was re-embedded "
        "by the new model, chosen by the old vectors' hyperbolic uncertainty (highest first) or at random "
        f"(mean ± std over {len(res.seeds)} seeds). Old self: {old_self}; new self: {new_self}.",
        "",
        *_served_lines(res),
        "| fraction | CMC@1 uncertainty | CMC@1 random | mAP uncertainty | mAP random (± std) "
        "| mAP gain of uncertainty |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    u, r = res.curves["uncertainty"], res.curves["random"]
    for i, f in enumerate(res.fractions):
        lines.append(
            f"| {f:.2f} | {u['cmc@1'][i]:.4f} | {r['cmc@1'][i]:.4f} | {u['map'][i]:.4f} | "
            f"{r['map'][i]:.4f} ± {res.spread['map'][i]:.4f} | {u['map'][i] - r['map'][i]:+.4f} |"
        )
    return [
        *lines,
        "",
        f"Area under the mAP curve: uncertainty {area['uncertainty']:.4f}, random {area['random']:.4f}.",
        "",
        "Plot: `curve.png`.",
    ]


def _served_lines(res: CurveResult) -> list[str]:
    """What ``bctflow serve`` answers at each fraction (uncertainty order): mAP@R without and with merge by rank."""
    u = res.curves["uncertainty"]
    if "served_map" not in u:
        return []
    lines = [
        "Served mAP@R (uncertainty order; what `bctflow serve` answers, full-depth lists): `serve.merge: none` "
        "searches the mixed gallery with the new model's query; `serve.merge: rank` searches each generation's "
        "vectors with its own model's query and merges the lists by rank (Seo et al., WACV'25).",
        "",
        "| fraction | served mAP@R (merge: none) | served mAP@R (merge: rank) | rank − none |",
        "|---:|---:|---:|---:|",
    ]
    for i, f in enumerate(res.fractions):
        a, b = u["served_map"][i], u["served_map_rank"][i]
        lines.append(f"| {f:.2f} | {a:.4f} | {b:.4f} | {b - a:+.4f} |")
    return [*lines, ""]


def _write_partial_csv(res: CurveResult, path: Path) -> None:
    """``results.csv``: one line per (order, fraction) with CMC@1, mAP and the random order's mAP std."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["order", "fraction", "cmc@1", "map", "map_std"])
        for order in ("uncertainty", "random"):
            for i, f in enumerate(res.fractions):
                w.writerow(
                    [
                        order,
                        f,
                        res.curves[order]["cmc@1"][i],
                        res.curves[order]["map"][i],
                        res.spread["map"][i] if order == "random" else 0.0,
                    ]
                )
