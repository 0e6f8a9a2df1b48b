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
denominator (docs/design.md §6). Each trained method's configuration — head × λ (``tune``) × its own
options ``grid`` (a temperature) — is chosen at seed 0 on the validation split by the one rule of
:mod:`benchmarks.selection`; the test split only ever produces the reported numbers.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any

from benchmarks.profile import BenchSettings, HeadEntry, MethodEntry
from benchmarks.records import ModelRecord, parents_digest
from benchmarks.rows import Row, option_text, simplex_row, table_row
from benchmarks.runner import Bench, BenchModel, ModelRequest
from benchmarks.scenario_defs import SCENARIOS, Scenario, make_scenario
from benchmarks.selection import Scored, select_configuration
from components.data import DataManifest
from components.evaluation import p_com, p_up
from components.geometry import Euclidean, create_space
from components.training import TrainingDivergedError
from flows.params import Params, apply_overrides

__all__ = ["SCENARIOS", "SIMPLEX", "Chosen", "Config", "Row", "Scenario", "TableResult", "make_scenario", "run_table"]

SIMPLEX = ("psp", "lsp")


@dataclass(frozen=True)
class Config:
    """One configuration of a trained method: its head, λ and the point of its options ``grid``."""

    head: HeadEntry
    weight: float
    options: dict[str, Any] = field(default_factory=dict)

    def tag(self, geometry: str) -> str:
        """The label part of a model of this configuration, before ``/λ=…`` (the head's name, the grid's values)."""
        return _head_tag(self.head, geometry) + "".join(f"/{option_text({k: v})}" for k, v in self.options.items())


@dataclass
class Chosen:
    """A trained method's seed-0 choice: its configuration, its model's evaluation record, the rule that chose it,
    the grid's size."""

    config: Config
    record: ModelRecord
    rule: str
    configurations: int
    detail: str


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
    cfg: Config,
    seed: int,
    old: BenchModel,
    ref: BenchModel,
) -> ModelRecord:
    """The evaluation record of a method's new model in a scenario in configuration ``cfg`` (its head: one of the
    protocol's for the entry's geometry) at ``seed``: kept, or the model trained (or loaded from the cache) and
    measured against ``old`` and φ* ``ref`` (:meth:`~benchmarks.runner.Bench.record`)."""
    extra = _head_params(cfg.head, entry.geometry)
    return bench.record(
        f"{entry.name}{cfg.tag(entry.geometry)}/λ={cfg.weight:g}/seed={seed}",
        ModelRequest(
            sel,
            geometry=entry.geometry,
            arch=sc.new_arch,
            method=entry.method,
            options={**entry.options, **cfg.options},
            weight=cfg.weight,
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


def entry_configs(bench: Bench, entry: MethodEntry) -> list[Config]:
    """Every configuration a trained method is tried with at seed 0: each head of its geometry (those it names, when it
    names some) × each point of its options grid × each λ (the tuning grid, or its one fixed λ), in that order."""
    keys = list(entry.grid)
    points = [dict(zip(keys, vals)) for vals in itertools.product(*(entry.grid[k] for k in keys))]
    return [
        Config(head, w, point)
        for head in bench.settings.heads(entry.geometry)
        if not entry.heads or head.name in entry.heads
        for point in points
        for w in entry_weights(bench, entry)
    ]


def validation_scores(rec: ModelRecord) -> dict[str, float | None]:
    """mAP P_com (None unless φ* beats the old model), its denominator and mAP P_up on the validation split, against
    the model's own old model and φ* (from its evaluation record)."""
    val = rec.val
    old_self, ref_self = val["old_self"]["map"], val["ref_self"]["map"]
    pc, den = p_com(val["cross"]["map"], old_self, ref_self)
    return {"val_p_com": pc if den > 0 else None, "val_p_com_den": den, "val_p_up": p_up(val["self"]["map"], ref_self)}


@dataclass
class TableResult:
    scenario: Scenario
    rows: list[Row]
    best_baseline: str | None
    models: dict[str, dict[str, Any]]
    #: every configuration tried at seed 0: method, head, λ, options, validation mAP P_com (and its denominator) and
    #: P_up, whether it was chosen, and for Lorentz models the test-gallery radius diagnostics of the new model, its
    #: old model and φ* (:meth:`ModelRecord.radius_diagnostics`, roles new / old / ref)
    heads: list[dict[str, Any]] = field(default_factory=list)


def run_table(bench: Bench, sc: Scenario) -> TableResult:
    s = bench.settings
    seeds = s.seeds
    old_sel, new_sel = selections(bench, sc)
    by_head = seed0_base_models(bench, sc, old_sel, new_sel)
    bases = {g: hb[s.heads(g)[0].name] for g, hb in by_head.items()}
    chosen, val_p_com, tried = seed0_choices(bench, sc, new_sel, by_head)
    rows: list[Row] = []
    for entry in s.methods:
        old, ref = bases[entry.geometry]
        if entry.method in SIMPLEX:
            rows.append(simplex_row(bench, entry, new_sel, old, ref, seeds[0]))
            continue
        c = chosen[entry.name]
        old, ref = by_head[entry.geometry][c.config.head.name]
        rows.append(_row(bench, entry, c, c.record, old, ref, seeds[0], c.detail))
    best = best_baseline(bench, val_p_com)
    rows += _extra_seed_rows(bench, sc, old_sel, new_sel, chosen, best)
    models = {
        g if i == 0 else f"{g}/{name}": {"old": b[0].meta, "reference": b[1].meta}
        for g, hb in by_head.items()
        for i, (name, b) in enumerate(hb.items())
    }
    return TableResult(sc, rows, best, models, tried)


def _row(
    bench: Bench,
    entry: MethodEntry,
    c: Chosen,
    rec: ModelRecord,
    old: BenchModel,
    ref: BenchModel,
    seed: int,
    detail: str,
) -> Row:
    """A trained method's row at ``seed``, in its chosen configuration ``c``, from its model's record (measured
    against ``old`` and φ* ``ref``; the note says when their embeddings are no longer the ones it was measured
    against: trained again since, on another machine or torch)."""
    note = ""
    if rec.parents_digest != parents_digest(old, ref):
        note = (
            "measured against its old model and φ* as first trained (record " + rec.parents_digest + "); they were "
            "trained again since and their test embeddings differ in the last bits"
        )
    return table_row(
        entry,
        rec,
        seed=seed,
        weight=c.config.weight,
        selection=detail,
        seconds=rec.seconds,
        note=note,
        head=c.config.head.name,
        options=dict(c.config.options),
        configurations=c.configurations,
        selection_rule=c.rule,
    )


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
) -> tuple[dict[str, Chosen], dict[str, float], list[dict[str, Any]]]:
    """Every trained method's seed-0 choice (:func:`_choose`), its validation mAP P_com (−inf where undefined), and
    every configuration tried: ``(chosen, val_p_com, tried)``."""
    chosen: dict[str, Chosen] = {}
    val_p_com: dict[str, float] = {}
    tried: list[dict[str, Any]] = []
    for entry in bench.settings.methods:
        if entry.method in SIMPLEX:
            continue
        bench.log(f"[{sc.name}] {entry.name}")
        chosen[entry.name], score = _choose(bench, sc, entry, new_sel, by_head[entry.geometry], tried)
        val_p_com[entry.name] = float("-inf") if score is None else score
    return chosen, val_p_com, tried


def best_baseline(bench: Bench, val_p_com: dict[str, float]) -> str | None:
    """The tuned Euclidean method with the best validation mAP P_com (the ``best_baseline`` of the extra seeds)."""
    s = bench.settings
    baselines = [
        m for m in s.methods if m.geometry == Euclidean.name and m.method not in SIMPLEX and m.name in val_p_com
    ]
    return max(baselines, key=lambda m: val_p_com[m.name]).name if baselines else None


def extra_seed_names(settings: BenchSettings, best: str | None) -> set[str]:
    """The methods run with the further seeds: ``extra_seed_methods`` with ``best_baseline`` = ``best`` and ``all`` =
    every method (PSP / LSP: on each seed's own φ*, :func:`simplex_seed_plan`)."""
    names = set(settings.extra_seed_methods)
    if "all" in names:
        names |= {m.name for m in settings.methods}
    return {best if n == "best_baseline" else n for n in names} - {None, "all", "best_baseline"}


def extra_seed_plan(
    settings: BenchSettings, chosen: dict[str, Config], best: str | None
) -> list[tuple[MethodEntry, Config, int]]:
    """The further-seed models of ``extra_seed_methods`` (:func:`extra_seed_names`) as ``(entry, configuration,
    seed)``, in the configuration ``chosen`` at seed 0 (an entry not in ``chosen`` has none)."""
    extra = extra_seed_names(settings, best)
    return [
        (entry, chosen[entry.name], seed)
        for entry in settings.methods
        if entry.name in extra and entry.name in chosen
        for seed in settings.seeds[1:]
    ]


def simplex_seed_plan(settings: BenchSettings, best: str | None) -> list[tuple[MethodEntry, HeadEntry, int]]:
    """The training-free methods' further seeds as ``(entry, head, seed)``: each on the old model and φ* of its
    geometry's first head at that seed, as at seed 0."""
    extra = extra_seed_names(settings, best)
    return [
        (entry, settings.heads(entry.geometry)[0], seed)
        for entry in settings.methods
        if entry.method in SIMPLEX and entry.name in extra
        for seed in settings.seeds[1:]
    ]


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
    requests = {
        "old": (f"old/{tag}", ModelRequest(old_sel, arch=sc.old_arch, zeta=zeta0, generation=0, **common)),
        "reference": (
            f"reference/{tag}",
            ModelRequest(new_sel, arch=sc.new_arch, zeta=zeta_n, role="reference", **common),
        ),
    }
    first = {role: bench.train_model(label, req) for role, (label, req) in requests.items()}  # both start first
    held = bench.settings.criterion_roles
    old, ref = (to_criterion(bench, *requests[r], first[r]) if r in held else first[r] for r in ("old", "reference"))
    return old, ref


def to_criterion(bench: Bench, label: str, req: ModelRequest, model: BenchModel) -> BenchModel:
    """``model`` (``req``'s, trained) if its last-epoch train accuracy reaches the profile's ``train_criterion``,
    else ``req`` trained again from scratch with twice the epochs, and so on up to ``criterion_max_factor`` times
    the first; the last one trained when none reaches it (the report marks it below the criterion)."""
    s = bench.settings
    if s.train_criterion is None:
        return model
    first = epochs = req.epochs or bench.params.train.epochs
    while epochs * 2 <= first * s.criterion_max_factor:
        reached = bench.training_summary(model)["train_accuracy"]
        if reached >= s.train_criterion:
            break
        epochs *= 2
        bench.log(f"  {label}: train accuracy {reached:.3f} < {s.train_criterion:g}; again with {epochs} epochs")
        model = bench.train_model(f"{label}/epochs={epochs}", replace(req, epochs=epochs))
    return model


def entry_weights(bench: Bench, entry: MethodEntry) -> list[float]:
    """The λ values a method is trained with at seed 0: the tuning grid, or its one fixed λ."""
    fixed = entry.weight if entry.weight is not None else bench.params.alignment.weight
    return list(bench.settings.tune_weights) if entry.tune else [fixed]


def _describe(cfg: Config) -> str:
    """A configuration in words: head, grid values, λ."""
    return " ".join(x for x in (cfg.head.name, option_text(cfg.options), f"λ={cfg.weight:g}") if x)


def _choose(
    bench: Bench,
    sc: Scenario,
    entry: MethodEntry,
    new_sel: DataManifest,
    by_head: dict[str, tuple[BenchModel, BenchModel]],
    record: list[dict[str, Any]],
) -> tuple[Chosen, float | None]:
    """A trained method's seed-0 choice among every configuration of :func:`entry_configs` (each head with its own
    old model and φ*: ``by_head``), by :func:`~benchmarks.selection.select_configuration`, and its validation mAP
    P_com. Each configuration tried is appended to ``record``; one whose training diverged is recorded as such and
    never chosen (validation scores None)."""
    s, p = bench.settings, bench.params
    cfgs = entry_configs(bench, entry)
    models: list[ModelRecord | None] = []
    scores: list[Scored] = []
    first = len(record)
    for cfg in cfgs:
        old, ref = by_head[cfg.head.name]
        tried = {"method": entry.name, "head": cfg.head.name, "weight": cfg.weight, "options": dict(cfg.options)}
        try:
            m = train_entry(bench, sc, entry, new_sel, p, cfg, s.seeds[0], old, ref)
        except TrainingDivergedError as err:  # a configuration that cannot train is one the rule cannot choose
            bench.log(f"[{sc.name}] {entry.name} {_describe(cfg)} diverged: {err}")
            models.append(None)
            scores.append(Scored(None, None))
            record.append(tried | {"val_p_com": None, "val_p_com_den": None, "val_p_up": None, "chosen": False})
            record[-1]["diverged"] = str(err)
            continue
        val = validation_scores(m)
        models.append(m)
        scores.append(Scored(val["val_p_com"], val["val_p_up"]))
        record.append(tried | val | {"chosen": False})
        if create_space(entry.geometry).radius_encodes_confidence:
            record[-1] |= m.radius_diagnostics()
    i, rule = select_configuration(scores, s.p_up_floor)
    model = models[i]
    if model is None:
        raise TrainingDivergedError(f"every configuration of {entry.name} diverged; lower train.lr or tune_weights")
    record[first + i]["chosen"] = True
    failed = sum(m is None for m in models)
    note = f", {failed} diverged" if failed else ""
    detail = f"{_describe(cfgs[i])}: {rule} (floor {s.p_up_floor:g}; {len(cfgs)} configurations{note})"
    return Chosen(cfgs[i], model, rule, len(cfgs), detail), scores[i].val_p_com


def _extra_seed_rows(
    bench: Bench,
    sc: Scenario,
    old_sel: DataManifest,
    new_sel: DataManifest,
    chosen: dict[str, Chosen],
    best: str | None,
) -> list[Row]:
    """Rows of the further seeds of ``extra_seed_methods`` (:func:`extra_seed_plan`); each seed with its own old
    model and φ*."""
    rows: list[Row] = []
    configs = {n: c.config for n, c in chosen.items()}
    for entry, cfg, seed in extra_seed_plan(bench.settings, configs, best):
        old, ref = base_models(bench, sc, old_sel, new_sel, seed, cfg.head)
        bench.log(f"[{sc.name}] {entry.name} seed {seed}")
        m = train_entry(bench, sc, entry, new_sel, bench.params, cfg, seed, old, ref)
        rows.append(_row(bench, entry, chosen[entry.name], m, old, ref, seed, "configuration from seed 0"))
    for entry, head, seed in simplex_seed_plan(bench.settings, best):
        old, ref = base_models(bench, sc, old_sel, new_sel, seed, head)
        rows.append(simplex_row(bench, entry, new_sel, old, ref, seed))
    return rows
