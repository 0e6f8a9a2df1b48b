"""The benchmark scenarios of docs/design.md §6 (HBCT paper §5.1) and their evaluation.

* ``ext_data``  old model on a random ``old_fraction`` (30%) of the training data
* ``ext_class`` old model on the first ``old_class_fraction`` (50%) of the classes
* ``new_arch``  same data, the new model has a different, larger backbone
* ``both``      ext_class + new_arch
* ``sequential`` classes arrive in T equal stages, the backbone switches at stage
  ``sequential_switch_at``; each model is aligned to its predecessor.

Per method the table reports, in the method's own retrieval space (Euclidean
embeddings, Lorentz embeddings, or PSP / LSP features): the old model's self
score, the new model's self and cross scores, P_up and P_com with its
denominator (docs/design.md §6). λ is selected on the validation split for methods marked
``tune`` (the best run that does not hurt the new model, as in the HBCT paper
§5.1); the test split only ever produces the reported numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from benchmarks.profile import HeadEntry, MethodEntry
from benchmarks.runner import Bench, BenchModel
from benchmarks.scenario_defs import SCENARIOS, Scenario, make_scenario
from components.data import DataManifest
from components.errors import ConfigError
from components.evaluation import DerivedMetrics
from components.evaluation.diagnostics import (
    clip_fraction,
    in_cone_fraction,
    uncertainty_seen_unseen,
    uncertainty_std,
)
from components.losses import choose_alignment
from flows.params import Params, apply_overrides

__all__ = ["SCENARIOS", "SIMPLEX", "Row", "Scenario", "TableResult", "make_scenario", "run_table"]

SIMPLEX = ("psp", "lsp")


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
    head: HeadEntry | None = None,
) -> BenchModel:
    """A method's new model in a scenario at alignment weight ``w`` and ``seed`` (trained, or from the cache), with
    ``head`` (a head of the protocol for the entry's geometry; None: the params' own)."""
    extra = _head_params(head, entry.geometry)
    return bench.train_model(
        f"{entry.name}{_head_tag(head, entry.geometry)}/λ={w:g}/seed={seed}",
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
        params={**extra, **entry.params} or None,
    )


def _head_params(head: HeadEntry | None, geometry: str) -> dict[str, Any]:
    """The params overrides ``head`` gives a model of ``geometry`` (a head applies to its own geometry only)."""
    return dict(head.params) if head is not None and head.geometry == geometry else {}


def _head_tag(head: HeadEntry | None, geometry: str) -> str:
    return f"/{head.name}" if _head_params(head, geometry) else ""


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
    space: str = "embedding",
    seconds: float | None,
    note: str = "",
) -> Row:
    self_m = bench.metrics(new, new)
    cross = bench.metrics(new, old)
    old_self = bench.metrics(old, old)
    ref_self = bench.metrics(ref, ref)
    d = DerivedMetrics.measure(new_self=self_m, cross=cross, old_self=old_self, ref_self=ref_self)
    diag: dict[str, float | None] = {}
    if entry.geometry == "lorentz" and space == "embedding":
        seen = list(old.spec.class_order)
        diag = {
            **_radius({"new": new, "old": old}),
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
        d.p_com,
        d.p_com_denominator,
        d.p_up,
        seconds,
        diag,
        note,
    )


def _radius(models: dict[str, BenchModel]) -> dict[str, float]:
    """Test-gallery radius diagnostics of Lorentz ``models`` by role: ``clip_fraction_<role>`` for every role, then
    ``uncertainty_std_<role>``."""
    out = {f"clip_fraction_{r}": clip_fraction(m.test.clipped) for r, m in models.items()}
    return out | {f"uncertainty_std_{r}": uncertainty_std(m.test.z, m.test.curvature) for r, m in models.items()}


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
    #: every (method, head) tried at seed 0: validation mAP P_com, whether it kept self, and for Lorentz models the
    #: gallery clip fraction and uncertainty std of the new model, its old model and φ* (:func:`_radius`, roles
    #: new / old / ref)
    heads: list[dict[str, Any]] = field(default_factory=list)


def run_table(bench: Bench, sc: Scenario) -> TableResult:
    s, p = bench.settings, bench.params
    seeds = s.seeds
    old_sel = bench.selection(sc.old_classes, sc.old_fraction, seed=p.data.split_seed)
    new_sel = bench.selection("all")
    geometries = sorted({m.geometry for m in s.methods})
    by_head = {
        g: {h.name: _base_models(bench, sc, old_sel, new_sel, seeds[0], h) for h in s.heads(g)} for g in geometries
    }
    bases = {g: by_head[g][s.heads(g)[0].name] for g in geometries}
    rows: list[Row] = []
    heads: list[dict[str, Any]] = []
    chosen: dict[str, tuple[float | None, BenchModel, HeadEntry]] = {}
    val_p_com: dict[str, float] = {}
    for entry in s.methods:
        old, ref = bases[entry.geometry]
        bench.log(f"[{sc.name}] {entry.name}")
        if entry.method in SIMPLEX:
            rows.append(_simplex_row(bench, entry, new_sel, old, ref, seeds[0]))
            continue
        w, model, how, head = _tuned_model(bench, sc, entry, new_sel, by_head[entry.geometry], heads)
        old, ref = by_head[entry.geometry][head.name]
        chosen[entry.name] = (w, model, head)
        val_p_com[entry.name] = _val_p_com(bench, model, old, ref)
        rows.append(_row(bench, entry, model, old, ref, seed=seeds[0], weight=w, selection=how, seconds=model.seconds))
    baselines = [m for m in s.methods if m.geometry == "euclidean" and m.method not in SIMPLEX and m.name in val_p_com]
    best = max(baselines, key=lambda m: val_p_com[m.name]).name if baselines else None
    rows += _extra_seed_rows(bench, sc, old_sel, new_sel, chosen, best)
    models = {
        g if i == 0 else f"{g}/{name}": {"old": b[0].meta, "reference": b[1].meta}
        for g, hb in by_head.items()
        for i, (name, b) in enumerate(hb.items())
    }
    return TableResult(sc, rows, best, models, heads)


def _val_p_com(bench: Bench, model: BenchModel, old: BenchModel, ref: BenchModel) -> float:
    """mAP P_com on the validation split, against the model's own old model and φ* (−inf when undefined)."""
    old_self, ref_self = bench.metrics(old, old, "val")["map"], bench.metrics(ref, ref, "val")["map"]
    den = ref_self - old_self
    return (bench.metrics(model, old, "val")["map"] - old_self) / den if den > 0 else float("-inf")


def _base_models(
    bench: Bench, sc: Scenario, old_sel: DataManifest, new_sel: DataManifest, seed: int, head: HeadEntry
) -> tuple[BenchModel, BenchModel]:
    """The old model and the independent reference φ* of ``head``'s geometry and head, for ``seed``: each seed trains
    its own old model and φ*, so the seed spread samples their variance too."""
    p, g = bench.params, head.geometry
    zeta0, zeta_n = p.geometry.zeta0, p.geometry.zeta0 + p.geometry.delta_zeta
    tag = f"{g}{_head_tag(head, g)}/seed={seed}"
    bench.log(f"[{sc.name}] base models, {tag}")
    common: dict[str, Any] = dict(geometry=g, epochs=sc.epochs, seed=seed, params=_head_params(head, g) or None)
    old = bench.train_model(f"old/{tag}", old_sel, arch=sc.old_arch, zeta=zeta0, generation=0, **common)
    ref = bench.train_model(f"reference/{tag}", new_sel, arch=sc.new_arch, zeta=zeta_n, role="reference", **common)
    return old, ref


def _simplex_row(
    bench: Bench, entry: MethodEntry, new_sel: DataManifest, old: BenchModel, ref: BenchModel, seed: int
) -> Row:
    """A training-free PSP / LSP method's row: φ* in the simplex space, or "not applicable" with the reason."""
    kind = entry.method
    try:
        choose_alignment(kind).check_lineage(new_sel.class_order, replace(old.spec, features=kind))
    except ConfigError as err:
        return _row(
            bench,
            entry,
            ref,
            old,
            ref,
            seed=seed,
            weight=None,
            selection="not applicable",
            space=kind,
            seconds=None,
            note=str(err),
        )
    note = "training-free: the new model is φ* itself, so P_up = 0 by construction in this space"
    return _row(
        bench,
        entry,
        ref.view(kind),
        old.view(kind),
        ref.view(kind),
        seed=seed,
        weight=None,
        selection="training-free",
        space=kind,
        seconds=0.0,
        note=note,
    )


def _tuned_model(
    bench: Bench,
    sc: Scenario,
    entry: MethodEntry,
    new_sel: DataManifest,
    by_head: dict[str, tuple[BenchModel, BenchModel]],
    record: list[dict[str, Any]],
) -> tuple[float, BenchModel, str, HeadEntry]:
    """A trained method's seed-0 model: ``(λ, model, how λ and the head were chosen, head)``.

    Per head of the entry's geometry (``euclidean_heads`` / ``lorentz_heads``, each with its own old model and φ*:
    ``by_head``), λ is chosen by :func:`_select`; across heads, the one with the best validation mAP P_com among
    those whose choice kept validation self mAP (else the best validation self mAP). Each head tried is appended
    to ``record``."""
    s, p = bench.settings, bench.params
    weights = s.tune_weights if entry.tune else [entry.weight if entry.weight is not None else p.alignment.weight]
    tried = []
    for head in s.heads(entry.geometry):
        old, ref = by_head[head.name]
        cands = [(w, _train_entry(bench, sc, entry, new_sel, p, w, s.seeds[0], old, ref, head)) for w in weights]
        w, m, how = _select(bench, cands, old, ref)
        kept = bench.metrics(m, m, "val")["map"] >= s.tune_self_tolerance * bench.metrics(ref, ref, "val")["map"]
        tried.append((head, w, m, how, kept, _val_p_com(bench, m, old, ref), bench.metrics(m, m, "val")["map"]))
        record.append({"method": entry.name, "head": head.name, "weight": w, "val_p_com": tried[-1][5], "kept": kept})
        if entry.geometry == "lorentz":
            record[-1] |= _radius({"new": m, "old": old, "ref": ref})
    if len(tried) == 1:
        head, w, m, how = tried[0][:4]
        return w, m, how, head
    kept = [t for t in tried if t[4]]
    best = max(kept, key=lambda t: t[5]) if kept else max(tried, key=lambda t: t[6])
    scores = ", ".join(f"{t[0].name}: val mAP P_com {t[5]:.3f}{'' if t[4] else ' (hurts self)'}" for t in tried)
    return best[1], best[2], f"head {best[0].name} ({scores}); {best[3]}", best[0]


def _extra_seed_rows(
    bench: Bench,
    sc: Scenario,
    old_sel: DataManifest,
    new_sel: DataManifest,
    chosen: dict[str, tuple[float | None, BenchModel, HeadEntry]],
    best: str | None,
) -> list[Row]:
    """Rows of the further seeds of ``extra_seed_methods`` (``best_baseline``: ``best``), at their seed-0 λ; each
    seed with its own old model and φ*."""
    s = bench.settings
    extra = {best if n == "best_baseline" else n for n in s.extra_seed_methods} - {None}
    rows: list[Row] = []
    for entry in s.methods:
        if entry.name not in extra or entry.name not in chosen:
            continue
        w, _, head = chosen[entry.name]
        for seed in s.seeds[1:]:
            old, ref = _base_models(bench, sc, old_sel, new_sel, seed, head)
            bench.log(f"[{sc.name}] {entry.name} seed {seed}")
            m = _train_entry(bench, sc, entry, new_sel, bench.params, w, seed, old, ref, head)
            rows.append(
                _row(bench, entry, m, old, ref, seed=seed, weight=w, selection="λ from seed 0", seconds=m.seconds)
            )
    return rows
