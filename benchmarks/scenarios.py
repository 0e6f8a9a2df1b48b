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

from dataclasses import dataclass, field
from typing import Any

from benchmarks.profile import BenchSettings, HeadEntry, MethodEntry
from benchmarks.rows import Row, radius_diagnostics, simplex_row, table_row
from benchmarks.runner import Bench, BenchModel, ModelRequest
from benchmarks.scenario_defs import SCENARIOS, Scenario, make_scenario
from components.data import DataManifest
from flows.params import Params, apply_overrides

__all__ = ["SCENARIOS", "SIMPLEX", "Row", "Scenario", "TableResult", "make_scenario", "run_table"]

SIMPLEX = ("psp", "lsp")

#: a trained method's seed-0 choice: (λ, model, how λ and the head were chosen, head)
Choice = tuple[float, BenchModel, str, HeadEntry]


def _entry_zeta(p: Any, entry: MethodEntry) -> float:
    """ζ of a method's new model, ζ₀ + Δζ, read from the same params the model trains with (the entry's
    overrides applied: the ζ ablations set ``geometry.delta_zeta``)."""
    g = (apply_overrides(p, dict(entry.params)) if entry.params else p).geometry
    return g.zeta0 + g.delta_zeta


def train_entry(
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
        ModelRequest(
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
        ),
    )


def _head_params(head: HeadEntry | None, geometry: str) -> dict[str, Any]:
    """The params overrides ``head`` gives a model of ``geometry`` (a head applies to its own geometry only)."""
    return dict(head.params) if head is not None and head.geometry == geometry else {}


def _head_tag(head: HeadEntry | None, geometry: str) -> str:
    return f"/{head.name}" if _head_params(head, geometry) else ""


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
    s = bench.settings
    seeds = s.seeds
    old_sel, new_sel = selections(bench, sc)
    by_head = seed0_base_models(bench, sc, old_sel, new_sel)
    bases = {g: hb[s.heads(g)[0].name] for g, hb in by_head.items()}
    chosen, val_p_com, heads = seed0_choices(bench, sc, new_sel, by_head)
    rows: list[Row] = []
    for entry in s.methods:
        old, ref = bases[entry.geometry]
        if entry.method in SIMPLEX:
            rows.append(simplex_row(bench, entry, new_sel, old, ref, seeds[0]))
            continue
        w, model, how, head = chosen[entry.name]
        old, ref = by_head[entry.geometry][head.name]
        rows.append(
            table_row(bench, entry, model, old, ref, seed=seeds[0], weight=w, selection=how, seconds=model.seconds)
        )
    best = best_baseline(bench, val_p_com)
    rows += _extra_seed_rows(bench, sc, old_sel, new_sel, {n: (c[0], c[3]) for n, c in chosen.items()}, best)
    models = {
        g if i == 0 else f"{g}/{name}": {"old": b[0].meta, "reference": b[1].meta}
        for g, hb in by_head.items()
        for i, (name, b) in enumerate(hb.items())
    }
    return TableResult(sc, rows, best, models, heads)


def selections(bench: Bench, sc: Scenario) -> tuple[DataManifest, DataManifest]:
    """The old model's training data in scenario ``sc`` and the new models' (all classes)."""
    return bench.selection(sc.old_classes, sc.old_fraction, seed=bench.params.data.split_seed), bench.selection("all")


def seed0_base_models(
    bench: Bench, sc: Scenario, old_sel: DataManifest, new_sel: DataManifest
) -> dict[str, dict[str, tuple[BenchModel, BenchModel]]]:
    """Seed 0's old model and φ* of every head of every geometry the methods use: ``{geometry: {head: (old, φ*)}}``."""
    s = bench.settings
    geometries = sorted({m.geometry for m in s.methods})
    return {
        g: {h.name: base_models(bench, sc, old_sel, new_sel, s.seeds[0], h) for h in s.heads(g)} for g in geometries
    }


def seed0_choices(
    bench: Bench, sc: Scenario, new_sel: DataManifest, by_head: dict[str, dict[str, tuple[BenchModel, BenchModel]]]
) -> tuple[dict[str, Choice], dict[str, float], list[dict[str, Any]]]:
    """Every trained method's seed-0 model, λ and head (:func:`_tuned_model`), its validation mAP P_com, and the
    heads tried: ``(chosen, val_p_com, heads)``."""
    chosen: dict[str, Choice] = {}
    val_p_com: dict[str, float] = {}
    heads: list[dict[str, Any]] = []
    for entry in bench.settings.methods:
        if entry.method in SIMPLEX:
            continue
        bench.log(f"[{sc.name}] {entry.name}")
        chosen[entry.name] = _tuned_model(bench, sc, entry, new_sel, by_head[entry.geometry], heads)
        _, model, _, head = chosen[entry.name]
        val_p_com[entry.name] = _val_p_com(bench, model, *by_head[entry.geometry][head.name])
    return chosen, val_p_com, heads


def best_baseline(bench: Bench, val_p_com: dict[str, float]) -> str | None:
    """The tuned Euclidean method with the best validation mAP P_com (the ``best_baseline`` of the extra seeds)."""
    s = bench.settings
    baselines = [m for m in s.methods if m.geometry == "euclidean" and m.method not in SIMPLEX and m.name in val_p_com]
    return max(baselines, key=lambda m: val_p_com[m.name]).name if baselines else None


def extra_seed_plan(
    settings: BenchSettings, chosen: dict[str, tuple[float, HeadEntry]], best: str | None
) -> list[tuple[MethodEntry, float, HeadEntry, int]]:
    """The further-seed models of ``extra_seed_methods`` (``best_baseline``: ``best``) as ``(entry, λ, head, seed)``,
    at the λ and head ``chosen`` at seed 0 (an entry not in ``chosen`` has none)."""
    extra = {best if n == "best_baseline" else n for n in settings.extra_seed_methods} - {None}
    return [
        (entry, *chosen[entry.name], seed)
        for entry in settings.methods
        if entry.name in extra and entry.name in chosen
        for seed in settings.seeds[1:]
    ]


def _val_p_com(bench: Bench, model: BenchModel, old: BenchModel, ref: BenchModel) -> float:
    """mAP P_com on the validation split, against the model's own old model and φ* (−inf when undefined)."""
    old_self, ref_self = bench.metrics(old, old, "val")["map"], bench.metrics(ref, ref, "val")["map"]
    den = ref_self - old_self
    return (bench.metrics(model, old, "val")["map"] - old_self) / den if den > 0 else float("-inf")


def base_models(
    bench: Bench, sc: Scenario, old_sel: DataManifest, new_sel: DataManifest, seed: int, head: HeadEntry
) -> tuple[BenchModel, BenchModel]:
    """The old model and the independent reference φ* of ``head``'s geometry and head, for ``seed``: each seed trains
    its own old model and φ*, so the seed spread samples their variance too."""
    p, g = bench.params, head.geometry
    zeta0, zeta_n = p.geometry.zeta0, p.geometry.zeta0 + p.geometry.delta_zeta
    tag = f"{g}{_head_tag(head, g)}/seed={seed}"
    bench.log(f"[{sc.name}] base models, {tag}")
    common: dict[str, Any] = dict(geometry=g, epochs=sc.epochs, seed=seed, params=_head_params(head, g) or None)
    old = bench.train_model(f"old/{tag}", ModelRequest(old_sel, arch=sc.old_arch, zeta=zeta0, generation=0, **common))
    ref = bench.train_model(
        f"reference/{tag}", ModelRequest(new_sel, arch=sc.new_arch, zeta=zeta_n, role="reference", **common)
    )
    return old, ref


def entry_weights(bench: Bench, entry: MethodEntry) -> list[float]:
    """The λ values a method is trained with at seed 0: the tuning grid, or its one fixed λ."""
    fixed = entry.weight if entry.weight is not None else bench.params.alignment.weight
    return list(bench.settings.tune_weights) if entry.tune else [fixed]


def _tuned_model(
    bench: Bench,
    sc: Scenario,
    entry: MethodEntry,
    new_sel: DataManifest,
    by_head: dict[str, tuple[BenchModel, BenchModel]],
    record: list[dict[str, Any]],
) -> Choice:
    """A trained method's seed-0 model: ``(λ, model, how λ and the head were chosen, head)``.

    Per head of the entry's geometry (``euclidean_heads`` / ``lorentz_heads``, each with its own old model and φ*:
    ``by_head``), λ is chosen by :func:`_select`; across heads, the one with the best validation mAP P_com among
    those whose choice kept validation self mAP (else the best validation self mAP). Each head tried is appended
    to ``record``."""
    s, p = bench.settings, bench.params
    weights = entry_weights(bench, entry)
    tried = []
    for head in s.heads(entry.geometry):
        old, ref = by_head[head.name]
        cands = [(w, train_entry(bench, sc, entry, new_sel, p, w, s.seeds[0], old, ref, head)) for w in weights]
        w, m, how = _select(bench, cands, old, ref)
        kept = bench.metrics(m, m, "val")["map"] >= s.tune_self_tolerance * bench.metrics(ref, ref, "val")["map"]
        tried.append((head, w, m, how, kept, _val_p_com(bench, m, old, ref), bench.metrics(m, m, "val")["map"]))
        record.append({"method": entry.name, "head": head.name, "weight": w, "val_p_com": tried[-1][5], "kept": kept})
        if entry.geometry == "lorentz":
            record[-1] |= radius_diagnostics({"new": m, "old": old, "ref": ref})
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
    chosen: dict[str, tuple[float, HeadEntry]],
    best: str | None,
) -> list[Row]:
    """Rows of the further seeds of ``extra_seed_methods`` (:func:`extra_seed_plan`); each seed with its own old
    model and φ*."""
    rows: list[Row] = []
    for entry, w, head, seed in extra_seed_plan(bench.settings, chosen, best):
        old, ref = base_models(bench, sc, old_sel, new_sel, seed, head)
        bench.log(f"[{sc.name}] {entry.name} seed {seed}")
        m = train_entry(bench, sc, entry, new_sel, bench.params, w, seed, old, ref, head)
        rows.append(
            table_row(bench, entry, m, old, ref, seed=seed, weight=w, selection="λ from seed 0", seconds=m.seconds)
        )
    return rows
