"""The equal-budget tables against one φ*: P_com and P_up with a common denominator, and the frontier.

P_com and P_up are the BCT line's compatibility and update measures (Shen et al., BCT; the HBCT paper's Eqs. 14–15;
docs/design.md §6.3), here with mAP on a split:

    P_com = (M(φ_n, φ_o) − M(φ_o, φ_o)) / (M(φ*, φ*) − M(φ_o, φ_o))        P_up = (M(φ_n, φ_n) − M(φ*, φ*)) / M(φ*, φ*)

The method tables (benchmarks/report.py) measure every configuration against the φ* of *its own head*: choosing a head
also chooses the denominator, and a head with a weak φ* makes every P_com on it look large. Here φ* is one model per
scenario × seed × geometry — the unaligned new model (method ``independent``) with the best *validation* mAP among
the heads the protocol tried in that geometry — and, beside it, one per scenario × seed across both geometries
("overall"). The numerator keeps each row's own old model: cross − old self is what a new query gains on the old
gallery the row was trained against (``abs_gain``); only φ*'s self score is replaced. Nothing is trained and nothing
is chosen here with a test number in view: the committed selection (its rule on per-head validation scores) stands;
the floors of :data:`FLOORS` re-apply the same rule to the common-denominator *validation* scores.

Inputs are committed files only: a profile's ``<scenario>/results.json`` (rows, ``heads_tried``) and its
``records/`` (one evaluation record per new model, benchmarks/records.py). A record names no scenario; each
configuration tried at seed 0 is matched to the one record whose validation P_com and P_up reproduce the stored
ones exactly, each further-seed row to the one record whose test cross and self mAP it reports. φ* is shared by the
scenarios (its cache key is the same in both: its data are all of the training set in both), so a φ* missing from
one scenario's records at a seed (a head no method of it chose) is read from the other's.

Shapes: the frontier arrays are ``(n_configurations,)`` per scenario (every configuration of every trained method at
seed 0); the per-method values are ``(n_seeds,)``.

Its views (results.json's ``common_reference``, report.md's lead table, ``frontier.md``, ``frontier.png``) are
:mod:`benchmarks.common_reference_report`'s; ``bctflow bench common-reference --profile cpu_equal`` re-makes them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.profile import load_profile
from benchmarks.records import ModelRecord
from benchmarks.report_stats import compared_by, paired_test
from benchmarks.rerender import row_from_dict
from benchmarks.rows import Row, option_text
from benchmarks.runner import training_summary
from benchmarks.scenarios import SIMPLEX, Config, validation_scores
from benchmarks.selection import Scored as ScoredConfig
from benchmarks.selection import select_configuration
from components.errors import ConfigError
from components.evaluation import p_com, p_up

__all__ = ["FLOORS", "KEY", "Reference", "analyse_profile", "nan_for_none", "p_com_common", "p_up_common", "seed_stats"]

#: the P_up floors the selection is re-applied at (None: no floor — the largest validation P_com)
FLOORS: tuple[float | None, ...] = (-0.01, -0.02, -0.05, None)
#: the primary common denominator: one φ* per scenario × seed × geometry (``"overall"``: across geometries, beside it)
PRIMARY = "geometry"
KEY = "common_reference"


@dataclass(frozen=True)
class Reference:
    """One unaligned new model φ*: its geometry, head, cache key and its self mAP on validation and test."""

    geometry: str
    head: str
    key: str
    val_map: float
    test_map: float

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _elementwise(fn: Callable[..., float | None], *arrays: np.ndarray) -> np.ndarray:
    """``fn`` (a scalar measure of :mod:`components.evaluation`) over broadcast arrays, float64, NaN where it is
    undefined (None)."""
    grid = np.broadcast(*arrays)
    out = [fn(*args) for args in grid]
    return np.array([np.nan if v is None else v for v in out], float).reshape(grid.shape)


def p_com_common(cross: np.ndarray, old_self: np.ndarray, ref_self: np.ndarray) -> np.ndarray:
    """P_com = (cross − old self) / (φ* self − old self), elementwise over arrays of one shape: the library's
    :func:`components.evaluation.p_com`, NaN where it is undefined (the denominator below ``DENOMINATOR_EPS``)."""
    return _elementwise(lambda c, o, r: p_com(c, o, r)[0], cross, old_self, ref_self)


def p_up_common(new_self: np.ndarray, ref_self: np.ndarray) -> np.ndarray:
    """P_up = (self − φ* self) / φ* self, elementwise: :func:`components.evaluation.p_up`, NaN where φ* self is 0."""
    return _elementwise(p_up, new_self, ref_self)


def _num(x: float) -> float | None:
    """A JSON number: None for NaN."""
    return None if x is None or math.isnan(x) else float(x)


def nan_for_none(x: float | None) -> float:
    """A stored number, NaN for None (an undefined ratio)."""
    return float("nan") if x is None else float(x)


def seed_stats(values: np.ndarray) -> dict[str, Any]:
    """``{"mean", "std", "values"}`` of a ``(n_seeds,)`` array: the mean and sample std (ddof 1; None for one value)
    of its finite values, as the tables' mean ± std."""
    v = np.asarray(values, float)
    f = v[np.isfinite(v)]
    return {
        "mean": _num(f.mean()) if f.size else None,
        "std": _num(f.std(ddof=1)) if f.size > 1 else None,
        "values": [_num(x) for x in v],
    }


# --- matching the committed results to their records ------------------------------------------------------------


def load_records(folder: Path) -> dict[str, list[ModelRecord]]:
    """Every evaluation record of ``folder`` by label (a label recurs once per scenario that trained it)."""
    out: dict[str, list[ModelRecord]] = {}
    for f in sorted(folder.glob("*.json")):
        rec = ModelRecord(**json.loads(f.read_text()))
        out.setdefault(rec.label, []).append(rec)
    return out


def _one(found: list[ModelRecord], what: str, folder: Path) -> ModelRecord:
    if len(found) != 1:
        raise ConfigError(
            f"{what}: {len(found)} records match (expected exactly one); {folder / 'records'} must hold the records "
            "the table was made from: rerun the table's command (its report names it) to write them"
        )
    return found[0]


@dataclass(frozen=True)
class _Tables:
    """A profile's committed tables matched to their records: per scenario, its results.json, the seed-0 record of
    each configuration tried (``heads_tried`` order), the record of each further-seed trained row (row order), and
    the φ* pool ``(seed, geometry, head) -> Reference`` shared by the scenarios."""

    docs: dict[str, dict[str, Any]]
    tried: dict[str, list[ModelRecord | None]]
    further: dict[str, dict[int, ModelRecord]]
    pool: dict[tuple[int, str, str], Reference]
    seen: dict[str, list[str]]
    #: the profile's train criterion (last-epoch train accuracy; None: none stated) and its training batch
    criterion: float | None = None
    batch_size: int = 128


def _label(entry: Any, heads: dict[tuple[str, str], Any], head: str, weight: float, options: dict, seed: int) -> str:
    tag = Config(heads[(entry.geometry, head)], weight, options).tag(entry.geometry)
    return f"{entry.name}{tag}/λ={weight:g}/seed={seed}"


def match_tables(out: Path, profile: str, params_path: Path) -> _Tables:
    """Match every method table of ``out/<profile>/`` (a results.json written under the one selection rule with
    configurations tried) to ``out/<profile>/records/``; raises ConfigError when a configuration or row has not
    exactly one record, or one φ* key two different scores."""
    folder = out / profile
    docs = {}
    for p in sorted(folder.glob("*/results.json")):
        doc = json.loads(p.read_text())
        if "selection_rule" in doc.get("context", {}) and doc.get("heads_tried"):
            docs[p.parent.name] = doc
    if not docs:
        raise ConfigError(
            f"no method table with configurations tried under {folder}; run `bctflow bench --profile {profile} "
            "--scenario …` first, or name a profile whose tables are there"
        )
    prof, p = load_profile(profile, params_path)
    s = prof.bench
    entries = {e.name: e for e in s.methods}
    heads = {(g, h.name): h for g in ("euclidean", "lorentz") for h in s.heads(g)}
    records = load_records(folder / "records")
    tried: dict[str, list[ModelRecord | None]] = {}
    further: dict[str, dict[int, ModelRecord]] = {}
    pool: dict[tuple[int, str, str], Reference] = {}
    seen: dict[str, list[str]] = {}
    seed0 = s.seeds[0]

    def add(scenario: str, seed: int, geometry: str, head: str, rec: ModelRecord) -> None:
        ref = Reference(geometry, head, rec.ref_key, rec.val["ref_self"]["map"], rec.test["ref_self"]["map"])
        old = pool.setdefault((seed, geometry, head), ref)
        if old != ref:
            raise ConfigError(
                f"φ* of seed {seed} {geometry}/{head}: {old} in one record, {ref} in another; the records under "
                f"{folder / 'records'} come from different runs: rerun the table's command to write them again"
            )
        if scenario not in seen.setdefault(ref.key, []):
            seen[ref.key].append(scenario)

    for scenario, doc in docs.items():
        tried[scenario] = []
        for t in doc["heads_tried"]:
            e = entries[t["method"]]
            lab = _label(e, heads, t["head"], t["weight"], t["options"], seed0)
            if t.get("diverged"):
                tried[scenario].append(None)
                continue
            found = [
                r
                for r in records.get(lab, [])
                if r.diverged is None
                and (v := validation_scores(r))["val_p_com"] == t["val_p_com"]
                and v["val_p_up"] == t["val_p_up"]
            ]
            rec = _one(found, f"{scenario} {lab}", folder)
            tried[scenario].append(rec)
            add(scenario, seed0, e.geometry, t["head"], rec)
        further[scenario] = {}
        for i, row in enumerate(doc["rows"]):
            if row["method"] in SIMPLEX or row["seed"] == seed0:
                continue
            e = entries[row["name"]]
            lab = _label(e, heads, row["head"], row["weight"], row["options"], row["seed"])
            found = [
                r
                for r in records.get(lab, [])
                if r.test["cross"]["map"] == row["cross"]["map"] and r.test["self"]["map"] == row["self"]["map"]
            ]
            rec = _one(found, f"{scenario} {lab}", folder)
            further[scenario][i] = rec
            add(scenario, row["seed"], e.geometry, row["head"], rec)
    return _Tables(docs, tried, further, pool, seen, s.train_criterion, p.train.batch_size)


# --- the analysis --------------------------------------------------------------------------------------------------


def common_references(
    pool: dict[tuple[int, str, str], Reference], seeds: Sequence[int]
) -> dict[int, dict[str, Reference]]:
    """Per seed: the φ* with the best validation mAP in each geometry, and under ``"overall"`` across them (ties: the
    first in head order)."""
    out: dict[int, dict[str, Reference]] = {}
    for seed in seeds:
        cands = [r for (s, _, _), r in pool.items() if s == seed]
        best: dict[str, Reference] = {}
        for r in cands:
            for k in (r.geometry, "overall"):
                if k not in best or r.val_map > best[k].val_map:
                    best[k] = r
        out[seed] = best
    return out


def _method_summary(rows: list[dict[str, Any]], refs: dict[int, dict[str, Reference]]) -> dict[str, Any]:
    """One method's rows (its seeds) against the common φ*: ``(n_seeds,)`` arrays of test cross, old self, self."""
    cross = np.array([r["cross"]["map"] for r in rows])
    old = np.array([r["old_self"]["map"] for r in rows])
    new = np.array([r["self"]["map"] for r in rows])
    g = rows[0]["geometry"]
    phi_g = np.array([refs[r["seed"]][g].test_map for r in rows])
    phi_o = np.array([refs[r["seed"]]["overall"].test_map for r in rows])
    den = phi_g - old
    return {
        "space": f"{g}/{rows[0]['space']}",
        "seeds": [r["seed"] for r in rows],
        "configuration": " ".join(x for x in (rows[0]["head"], option_text(rows[0]["options"])) if x)
        + ("" if rows[0]["weight"] is None else f" λ={rows[0]['weight']:g}"),
        "abs_gain": seed_stats(cross - old),
        "p_com_common": seed_stats(p_com_common(cross, old, phi_g)),
        "p_up_common": seed_stats(p_up_common(new, phi_g)),
        "p_com_common_denominator": seed_stats(den),
        "p_com_common_overall": seed_stats(p_com_common(cross, old, phi_o)),
        "p_up_common_overall": seed_stats(p_up_common(new, phi_o)),
        "p_com_per_head": seed_stats(
            np.array([np.nan if r["p_com"]["map"] is None else r["p_com"]["map"] for r in rows])
        ),
        "p_up_per_head": seed_stats(np.array([np.nan if r["p_up"]["map"] is None else r["p_up"]["map"] for r in rows])),
        "ranked": rows[0]["method"] not in SIMPLEX,
        "reference": [
            {
                "seed": r["seed"],
                "head": refs[r["seed"]][g].head,
                "val_map": refs[r["seed"]][g].val_map,
                "test_map": refs[r["seed"]][g].test_map,
            }
            for r in rows
        ],
    }


def _paired(summaries: dict[str, dict[str, Any]], doc_rows: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """What the ranked methods are compared by (:func:`compared_by`) and each method's paired t-test of it (test
    gallery) against the best other ranked method over the same seeds (:func:`benchmarks.report_stats.paired_test`,
    the tables' test; psp / lsp are never the "best": their scores are in their own retrieval space)."""
    ranked_names = [n for n, s in summaries.items() if s["ranked"]]
    by = compared_by([summaries[n]["p_com_common_denominator"]["mean"] for n in ranked_names])
    groups: dict[str, list[Row]] = {}
    for n, s in summaries.items():
        rows = [row_from_dict(r) for r in doc_rows if r["name"] == n]
        groups[n] = [replace(r, p_com={"map": math.nan if v is None else v}) for r, v in zip(rows, s[by]["values"])]
    ranked = {n: groups[n] for n in ranked_names}
    return by, {n: paired_test(n, ranked | {n: groups[n]}) for n in groups}


def _frontier(doc: dict[str, Any], recs: list[ModelRecord | None], refs: dict[str, Reference]) -> list[dict[str, Any]]:
    """Every configuration tried at seed 0 with its validation and test P_com / P_up against the common φ* of its
    geometry (seed 0's): ``(n_configurations,)`` arrays, one dict per configuration in ``heads_tried`` order."""
    geo = {r["name"]: r["geometry"] for r in doc["rows"]}
    ok = [i for i, r in enumerate(recs) if r is not None]
    out: list[dict[str, Any]] = []
    cols = {}
    for split in ("val", "test"):
        m = {k: np.array([getattr(recs[i], split)[k]["map"] for i in ok]) for k in ("cross", "old_self", "self")}
        phi = np.array([getattr(refs[geo[doc["heads_tried"][i]["method"]]], f"{split}_map") for i in ok])
        cols[f"{split}_p_com_common"] = p_com_common(m["cross"], m["old_self"], phi)
        cols[f"{split}_p_up_common"] = p_up_common(m["self"], phi)
    at = {i: j for j, i in enumerate(ok)}
    for i, t in enumerate(doc["heads_tried"]):
        d = {k: t[k] for k in ("method", "head", "weight", "options", "val_p_com", "val_p_up", "chosen")}
        for c, v in cols.items():
            d[c] = _num(v[at[i]]) if i in at else None
        out.append(d)
    return out


def _floors(frontier: list[dict[str, Any]], run_further: set[tuple]) -> dict[str, Any]:
    """Per floor of :data:`FLOORS`, per method: the configuration the one rule picks from the common-denominator
    validation scores (:func:`~benchmarks.selection.select_configuration`), its rule and its seed-0 val / test
    P_com; ``further_seeds``: whether it is the configuration run at seeds 1–2 (else only seed 0 exists)."""
    by: dict[str, list[dict[str, Any]]] = {}
    for f in frontier:
        by.setdefault(f["method"], []).append(f)
    out: dict[str, Any] = {}
    for floor in FLOORS:
        picks = {}
        for n, cfgs in by.items():
            scored = [ScoredConfig(c["val_p_com_common"], c["val_p_up_common"]) for c in cfgs]
            i, rule = select_configuration(scored, -math.inf if floor is None else floor)
            c = cfgs[i]
            picks[n] = {
                "head": c["head"],
                "weight": c["weight"],
                "options": c["options"],
                "rule": rule,
                "val_p_com_common": c["val_p_com_common"],
                "val_p_up_common": c["val_p_up_common"],
                "test_p_com_common": c["test_p_com_common"],
                "test_p_up_common": c["test_p_up_common"],
                "committed_choice": c["chosen"],
                "further_seeds": (n, c["head"], c["weight"], json.dumps(c["options"], sort_keys=True)) in run_further,
            }
        out["none" if floor is None else f"{floor:g}"] = picks
    return out


def analyse_scenario(tables: _Tables, scenario: str) -> dict[str, Any]:
    """The ``common_reference`` block of one scenario's results.json (everything but ``provenance``)."""
    doc = tables.docs[scenario]
    seeds = sorted({r["seed"] for r in doc["rows"]})
    refs = common_references(tables.pool, seeds)
    names = list(dict.fromkeys(r["name"] for r in doc["rows"]))
    methods = {n: _method_summary([r for r in doc["rows"] if r["name"] == n], refs) for n in names}
    by, tests = _paired(methods, doc["rows"])
    for n, t in tests.items():
        methods[n]["paired_test"] = t
    frontier = _frontier(doc, tables.tried[scenario], refs[seeds[0]])
    further = {
        (r["name"], r["head"], r["weight"], json.dumps(r["options"], sort_keys=True))
        for i, r in enumerate(doc["rows"])
        if i in tables.further[scenario]
    }
    n_further = len(tables.further[scenario])
    avail = {str(s): sorted(f"{g}/{h}" for (ss, g, h) in tables.pool if ss == s) for s in seeds}  # the φ* each seed has
    return {
        "definition": (
            "P_com = (cross − old self)/(φ* self − old self), P_up = (self − φ* self)/φ* self, mAP; φ* is one model "
            "per scenario × seed × geometry: the unaligned new model with the best validation mAP among the heads "
            "tried in that geometry (overall: across geometries); old self is each row's own old model"
        ),
        "primary": PRIMARY,
        "references": {
            str(s): {k: r.as_dict() | {"seen_in": tables.seen[r.key]} for k, r in refs[s].items()} for s in seeds
        },
        "references_available": avail,
        "further_seed_records": n_further,
        "methods": methods,
        "compared_by": by,
        "frontier": frontier,
        "floors": _floors(frontier, further),
        "roles": roles(tables, scenario),
    }


def roles(tables: _Tables, scenario: str) -> dict[str, Any]:
    """Every role's training as the committed files hold it, against the profile's train criterion: the seed-0 old
    model and φ* of each head (results.json's ``base_models``), the further seeds' from their records where the
    table's rows predate roles (``further_seeds``; a table whose rows carry roles lists them itself), the ones below
    it, and the new models' range (their records' training meta; the criterion holds the roles a method is measured
    against — a new model at a large λ trades its own classifier for the alignment, so how many are below it is
    shown, not enforced)."""
    doc, batch, c = tables.docs[scenario], tables.batch_size, tables.criterion
    base = [
        {"head": head, "role": role, **training_summary(meta, batch)}
        for head, pair in doc.get("base_models", {}).items()
        for role, meta in pair.items()
    ]
    recs = [r for r in tables.tried[scenario] if r is not None] + list(tables.further[scenario].values())
    new = [training_summary(r.meta, batch) for r in recs if r.meta.get("history")]
    acc = [n["train_accuracy"] for n in new]
    below = [f"{b['role']} {b['head']}" for b in base if c is not None and not b["train_accuracy"] >= c]
    new_summary = {
        "models": len(new),
        "min_train_accuracy": min(acc) if acc else None,
        "max_train_accuracy": max(acc) if acc else None,
        "steps": sorted({int(n["steps"]) for n in new}),
        "below": sum(1 for a in acc if c is not None and not a >= c),
    }
    recorded = any(r.get("roles") for r in doc["rows"])  # the table's own section lists every row's roles, every seed
    further: list[dict[str, Any]] = []
    if not recorded:  # a table made before rows carried roles: its further seeds' parents, as their records hold them
        seen = set()
        for i, rec in sorted(tables.further[scenario].items()):
            row = doc["rows"][i]
            head = f"{row['geometry']}/{row['head']}"
            for role, name in (("old", "old"), ("ref", "reference")):
                if role in rec.roles and (head, row["seed"], name) not in seen:
                    seen.add((head, row["seed"], name))
                    further.append({"head": head, "role": name, "seed": row["seed"], **rec.roles[role]})
        below += [
            f"{f['role']} {f['head']} seed {f['seed']}"
            for f in further
            if c is not None and not f["train_accuracy"] >= c
        ]
    return {
        "criterion": c,
        "base_seed0": base,
        "further_seeds": further,
        "new": new_summary,
        "below": below,
        "every_seed_in_table": recorded,
    }


def _pooled(tables: _Tables, other: _Tables, profile: str) -> _Tables:
    """``tables`` with the φ* of ``other`` (another profile's tables on the same data, models and cache keys) in its
    pool; ConfigError in one line when one φ* key carries two different scores (a model that trained differently)."""
    pool, seen = dict(tables.pool), {k: list(v) for k, v in tables.seen.items()}
    for where, ref in other.pool.items():
        mine = pool.setdefault(where, ref)
        if mine.key == ref.key and mine != ref:
            raise ConfigError(
                f"φ* {ref.key} scores {mine.val_map:.6f} / {mine.test_map:.6f} here and {ref.val_map:.6f} / "
                f"{ref.test_map:.6f} in {profile}'s records: the same request trained a different model; compare "
                "only tables whose models are the same"
            )
        if mine.key == ref.key:
            seen.setdefault(ref.key, [])
            seen[ref.key] += [f"{profile}/{sc}" for sc in other.seen.get(ref.key, []) if f"{profile}/{sc}" not in seen]
    return replace(tables, pool=pool, seen=seen)


def analyse_profile(
    out: Path, profile: str, params_path: Path, references_from: Sequence[str] = ()
) -> dict[str, dict[str, Any]]:
    """:func:`analyse_scenario` of every method table of ``out/<profile>/``, by scenario. ``references_from``: other
    profiles whose tables share this one's data and base models (the same cache keys, e.g. rows added beside the
    equal-budget tables): their φ* join the pool the common φ* is chosen from."""
    tables = match_tables(out, profile, params_path)
    for other in references_from:
        tables = _pooled(tables, match_tables(out, other, params_path), other)
    return {sc: analyse_scenario(tables, sc) for sc in tables.docs}
