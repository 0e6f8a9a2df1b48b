"""A method's row of a benchmark table: self / cross / P_up / P_com (docs/design.md §6.3), the method's own
diagnostics (``AlignmentLoss.diagnostics``, e.g. HBCT's cones) and, for Lorentz models, the radius diagnostics
(§4.5), all on the test gallery — read from the new model's evaluation record (benchmarks/records.py)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from benchmarks.profile import MethodEntry
from benchmarks.records import ModelRecord, evaluate
from benchmarks.runner import Bench, BenchModel, training_summary
from components.data import DataManifest
from components.errors import ConfigError
from components.evaluation import DerivedMetrics
from components.losses import choose_alignment

__all__ = ["Row", "option_text", "simplex_row", "table_row"]


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
    #: the chosen configuration's head and options-grid values (benchmarks/scenarios.py Config)
    head: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    #: how many configurations the method was tried with at seed 0, and the rule that chose among them
    #: (benchmarks/selection.py SELECTION_RULES; "training-free" / "not applicable" for PSP / LSP)
    configurations: int | None = None
    selection_rule: str = ""
    #: what each role's training reached (old / ref / new → train_accuracy, epochs, steps, n_train; the record's)
    roles: dict[str, dict[str, float]] = field(default_factory=dict)
    #: the record's validation-split measurements (self / cross / old_self / ref_self metric dicts): what a common φ*
    #: is chosen by (benchmarks/budget.py)
    val: dict[str, dict[str, float]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["self"] = d.pop("self_")
        return d


def option_text(options: dict[str, Any], sep: str = " ") -> str:
    """Options-grid values as ``k=v`` pairs joined by ``sep`` (numbers in their shortest form)."""
    show = [
        f"{k}={v:g}" if isinstance(v, int | float) and not isinstance(v, bool) else f"{k}={v}"
        for k, v in options.items()
    ]
    return sep.join(show)


def table_row(
    entry: MethodEntry,
    rec: ModelRecord,
    *,
    seed: int,
    weight: float | None,
    selection: str,
    seconds: float | None,
    note: str = "",
    head: str = "",
    options: dict[str, Any] | None = None,
    configurations: int | None = None,
    selection_rule: str = "",
) -> Row:
    """A method's row from the evaluation record of its new model (:func:`~benchmarks.records.evaluate`): the
    test gallery's self / cross / old self / φ* self and what P_up and P_com make of them (design §6.3)."""
    t = rec.test
    d = DerivedMetrics.measure(new_self=t["self"], cross=t["cross"], old_self=t["old_self"], ref_self=t["ref_self"])
    return Row(
        entry.name,
        entry.method,
        entry.geometry,
        rec.space,
        seed,
        weight,
        selection,
        t["self"],
        t["cross"],
        t["old_self"],
        t["ref_self"],
        d.p_com,
        d.p_com_denominator,
        d.p_up,
        seconds,
        dict(rec.diagnostics),
        note,
        head,
        dict(options or {}),
        configurations,
        selection_rule,
        dict(rec.roles),
        dict(rec.val),
    )


def simplex_row(
    bench: Bench, entry: MethodEntry, new_sel: DataManifest, old: BenchModel, ref: BenchModel, seed: int
) -> Row:
    """A training-free PSP / LSP method's row: φ* in the simplex space, or "not applicable" with the reason."""
    kind = entry.method
    try:
        choose_alignment(kind).check_lineage(new_sel.class_order, replace(old.spec, features=kind))
    except ConfigError as err:
        return table_row(
            entry,
            evaluate(bench.metrics, ref.label, ref, old, ref, kind, None, space=kind),
            seed=seed,
            weight=None,
            selection="not applicable",
            seconds=None,
            note=str(err),
            configurations=1,
            selection_rule="not applicable",
        )
    note = "training-free: the new model is φ* itself, so P_up = 0 by construction in this space"
    batch = bench.params.train.batch_size
    roles = {role: training_summary(m.meta, batch) for role, m in (("old", old), ("ref", ref), ("new", ref))}
    new, old, ref = ref.view(kind), old.view(kind), ref.view(kind)
    return table_row(
        entry,
        replace(evaluate(bench.metrics, new.label, new, old, ref, kind, None, space=kind), roles=roles),
        seed=seed,
        weight=None,
        selection="training-free",
        seconds=0.0,
        note=note,
        configurations=1,
        selection_rule="training-free",
    )
