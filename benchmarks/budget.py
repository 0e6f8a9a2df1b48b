"""How the method ranking moves with the training budget: one scenario's method table per budget point.

A budget point (:class:`~benchmarks.profile.BudgetPoint`) is the profile's scenario with ``data.max_train_per_class``
images per class and ``train.epochs`` epochs; each point is an ordinary method table
(``<out>/<profile>/<scenario>-n<per_class>-e<epochs>/``, its records in ``<out>/<profile>/records/``), with every
method in one fixed configuration (the one the equal-budget tables chose on validation; nothing is chosen here).

Every method at a point is measured against one φ* per seed — the unaligned new model (method ``independent``) with the
best *validation* mAP among the heads the point's methods use, across geometries — so a ratio compared across methods
has one denominator (benchmarks/common_reference.py; P_com / P_up as the HBCT paper's Eqs. 14–15 with mAP):

    P_com = (M(φ_n, φ_o) − M(φ_o, φ_o)) / (M(φ*, φ*) − M(φ_o, φ_o))        P_up = (M(φ_n, φ_n) − M(φ*, φ*)) / M(φ*, φ*)

``abs_gain`` = M(φ_n, φ_o) − M(φ_o, φ_o) is what a new query gains on the old gallery, with no denominator at all.
Inputs of the summary are the committed tables only (their rows carry each record's validation scores and each
role's training), so ``bctflow bench budget --report-only`` re-makes budget.json / budget.md without training.

Shapes: per method and point, the values are ``(n_seeds,)`` arrays.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common_reference import (
    Reference,
    common_references,
    nan_for_none,
    p_com_common,
    p_up_common,
    seed_stats,
)
from benchmarks.profile import BudgetPoint, Profile, load_profile
from benchmarks.report_stats import compared_by
from benchmarks.run import run_benchmark
from components.errors import ConfigError

__all__ = ["WHERE", "budget_points", "run_budget", "summarise_budget"]

#: which points a run trains: those meant for a CPU, for a lent GPU, or all of them
WHERE = ("cpu", "gpu", "all")


def budget_points(prof: Profile, where: str) -> list[BudgetPoint]:
    """The profile's budget points meant for ``where`` (``cpu`` / ``gpu`` / ``all``)."""
    if prof.budget is None:
        raise ConfigError(
            f"profile {prof.name!r} has no budget: section; use --profile cpu_budget or add budget: points to it"
        )
    if where not in WHERE:
        raise ConfigError(f"--where {where!r}: use one of {', '.join(WHERE)}")
    return [pt for pt in prof.budget.points if where in ("all", pt.where)]


def run_budget(
    profile: str,
    *,
    out: Path,
    home: Path,
    params_path: Path,
    command: str,
    where: str = "cpu",
    overrides: list[str] | None = None,
    workers: int = 0,
    scheduler: str | None = None,
    log: Callable[[str], None] = print,
) -> list[Path]:
    """Train (or find in the cache and records) the method table of every budget point meant for ``where``; returns
    the tables' report.md paths. ``overrides``: further params overrides (how a step runs on the machine at hand, e.g.
    ``train.compile=off``; one that changes the models changes their cache keys too). The summary is
    :func:`summarise_budget`'s."""
    prof, _ = load_profile(profile, params_path)
    points = budget_points(prof, where)
    assert prof.budget is not None
    written = []
    for pt in points:
        log(f"[budget] {pt.tag}: {pt.per_class} images per class, {pt.epochs} epochs, seeds {pt.seeds}")
        md, _ = run_benchmark(
            profile,
            prof.budget.scenario,
            out=out,
            home=home,
            params_path=params_path,
            command=command,
            tag=pt.tag,
            overrides=[*pt.overrides, *(overrides or [])],
            bench_set=[f"seeds={pt.seeds}"],
            workers=workers,
            scheduler=scheduler,
            log=log,
        )
        written.append(md)
    return written


def _common_reference(rows: list[dict[str, Any]]) -> dict[int, Reference]:
    """Per seed, the φ* with the best validation mAP among the rows' heads (:func:`~benchmarks.common_reference.
    common_references`, ``overall``; each row's record holds its own head's φ* self scores on both splits, not its
    cache key)."""
    pool = {}
    for r in rows:
        if not r.get("val"):
            raise ConfigError(
                f"row {r['name']} seed {r['seed']} has no validation scores (a table made before rows carried them); "
                "run bctflow bench budget again to re-make it from its records"
            )
        ref = Reference(r["geometry"], r["head"], "", r["val"]["ref_self"]["map"], r["ref_self"]["map"])
        pool.setdefault((r["seed"], r["geometry"], r["head"]), ref)
    return {s: by["overall"] for s, by in common_references(pool, sorted({r["seed"] for r in rows})).items()}


def _point_summary(pt: BudgetPoint, doc: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One measured point: its facts (φ* per seed, the roles' training) and its entries, one per method."""
    rows = [r for r in doc["rows"] if r["selection"] not in ("not applicable", "training-free")]
    refs = _common_reference(rows)
    entries = []
    for name in dict.fromkeys(r["name"] for r in rows):
        mine = sorted((r for r in rows if r["name"] == name), key=lambda r: r["seed"])
        cross, old, new = (np.array([r[k]["map"] for r in mine]) for k in ("cross", "old_self", "self"))
        ref = np.array([refs[r["seed"]].test_map for r in mine])
        first = mine[0]
        entries.append(
            {
                "budget": pt.tag,
                "per_class": pt.per_class,
                "epochs": pt.epochs,
                "steps": first["roles"].get("new", {}).get("steps"),
                "method": name,
                "config": {"head": first["head"], "weight": first["weight"], "options": first["options"]},
                "seeds": [r["seed"] for r in mine],
                "p_com_common": seed_stats(p_com_common(cross, old, ref)),
                "p_up_common": seed_stats(p_up_common(new, ref)),
                "abs_gain": seed_stats(cross - old),
                "p_com_common_denominator": seed_stats(ref - old),
                "p_com_per_head": seed_stats(np.array([nan_for_none(r["p_com"]["map"]) for r in mine])),
            }
        )
    roles: dict[str, dict[str, Any]] = {}
    for role in ("old", "ref", "new"):
        got = [r["roles"][role] for r in rows if role in r.get("roles", {})]
        if got:
            roles[role] = {
                "min_train_accuracy": min(g["train_accuracy"] for g in got),
                "steps": sorted({int(g["steps"]) for g in got}),
            }
    facts = {
        "status": "measured",
        # the seeds its table holds: fewer than the profile asks while the further seeds' run has not finished
        "seeds_measured": sorted(refs),
        "references": {
            str(s): {"geometry": ref.geometry, "head": ref.head, "val": ref.val_map, "test": ref.test_map}
            for s, ref in sorted(refs.items())
        },
        "roles": roles,
        "n_train": doc["context"].get("n_train"),
        "provenance": doc["context"].get("provenance"),
        "command": doc["context"].get("command"),
    }
    return facts, entries


def summarise_budget(out: Path, profile: str, params_path: Path, command: str) -> dict[str, Any]:
    """budget.json's content from the committed tables of every budget point of ``profile`` under ``out`` (a point
    without a table is listed as not run, with where it is meant to run)."""
    prof, _ = load_profile(profile, params_path)
    points = budget_points(prof, "all")
    assert prof.budget is not None
    scenario = prof.budget.scenario
    doc_points, entries = [], []
    for pt in points:
        path = out / prof.name / f"{scenario}-{pt.tag}" / "results.json"
        base = {"budget": pt.tag, "per_class": pt.per_class, "epochs": pt.epochs, "seeds": pt.seeds, "where": pt.where}
        if not path.is_file():
            why = "needs a lent GPU: scripts/gpu_budget.sh" if pt.where == "gpu" else "not run yet"
            doc_points.append(base | {"status": f"not run: {why}"})
            continue
        facts, mine = _point_summary(pt, json.loads(path.read_text()))
        doc_points.append(base | facts)
        entries += mine
    ordering = {p["budget"]: _order(entries, p["budget"]) for p in doc_points if p["status"] == "measured"}
    return {
        "command": command,
        "profile": prof.name,
        "scenario": scenario,
        "reference_rule": "one φ* per budget × seed: the unaligned new model with the best validation mAP among the "
        "heads the point's methods use, across geometries; P_com / P_up with mAP on the test gallery",
        "points": doc_points,
        "entries": entries,
        "ordering": ordering,
    }


def _order(entries: list[dict[str, Any]], budget: str) -> dict[str, Any]:
    """The methods at ``budget`` from best to worst, by what :func:`~benchmarks.report_stats.compared_by` names
    (common P_com over one well-conditioned denominator, else the absolute gain cross − old self), and which it was.
    A φ* no better than the old models (a budget too small for φ* to train) makes every P_com meaningless."""
    mine = [e for e in entries if e["budget"] == budget]
    by = compared_by([e["p_com_common_denominator"]["mean"] for e in mine])
    ranked = sorted(mine, key=lambda e: -(e[by]["mean"] if e[by]["mean"] is not None else float("-inf")))
    return {"by": by, "methods": [e["method"] for e in ranked]}
