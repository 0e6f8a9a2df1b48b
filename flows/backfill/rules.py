"""The backfill decision (docs/design.md §7.4): the catalog of rules, each registered under its params field.

A rule is a function of the evidence and :class:`~flows.params.BackfillRules`, registered with ``@rule("<field>")``
under the field of ``backfill.rules`` that enables and sets it (null disables it); that field's tag in
flows/params/schema.py makes it a parameter of an aligned generation's DVC stage. Each enabled rule yields a check
``{rule, value, threshold, passed, detail, short}``; the decision is *required* when any check fails, and its reasons
are the failed checks' details, in plain words (``short``: the same in a few characters, for the lineage picture).
Whether the new generation is compatible with the live gallery is not decided here: it is a measured fact
(:attr:`BackfillEvidence.compatible`) that the ``require_compatibility`` rule reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from flows.params import BackfillRules
from registry.records import DecisionRecord

__all__ = ["RULES", "SHARED", "VETO", "BackfillEvidence", "Rule", "decide_backfill", "gated_failures", "rule", "vetoed"]


@dataclass(frozen=True)
class BackfillEvidence:
    """What the rules look at for a new generation against the live gallery's generation.

    cross: M(φ_new, φ_live), None when the new model cannot query that gallery at all
    (other geometry or dimension, ``incompatibility`` says why); live_self: M(φ_live, φ_live);
    compatible: the empirical criterion cross > live_self on the decision metric.
    """

    live_generation_id: int
    cross: dict[str, float] | None
    live_self: dict[str, float]
    compatible: bool
    p_com: dict[str, float | None]
    zeta: float | None
    gallery_clip_fraction: float | None
    generations_since_backfill: int
    incompatibility: str | None = None
    #: M(φ_new, φ_new): the new generation's own retrieval (None: not measured)
    new_self: dict[str, float] | None = None


#: a rule: its check of the evidence, or None when it is disabled (or has nothing to check)
Rule = Callable[[BackfillEvidence, BackfillRules], dict[str, Any] | None]
#: the catalog: every rule by the ``backfill.rules`` field it reads, in the order its check is reported
RULES: dict[str, Rule] = {}
#: the fields of ``backfill.rules`` that no one rule owns: the metric the rules compare on
SHARED = frozenset({"metric"})
#: checks whose failure vetoes the generation (neither promoted nor backfilled with) instead of requiring a backfill
VETO = frozenset({"not_worse"})


def rule(field: str) -> Callable[[Rule], Rule]:
    """Register the decorated rule under ``backfill.rules.<field>`` (TypeError for an unknown or taken field)."""

    def register(fn: Rule) -> Rule:
        if field not in BackfillRules.model_fields or field in SHARED or field in RULES:
            raise TypeError(
                f"backfill rule {fn.__name__} names field {field!r}: add that field to flows/params/schema.py "
                "BackfillRules "
                "(one field per rule; metric is the rules' shared metric)"
            )
        RULES[field] = fn
        return fn

    return register


def _check(
    name: str, value: float | None, threshold: float | None, passed: bool, detail: str, short: str
) -> dict[str, Any]:
    return {
        "rule": name,
        "value": value,
        "threshold": threshold,
        "passed": bool(passed),
        "detail": detail,
        "short": short,
    }


@rule("require_compatibility")
def _compatibility(ev: BackfillEvidence, rules: BackfillRules) -> dict[str, Any] | None:
    live, m = ev.live_generation_id, rules.metric
    if ev.cross is None:
        return _check(
            "compatibility",
            None,
            None,
            False,
            f"the new model cannot query generation {live}'s gallery ({ev.incompatibility}); the gallery must be "
            "re-embedded",
            f"cannot query g{live}'s gallery",
        )
    if not rules.require_compatibility:
        return None
    c, s = ev.cross[m], ev.live_self[m]
    rel = ">" if ev.compatible else "≤"
    return _check(
        "compatibility",
        c,
        s,
        ev.compatible,
        f"empirical compatibility {'holds' if ev.compatible else 'fails'} against live gallery generation {live}: "
        f"cross {m} {c:.4f} {rel} its self {m} {s:.4f}",
        f"cross {c:.3f} {rel} old {s:.3f}",
    )


@rule("p_com_floor")
def _p_com_floor(ev: BackfillEvidence, rules: BackfillRules) -> dict[str, Any] | None:
    floor, m = rules.p_com_floor, rules.metric
    if floor is None:
        return None
    v = ev.p_com.get(m)
    if v is None:
        return _check(
            "p_com_floor",
            None,
            floor,
            True,
            "P_com not measured (no independent reference trained); rule skipped",
            "P_com not measured",
        )
    ok = v >= floor
    rel = "≥" if ok else "<"
    return _check(
        "p_com_floor", v, floor, ok, f"P_com({m}) {v:.3f} {rel} floor {floor:.3f}", f"P_com {v:.2f} {rel} {floor:.2f}"
    )


@rule("zeta_ceiling")
def _zeta_ceiling(ev: BackfillEvidence, rules: BackfillRules) -> dict[str, Any] | None:
    ceiling = rules.zeta_ceiling
    if ceiling is None or ev.zeta is None:
        return None
    ok = ev.zeta <= ceiling + 1e-12
    rel = "≤" if ok else ">"
    return _check(
        "zeta_ceiling",
        ev.zeta,
        ceiling,
        ok,
        f"clip radius ζ {ev.zeta:.2f} {rel} ceiling {ceiling:.2f}",
        f"ζ {ev.zeta:.2f} {rel} {ceiling:.2f}",
    )


@rule("max_generations_since_backfill")
def _generations_since_backfill(ev: BackfillEvidence, rules: BackfillRules) -> dict[str, Any] | None:
    limit = rules.max_generations_since_backfill
    if limit is None:
        return None
    n = ev.generations_since_backfill
    ok = n <= limit
    rel = "≤" if ok else ">"
    return _check(
        "max_generations_since_backfill",
        float(n),
        float(limit),
        ok,
        f"{n} generation(s) since the gallery was last embedded {rel} limit {limit}",
        f"{n} gens since backfill {rel} {limit}",
    )


@rule("clip_fraction_max")
def _clip_fraction(ev: BackfillEvidence, rules: BackfillRules) -> dict[str, Any] | None:
    top, f = rules.clip_fraction_max, ev.gallery_clip_fraction
    if top is None or f is None:
        return None
    ok = f <= top
    rel = "≤" if ok else ">"
    return _check(
        "clip_fraction_max",
        f,
        top,
        ok,
        f"{f:.0%} of gallery embeddings sit on the clip radius {rel} {top:.0%}"
        + ("" if ok else " (the time axis has no room left to encode confidence)"),
        f"clip {f:.0%} {rel} {top:.0%}",
    )


@rule("require_not_worse")
def _not_worse(ev: BackfillEvidence, rules: BackfillRules) -> dict[str, Any] | None:
    if not rules.require_not_worse or ev.new_self is None:
        return None
    m = rules.metric
    n, s = ev.new_self[m], ev.live_self[m]
    ok = n >= s
    rel = "≥" if ok else "<"
    return _check(
        "not_worse",
        n,
        s,
        ok,
        f"the new generation's own {m} {n:.4f} {rel} generation {ev.live_generation_id}'s on its gallery {s:.4f}"
        + ("" if ok else ": it would serve worse than what it replaces — neither promoted nor backfilled with"),
        f"self {n:.3f} {rel} old {s:.3f}",
    )


def vetoed(checks: Sequence[dict[str, Any]]) -> bool:
    """A recorded check of :data:`VETO` failed: the generation retrieves worse than the live one."""
    return any(c["rule"] in VETO and not c["passed"] for c in checks)


def gated_failures(checks: Sequence[dict[str, Any]], gate: Sequence[str] | None) -> list[str]:
    """The details of the failing checks ``gate`` names (params ``backfill.gate``; None: every check)."""
    return [c["detail"] for c in checks if not c["passed"] and (gate is None or c["rule"] in gate)]


def decide_backfill(ev: BackfillEvidence, rules: BackfillRules, gate: Sequence[str] | None = None) -> DecisionRecord:
    """Run every rule of the catalog on ``ev``: required when a check ``gate`` names fails (params
    ``backfill.gate``; None: every check) — but a vetoed generation (:data:`VETO`: it retrieves worse than the live
    one) requires nothing: re-embedding with it would serve worse. Every check is recorded; a failing one the gate
    does not name is a warning, not a reason."""
    checks = [c for check in RULES.values() if (c := check(ev, rules)) is not None]
    reasons = [] if vetoed(checks) else gated_failures(checks, gate)
    return DecisionRecord(
        required=bool(reasons), reasons=reasons, checks=checks, against_generation_id=ev.live_generation_id
    )
