"""`bctflow bench routes`: every upgrade route on one scenario, under one budget, selected on validation
(docs/design.md §11).

For each seed of the profile (each its own old model φ_o, free new model φ* and aligned model): the old model
embedded the gallery (the test split); the upgrade to a new model takes one of four routes —

* ``compatible``: the HBCT model aligned to φ_o (the profile's ``hbct`` entry at its default λ, first Lorentz head)
  queries the old gallery as it is;
* ``adapter`` @ f: φ*'s queries mapped into φ_o's space by a bridge fitted on pairs (training items embedded by both);
* ``transform`` @ f: φ_o's stored vectors mapped into φ*'s space by a bridge fitted on the same pairs;
* ``backfill``: every gallery item re-embedded by φ*.

The pairs are ``f`` × the gallery's size items of the *training* split (never validation or test), f in
:data:`PAIRED_FRACTIONS`, nested (the smaller samples are prefixes of the larger). Every map kind of
:data:`MAP_KINDS` (defaults) is fitted for each route and fraction; the kind with the best *validation* served mAP is
reported on the test gallery (the same rule for adapter and transform). A kind that cannot be fitted (too few pairs
for the width: 2 per dimension) is reported as such. Measured on the test gallery, leave-one-out: served mAP / CMC@1
/ CMC@10 once the route is taken, the served mAP *during* the window the route's gallery work takes (the old gallery
answering the old model's queries for transform and backfill; none for compatible and adapter), P_com with its
denominator M(φ*, φ*) − M(φ_o, φ_o), P_up (the aligned model's self against φ*'s; 0 for the routes that serve φ*),
the gallery's seconds per item (the map over the test gallery, best of 3; φ*'s forward pass over it, in this run)
and the µs a query adapter adds per query (a batch of 1024 through the served chain, best of 5); and the adapter's
CMC@10 over the backfill's (Drift-Adapter's share of a full re-embed's Recall@10, labels as relevance). Mean ±
sample std over seeds.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks.runner import Bench, BenchModel, ModelRequest
from benchmarks.scenario_defs import make_scenario
from benchmarks.scenarios import base_models, selections
from components.bridges.base import Bridge, us_per_query
from components.bridges.chain import BridgeChain
from components.errors import ConfigError
from components.evaluation import gallery_metrics, p_com, p_up
from components.geometry import Lorentz
from components.indexing.gallery import GalleryEmbeddings
from components.models import load_model
from flows.upgrade import RouteEvidence, choose_route

__all__ = ["MAP_KINDS", "PAIRED_FRACTIONS", "RoutesResult", "auto_choices", "bars", "run_routes", "summarise"]

#: paired items as a fraction of the gallery: Drift-Adapter's 0.1 %, 1 %, 5 %, and larger samples this scale needs
PAIRED_FRACTIONS = (0.001, 0.01, 0.05, 0.1, 0.3)
#: the map kinds every route tries (each with its defaults), the best on validation reported
MAP_KINDS = ("procrustes", "low_rank", "residual_mlp")
_KS = (1, 10)


@dataclass
class RoutesResult:
    """Per seed: ``rows`` (one per route and fraction: its test metrics, window, cost, chosen kind) and the base
    numbers; ``gallery``: the test gallery's size."""

    scenario: str
    seeds: list[int]
    gallery: int
    rows: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    base: dict[int, dict[str, float]] = field(default_factory=dict)


def _metrics(q: GalleryEmbeddings, g: GalleryEmbeddings, bench: Bench) -> dict[str, float]:
    m = gallery_metrics(q, g, ks=_KS, chunk_size=bench.params.evaluation.chunk_size)
    return {"map": m["map"], "cmc@1": m["cmc@1"], "cmc@10": m["cmc@10"]}


def _embed_train(bench: Bench, m: BenchModel, positions: np.ndarray) -> GalleryEmbeddings:
    """Training items at ``positions`` embedded by ``m`` (the pairs' side of that model)."""
    model = load_model(m.checkpoint)
    return bench.embed(model, bench.train.subset(positions))


def _forward_s_per_item(bench: Bench, m: BenchModel) -> float:
    """``m``'s forward pass over the test gallery, seconds per item (what a backfill costs per item here)."""
    model = load_model(m.checkpoint)
    t0 = time.perf_counter()
    out = bench.embed(model, bench.test)
    return (time.perf_counter() - t0) / len(out)


def _fit_best(
    role: str, x: GalleryEmbeddings, y: GalleryEmbeddings, old: BenchModel, ref: BenchModel, bench: Bench, seed: int
) -> tuple[Bridge | None, dict[str, Any]]:
    """Every map kind fitted for ``role`` on the pairs (x: φ_o's, y: φ*'s); the best on validation served mAP, and
    what each kind scored (or why it could not be fitted)."""
    tried: dict[str, Any] = {}
    best: tuple[float, Bridge] | None = None
    for kind in MAP_KINDS:
        src, tgt = (y, x) if role == "adapter" else (x, y)
        try:
            bridge = Bridge.fit(kind, 1 if role == "adapter" else 0, 0 if role == "adapter" else 1, src, tgt, seed)
        except ConfigError as err:
            tried[kind] = f"not fitted: {err}"
            continue
        if role == "adapter":
            val = _metrics(bridge.map_gallery(ref.val), old.val, bench)["map"]
        else:
            val = _metrics(ref.val, bridge.map_gallery(old.val), bench)["map"]
        tried[kind] = val
        if best is None or val > best[0]:
            best = (val, bridge)
    return (best[1] if best else None), tried


def _seed_rows(bench: Bench, old: BenchModel, ref: BenchModel, new: BenchModel, seed: int) -> tuple[list, dict]:
    """One seed's route rows and base numbers (the module docstring's measurements)."""
    n = len(old.test)
    old_self, ref_self, new_self = (_metrics(m.test, m.test, bench) for m in (old, ref, new))
    base = {"old_self_map": old_self["map"], "ref_self_map": ref_self["map"], "new_self_map": new_self["map"]}
    forward = _forward_s_per_item(bench, ref)

    def row(route: str, f: float | None, served: dict[str, float], during: float, s_item: float, **extra) -> dict:
        pc, den = p_com(served["map"], old_self["map"], ref_self["map"])
        up = p_up(new_self["map"], ref_self["map"]) if route == "compatible" else 0.0
        return {"route": route, "fraction": f, **served, "during_map": during, "p_com": pc, "p_com_denominator": den,
                "p_up": up, "gallery_s_per_item": s_item, **extra}  # fmt: skip

    cross = _metrics(new.test, old.test, bench)
    rows = [
        row("compatible", None, cross, cross["map"], 0.0),  # no gallery work: it serves at once
        row("backfill", None, ref_self, old_self["map"], forward),
    ]
    most = min(len(bench.train), math.ceil(max(PAIRED_FRACTIONS) * n))
    order = np.random.default_rng(seed).permutation(len(bench.train))[:most]
    x_all, y_all = _embed_train(bench, old, np.sort(order)), _embed_train(bench, ref, np.sort(order))
    rank = np.argsort(np.argsort(order))  # each sorted position's place in the draw: prefixes are the draw's first k
    for f in PAIRED_FRACTIONS:
        k = min(most, math.ceil(f * n))
        keep = np.sort(np.flatnonzero(rank < k))
        x, y = x_all.take(keep), y_all.take(keep)  # same positions: the pairs stay aligned by id
        for role in ("adapter", "transform"):
            bridge, tried = _fit_best(role, x, y, old, ref, bench, seed)
            info = {"pairs": k, "tried": tried, "kind": None if bridge is None else bridge.kind}
            if bridge is None:
                need = 2 * max(x.z.shape[1], 8)
                why = f"{k} pairs, a {x.z.shape[1]}-wide map needs {need} (2 per dimension)"
                rows.append({"route": role, "fraction": f, "map": None, "why": why, **info})
                continue
            if role == "adapter":
                served = _metrics(bridge.map_gallery(ref.test), old.test, bench)
                us = us_per_query(BridgeChain((bridge,)).map_queries, ref.test.emb)  # hyperboloid points in and out
                rec = served["cmc@10"] / ref_self["cmc@10"] if ref_self["cmc@10"] else None
                rows.append(row(role, f, served, served["map"], 0.0, query_us=us, recovered_cmc10=rec, **info))
            else:
                s_item = math.inf
                for _ in range(3):  # best of 3: the machine is shared
                    t0 = time.perf_counter()
                    mapped = bridge.map_gallery(old.test)
                    s_item = min(s_item, (time.perf_counter() - t0) / n)
                rows.append(row(role, f, _metrics(ref.test, mapped, bench), old_self["map"], s_item, **info))
    return rows, base


def run_routes(bench: Bench, scenario: str) -> RoutesResult:
    """Every route of the module docstring on ``scenario`` (ext_class | ext_data), each seed of the profile."""
    if scenario not in ("ext_class", "ext_data"):
        raise ConfigError(f"bctflow bench routes runs ext_class or ext_data, not {scenario!r}")
    sc = make_scenario(bench, scenario)
    old_sel, new_sel = selections(bench, sc)
    head = bench.settings.heads(Lorentz.name)[0]
    entry = next((m for m in bench.settings.methods if m.method == "hbct"), None)
    if entry is None:
        raise ConfigError(f"profile {bench.profile.name!r} has no hbct method: the compatible route trains one")
    p = bench.params
    res = RoutesResult(scenario, list(bench.settings.seeds), len(bench.test))
    for seed in bench.settings.seeds:
        old, ref = base_models(bench, sc, old_sel, new_sel, seed, head)
        new = bench.train_model(
            f"routes-hbct/seed={seed}",
            ModelRequest(new_sel, geometry=Lorentz.name, arch=sc.new_arch, method="hbct", options=entry.options,
                         weight=p.alignment.weight, seed=seed, zeta=p.geometry.zeta0 + p.geometry.delta_zeta,
                         old=old, reference=ref, epochs=sc.epochs, params=head.params or None),
        )  # fmt: skip
        bench.log(f"[routes {scenario}] seed {seed}: fitting and measuring the routes")
        res.rows[seed], res.base[seed] = _seed_rows(bench, old, ref, new, seed)
    return res


def auto_choices(res: RoutesResult, bars: tuple[float, ...], items: int) -> list[dict[str, Any]]:
    """What ``upgrade.route: auto`` takes at each bar for a gallery of ``items``, from the table's seed means (the
    adapter and transform at the largest fraction every seed fitted)."""
    mean = summarise(res)
    evidence = []
    for route in ("compatible", "adapter", "transform", "backfill"):
        cands = [r for r in mean if r["route"] == route and r["map"] is not None]
        if not cands:
            continue
        r = cands[-1]
        evidence.append(RouteEvidence(route, r["map"], r["gallery_s_per_item"], r.get("query_us") or 0.0))
    out = []
    for bar in bars:
        c = choose_route(evidence, items=items, min_map=bar)
        out.append({"bar": bar, "items": items, "route": c.route, "met_bar": c.met_bar, "line": c.line})
    return out


def bars(mean: list[dict[str, Any]]) -> tuple[float, ...]:
    """The bars ``auto`` is shown at: the old gallery's own mAP (no worse than today), 95 % and 100 % of the
    backfill's served mAP (from the seed means)."""
    backfill = next(r for r in mean if r["route"] == "backfill")
    return (backfill["during_map"], 0.95 * backfill["map"], backfill["map"])  # exact: a rounded-up bar misses its route


def summarise(res: RoutesResult) -> list[dict[str, Any]]:
    """Each (route, fraction) row over the seeds: mean and sample std (ddof 1) of every number, ``None`` where a
    seed could not fit it."""
    keys = ("map", "cmc@1", "cmc@10", "during_map", "p_com", "p_com_denominator", "p_up", "gallery_s_per_item",
            "query_us", "recovered_cmc10")  # fmt: skip
    first = res.rows[res.seeds[0]]
    out = []
    for i, r0 in enumerate(first):
        rows = [res.rows[s][i] for s in res.seeds]
        entry: dict[str, Any] = {
            "route": r0["route"],
            "fraction": r0["fraction"],
            "pairs": r0.get("pairs"),
            "kinds": [r.get("kind") for r in rows],
            "why": [r.get("why") for r in rows],
        }
        for k in keys:
            vals = [r.get(k) for r in rows]
            if any(v is None for v in vals):  # not measured for this route, or a seed could not fit it
                entry[k] = entry[f"{k}_std"] = None
                continue
            a = np.asarray(vals, dtype=np.float64)
            entry[k], entry[f"{k}_std"] = float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else None
        out.append(entry)
    return out
