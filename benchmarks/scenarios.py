"""The benchmark scenarios of design §6 (HBCT paper §5.1) and their evaluation.

* ``ext_data``  old model on a random ``old_fraction`` (30%) of the training data
* ``ext_class`` old model on the first ``old_class_fraction`` (50%) of the classes
* ``new_arch``  same data, the new model has a different, larger backbone
* ``both``      ext_class + new_arch
* ``sequential`` classes arrive in T equal stages, the backbone switches at stage
  ``sequential_switch_at``; each model is aligned to its predecessor.

Per method the table reports, in the method's own retrieval space (Euclidean
embeddings, Lorentz embeddings, or PSP / LSP features): the old model's self
score, the new model's self and cross scores, P_up and P_com with its
denominator (design §6). λ is selected on the validation split for methods marked
``tune`` (the best run that does not hurt the new model, as in the HBCT paper
§5.1); the test split only ever produces the reported numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from benchmarks.profile import Arch, MethodEntry
from benchmarks.runner import Bench, BenchModel
from components.data import DataManifest
from components.errors import ConfigError
from components.evaluation import COMPAT_METRICS, compat_summary, p_com, p_up
from components.evaluation.diagnostics import (
    clip_fraction,
    in_cone_fraction,
    uncertainty_seen_unseen,
)
from components.losses import choose_alignment
from flows.params import Params, apply_overrides

__all__ = ["SCENARIOS", "Row", "Scenario", "make_scenario", "run_sequential", "run_table"]

SCENARIOS = ("ext_data", "ext_class", "new_arch", "both", "sequential")
SIMPLEX = ("psp", "lsp")


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    old_classes: list[int] | str
    old_fraction: float
    old_arch: Arch
    new_arch: Arch
    epochs: int | None


def make_scenario(bench: Bench, name: str) -> Scenario:
    s = bench.settings
    c = bench.num_classes
    first = list(range(max(1, round(c * s.old_class_fraction))))
    epochs = s.scenario_epochs.get(name)
    if name == "ext_data":
        return Scenario(
            name,
            f"old: random {s.old_fraction:.0%} of the training data; new: all of it",
            "all",
            s.old_fraction,
            s.old_arch,
            s.old_arch,
            epochs,
        )
    if name == "ext_class":
        return Scenario(
            name,
            f"old: first {len(first)} of {c} classes; new: all classes",
            first,
            1.0,
            s.old_arch,
            s.old_arch,
            epochs,
        )
    if name == "new_arch":
        return Scenario(
            name,
            f"same data; old {s.old_arch.backbone}, new {s.new_arch.backbone} {s.new_arch.backbone_kwargs}",
            "all",
            1.0,
            s.old_arch,
            s.new_arch,
            epochs,
        )
    if name == "both":
        return Scenario(
            name,
            f"old: first {len(first)} of {c} classes on {s.old_arch.backbone}; new: all classes on {s.new_arch.backbone}",
            first,
            1.0,
            s.old_arch,
            s.new_arch,
            epochs,
        )
    raise ConfigError(f"unknown scenario {name!r}; use one of {', '.join(SCENARIOS)}")


@dataclass
class Row:
    """One method's results in one scenario (one seed)."""

    name: str
    method: str
    geometry: str
    space: str
    seed: int
    weight: float | None
    selection: str
    self_: dict[str, float]
    cross: dict[str, float]
    old_self: dict[str, float]
    ref_self: dict[str, float]
    p_com: dict[str, float | None]
    p_com_den: dict[str, float]
    p_up: dict[str, float | None]
    seconds: float | None
    diagnostics: dict[str, float | None] = field(default_factory=dict)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["self"] = d.pop("self_")
        return d


def _entry_zeta(p: Any, entry: MethodEntry) -> float:
    """ζ of a method's new model, ζ₀ + Δζ, read from the same params the model trains with (the entry's
    overrides applied: the ζ ablations set ``geometry.delta_zeta``)."""
    g = (apply_overrides(p, dict(entry.params)) if entry.params else p).geometry
    return g.zeta0 + g.delta_zeta


def _train_entry(
    bench: Bench,
    sc: Scenario,
    entry: MethodEntry,
    sel: DataManifest,
    p: Params,
    w: float,
    seed: int,
    old: BenchModel,
    ref: BenchModel,
) -> BenchModel:
    """A method's new model in a scenario at alignment weight ``w`` and ``seed`` (trained, or from the cache)."""
    return bench.train_model(
        f"{entry.name}/λ={w:g}/seed={seed}",
        sel,
        geometry=entry.geometry,
        arch=sc.new_arch,
        method=entry.method,
        options=entry.options,
        weight=w,
        seed=seed,
        zeta=_entry_zeta(p, entry),
        old=old,
        reference=ref,
        epochs=sc.epochs,
        params=entry.params,
    )


def _row(
    bench: Bench,
    entry: MethodEntry,
    new: BenchModel,
    old: BenchModel,
    ref: BenchModel,
    *,
    seed: int,
    weight: float | None,
    selection: str,
    space: str,
    seconds: float | None,
    note: str = "",
) -> Row:
    self_m = bench.metrics(new, new)
    cross = bench.metrics(new, old)
    old_self = bench.metrics(old, old)
    ref_self = bench.metrics(ref, ref)
    pc, den, pu = {}, {}, {}
    for k in COMPAT_METRICS:
        pc[k], den[k] = p_com(cross[k], old_self[k], ref_self[k])
        pu[k] = p_up(self_m[k], ref_self[k])
    diag: dict[str, float | None] = {}
    if entry.geometry == "lorentz" and space == "embedding":
        seen = list(old.spec.class_order)
        diag = {
            "clip_fraction_new": clip_fraction(new.test.clipped),
            "clip_fraction_old": clip_fraction(old.test.clipped),
            "in_cone_fraction": in_cone_fraction(
                old.test.z, new.test.z, old.test.curvature, entry.options.get("epsilon", 0.1)
            ),
        }
        diag["uncertainty_old_seen"], diag["uncertainty_old_unseen"] = uncertainty_seen_unseen(
            old.test.z, old.test.labels, seen, old.test.curvature
        )
        diag["uncertainty_new_seen"], diag["uncertainty_new_unseen"] = uncertainty_seen_unseen(
            new.test.z, new.test.labels, seen, new.test.curvature
        )
    return Row(
        entry.name,
        entry.method,
        entry.geometry,
        space,
        seed,
        weight,
        selection,
        self_m,
        cross,
        old_self,
        ref_self,
        pc,
        den,
        pu,
        seconds,
        diag,
        note,
    )


def _select(
    bench: Bench, candidates: list[tuple[float, BenchModel]], old: BenchModel, ref: BenchModel
) -> tuple[float, BenchModel, str]:
    """The best run that does not hurt the new model, on the VALIDATION split (HBCT paper §5.1)."""
    if len(candidates) == 1:
        w, m = candidates[0]
        return w, m, "fixed"
    tol = bench.settings.tune_self_tolerance
    ref_self = bench.metrics(ref, ref, "val")["map"]
    scored = []
    for w, m in candidates:
        scored.append((w, m, bench.metrics(m, old, "val")["map"], bench.metrics(m, m, "val")["map"]))
    ok = [t for t in scored if t[3] >= tol * ref_self]
    pool, rule = (
        (ok, f"max val cross mAP with val self ≥ {tol:g}×φ*")
        if ok
        else (scored, "no λ kept val self; max val self mAP")
    )
    best = max(pool, key=lambda t: t[2] if ok else t[3])
    detail = ", ".join(f"λ={w:g}: cross {c:.3f} self {s:.3f}" for w, _, c, s in scored)
    return best[0], best[1], f"{rule} (φ* val self {ref_self:.3f}; {detail})"


@dataclass
class TableResult:
    scenario: Scenario
    rows: list[Row]
    best_baseline: str | None
    models: dict[str, dict[str, Any]]


def run_table(bench: Bench, sc: Scenario) -> TableResult:
    s, p = bench.settings, bench.params
    seeds = s.seeds
    old_sel = bench.selection(sc.old_classes, sc.old_fraction, seed=p.data.split_seed)
    new_sel = bench.selection("all")
    zeta0, zeta_n = p.geometry.zeta0, p.geometry.zeta0 + p.geometry.delta_zeta
    bases: dict[str, tuple[BenchModel, BenchModel]] = {}
    for g in sorted({m.geometry for m in s.methods}):
        bench.log(f"[{sc.name}] base models, {g}")
        old = bench.train_model(f"old/{g}", old_sel, geometry=g, arch=sc.old_arch, zeta=zeta0, epochs=sc.epochs)
        ref = bench.train_model(f"reference/{g}", new_sel, geometry=g, arch=sc.new_arch, zeta=zeta_n, epochs=sc.epochs)
        bases[g] = (old, ref)
    rows: list[Row] = []
    chosen: dict[str, tuple[float | None, BenchModel]] = {}
    val_cross: dict[str, float] = {}
    for entry in s.methods:
        old, ref = bases[entry.geometry]
        bench.log(f"[{sc.name}] {entry.name}")
        if entry.method in SIMPLEX:
            kind = entry.method
            try:
                choose_alignment(kind).check_lineage(new_sel.class_order, replace(old.spec, features=kind))
            except ConfigError as err:
                rows.append(
                    _row(
                        bench,
                        entry,
                        ref,
                        old,
                        ref,
                        seed=seeds[0],
                        weight=None,
                        selection="not applicable",
                        space=kind,
                        seconds=None,
                        note=str(err),
                    )
                )
                continue
            note = "training-free: the new model is φ* itself, so P_up = 0 by construction in this space"
            rows.append(
                _row(
                    bench,
                    entry,
                    ref.view(kind),
                    old.view(kind),
                    ref.view(kind),
                    seed=seeds[0],
                    weight=None,
                    selection="training-free",
                    space=kind,
                    seconds=0.0,
                    note=note,
                )
            )
            continue
        weights = s.tune_weights if entry.tune else [entry.weight if entry.weight is not None else p.alignment.weight]
        cands = [(w, _train_entry(bench, sc, entry, new_sel, p, w, seeds[0], old, ref)) for w in weights]
        w, model, how = _select(bench, cands, old, ref)
        chosen[entry.name] = (w, model)
        val_cross[entry.name] = bench.metrics(model, old, "val")["map"]
        rows.append(
            _row(
                bench,
                entry,
                model,
                old,
                ref,
                seed=seeds[0],
                weight=w,
                selection=how,
                space="embedding",
                seconds=model.seconds,
            )
        )
    baselines = [m for m in s.methods if m.geometry == "euclidean" and m.method not in SIMPLEX and m.name in val_cross]
    best = max(baselines, key=lambda m: val_cross[m.name]).name if baselines else None
    extra = {best if n == "best_baseline" else n for n in s.extra_seed_methods} - {None}
    for entry in s.methods:
        if entry.name not in extra or entry.name not in chosen:
            continue
        w, _ = chosen[entry.name]
        old, ref = bases[entry.geometry]
        for seed in seeds[1:]:
            bench.log(f"[{sc.name}] {entry.name} seed {seed}")
            m = _train_entry(bench, sc, entry, new_sel, p, w, seed, old, ref)
            rows.append(
                _row(
                    bench,
                    entry,
                    m,
                    old,
                    ref,
                    seed=seed,
                    weight=w,
                    selection="λ from seed 0",
                    space="embedding",
                    seconds=m.seconds,
                )
            )
    models = {g: {"old": b[0].meta, "reference": b[1].meta} for g, b in bases.items()}
    return TableResult(sc, rows, best, models)


@dataclass
class SequentialResult:
    stages: list[list[int]]
    archs: list[str]
    matrices: dict[str, dict[str, list[list[float | None]]]]
    summary: dict[str, dict[str, dict[str, float | None]]]
    seconds: dict[str, float]


def run_sequential(bench: Bench) -> SequentialResult:
    """Compatibility matrices C[t][k] = M(φ_t, φ_k), k ≤ t, and AC / AA / ACA per method."""
    s, p = bench.settings, bench.params
    t_stages, switch = s.sequential_stages, s.sequential_switch_at
    c = bench.num_classes
    stages = [list(range(round((t + 1) * c / t_stages))) for t in range(t_stages)]
    archs = [s.old_arch if t < switch else s.new_arch for t in range(t_stages)]
    epochs = s.scenario_epochs.get("sequential")
    entries = {m.name: m for m in s.methods}
    names = s.sequential_methods or ["independent"] + [m.name for m in s.methods]
    unknown = [n for n in names if n != "independent" and n not in entries]
    if unknown:
        raise ConfigError(f"sequential_methods {unknown} are not in the profile's methods; add them there first")
    zeta = [p.geometry.zeta0 + t * p.geometry.delta_zeta for t in range(t_stages)]
    geoms = {"euclidean"} | {entries[n].geometry for n in names if n in entries}
    indep: dict[str, list[BenchModel]] = {}
    for g in sorted(geoms):
        indep[g] = [
            bench.train_model(
                f"seq/independent/{g}/t{t}",
                bench.selection(stages[t]),
                geometry=g,
                arch=archs[t],
                zeta=zeta[t],
                epochs=epochs,
            )
            for t in range(t_stages)
        ]
    chains: dict[str, list[BenchModel]] = {}
    seconds: dict[str, float] = {}
    for name in names:
        bench.log(f"[sequential] {name}")
        if name == "independent":
            chains[name] = indep["euclidean"]
            seconds[name] = sum(m.seconds for m in indep["euclidean"])
            continue
        e = entries[name]
        if e.method in SIMPLEX:
            chains[name] = [m.view(e.method) for m in indep["euclidean"]]
            seconds[name] = 0.0
            continue
        chain = [indep[e.geometry][0]]
        for t in range(1, t_stages):
            chain.append(
                bench.train_model(
                    f"seq/{name}/t{t}",
                    bench.selection(stages[t]),
                    geometry=e.geometry,
                    arch=archs[t],
                    method=e.method,
                    options=e.options,
                    weight=e.weight,
                    seed=0,
                    zeta=zeta[t],
                    old=chain[t - 1],
                    reference=indep[e.geometry][t],
                    epochs=epochs,
                )
            )
        chains[name] = chain
        seconds[name] = sum(m.seconds for m in chain[1:])
    matrices: dict[str, dict[str, list[list[float | None]]]] = {}
    summary: dict[str, dict[str, dict[str, float | None]]] = {}
    for name, chain in chains.items():
        matrices[name], summary[name] = {}, {}
        for k in COMPAT_METRICS:
            mat = np.full((t_stages, t_stages), np.nan)
            for t in range(t_stages):
                for j in range(t + 1):
                    why = chain[t].test.incompatibility(chain[j].test)
                    mat[t, j] = np.nan if why else bench.metrics(chain[t], chain[j])[k]
            matrices[name][k] = [[None if np.isnan(v) else float(v) for v in row] for row in mat]
            try:
                summary[name][k] = compat_summary(mat)
            except ValueError:  # some pair cannot be compared (e.g. a model that cannot query an older gallery)
                summary[name][k] = {"ac": None, "aa": None, "aca": None, "aca_given_compatible": None}
    return SequentialResult(stages, [f"{a.backbone} {a.backbone_kwargs}" for a in archs], matrices, summary, seconds)
