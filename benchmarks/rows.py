"""A method's row of a benchmark table: self / cross / P_up / P_com (docs/design.md §6.3), the method's own
diagnostics (``AlignmentLoss.diagnostics``, e.g. HBCT's cones) and, for Lorentz models, the radius diagnostics
(§4.5), all on the test gallery."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from benchmarks.profile import MethodEntry
from benchmarks.runner import Bench, BenchModel
from components.data import DataManifest
from components.errors import ConfigError
from components.evaluation import DerivedMetrics
from components.evaluation.diagnostics import clip_fraction, uncertainty_seen_unseen, uncertainty_std
from components.losses import MethodDiagnostics, choose_alignment

__all__ = ["Row", "option_text", "radius_diagnostics", "simplex_row", "table_row"]


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
    head: str = "",
    options: dict[str, Any] | None = None,
    configurations: int | None = None,
    selection_rule: str = "",
) -> Row:
    self_m = bench.metrics(new, new)
    cross = bench.metrics(new, old)
    old_self = bench.metrics(old, old)
    ref_self = bench.metrics(ref, ref)
    d = DerivedMetrics.measure(new_self=self_m, cross=cross, old_self=old_self, ref_self=ref_self)
    own = MethodDiagnostics()
    if space == "embedding" and new.test.incompatibility(old.test) is None:
        # with the settings they were measured at (HBCT: the ε its cones trained with, chosen from data or configured)
        own = choose_alignment(entry.method, entry.options).diagnostics(new.meta.get("choices", {}), old.test, new.test)
    diag: dict[str, float | None] = {**own.settings, **own.measured}
    if entry.geometry == "lorentz" and space == "embedding":
        seen = list(old.spec.class_order)
        diag = {**radius_diagnostics({"new": new, "old": old, "ref": ref}), **diag}
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
        head,
        dict(options or {}),
        configurations,
        selection_rule,
    )


def radius_diagnostics(models: dict[str, BenchModel]) -> dict[str, float]:
    """Test-gallery radius diagnostics of Lorentz ``models`` by role: ``clip_fraction_<role>`` for every role, then
    ``uncertainty_std_<role>``."""
    out = {f"clip_fraction_{r}": clip_fraction(m.test.clipped) for r, m in models.items()}
    return out | {f"uncertainty_std_{r}": uncertainty_std(m.test.z, m.test.curvature) for r, m in models.items()}


def simplex_row(
    bench: Bench, entry: MethodEntry, new_sel: DataManifest, old: BenchModel, ref: BenchModel, seed: int
) -> Row:
    """A training-free PSP / LSP method's row: φ* in the simplex space, or "not applicable" with the reason."""
    kind = entry.method
    try:
        choose_alignment(kind).check_lineage(new_sel.class_order, replace(old.spec, features=kind))
    except ConfigError as err:
        return table_row(
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
            configurations=1,
            selection_rule="not applicable",
        )
    note = "training-free: the new model is φ* itself, so P_up = 0 by construction in this space"
    return table_row(
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
        configurations=1,
        selection_rule="training-free",
    )
