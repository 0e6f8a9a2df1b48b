"""The backfill decision (design §7): rules from params.yaml, applied per generation.

Each rule yields a check ``{rule, value, threshold, passed, detail}``; the
decision is *required* when any enabled check fails, and its reasons are the
failed checks' details, in plain words.
"""

from __future__ import annotations

from dataclasses import dataclass

from registry.lineage import DecisionRecord

__all__ = ["BackfillEvidence", "BackfillRules", "decide_backfill"]


@dataclass(frozen=True)
class BackfillRules:
    metric: str = "map"
    require_compatibility: bool = True
    p_com_floor: float | None = None
    zeta_ceiling: float | None = 3.0
    max_generations_since_backfill: int | None = None
    clip_fraction_max: float | None = 0.9


@dataclass(frozen=True)
class BackfillEvidence:
    """What the rules look at for a new generation against the live gallery's generation.

    cross: M(φ_new, φ_live) or None when the new model cannot query that gallery at all
    (other geometry or dimension); live_self: M(φ_live, φ_live).
    """

    live_generation_id: int
    cross: dict[str, float] | None
    live_self: dict[str, float]
    p_com: dict[str, float | None] | None
    zeta: float | None
    gallery_clip_fraction: float | None
    generations_since_backfill: int
    incompatibility: str | None = None


def decide_backfill(ev: BackfillEvidence, rules: BackfillRules) -> DecisionRecord:
    m = rules.metric
    checks: list[dict] = []

    def check(rule: str, value: float | None, threshold: float | None, passed: bool, detail: str) -> None:
        checks.append({"rule": rule, "value": value, "threshold": threshold, "passed": bool(passed), "detail": detail})

    live = ev.live_generation_id
    if ev.cross is None:
        check("compatibility", None, None, False, f"the new model cannot query generation {live}'s gallery ({ev.incompatibility}); the gallery must be re-embedded")
    elif rules.require_compatibility:
        c, s = ev.cross[m], ev.live_self[m]
        ok = c > s
        rel = ">" if ok else "≤"
        check(
            "compatibility",
            c,
            s,
            ok,
            f"empirical compatibility {'holds' if ok else 'fails'} against live gallery generation {live}: "
            f"cross {m} {c:.4f} {rel} its self {m} {s:.4f}",
        )
    if rules.p_com_floor is not None:
        v = None if ev.p_com is None else ev.p_com.get(m)
        if v is None:
            check("p_com_floor", None, rules.p_com_floor, True, "P_com not measured (no independent reference trained); rule skipped")
        else:
            ok = v >= rules.p_com_floor
            check("p_com_floor", v, rules.p_com_floor, ok, f"P_com({m}) {v:.3f} {'≥' if ok else '<'} floor {rules.p_com_floor:.3f}")
    if rules.zeta_ceiling is not None and ev.zeta is not None:
        ok = ev.zeta <= rules.zeta_ceiling + 1e-12
        check("zeta_ceiling", ev.zeta, rules.zeta_ceiling, ok, f"clip radius ζ {ev.zeta:.2f} {'≤' if ok else '>'} ceiling {rules.zeta_ceiling:.2f}")
    if rules.max_generations_since_backfill is not None:
        n = ev.generations_since_backfill
        ok = n <= rules.max_generations_since_backfill
        check(
            "max_generations_since_backfill",
            float(n),
            float(rules.max_generations_since_backfill),
            ok,
            f"{n} generation(s) since the gallery was last embedded {'≤' if ok else '>'} limit {rules.max_generations_since_backfill}",
        )
    if rules.clip_fraction_max is not None and ev.gallery_clip_fraction is not None:
        f = ev.gallery_clip_fraction
        ok = f <= rules.clip_fraction_max
        check(
            "clip_fraction_max",
            f,
            rules.clip_fraction_max,
            ok,
            f"{f:.0%} of gallery embeddings sit on the clip radius {'≤' if ok else '>'} {rules.clip_fraction_max:.0%}"
            + ("" if ok else " (the time axis has no room left to encode confidence)"),
        )
    reasons = [c["detail"] for c in checks if not c["passed"]]
    return DecisionRecord(required=bool(reasons), reasons=reasons, checks=checks, against_generation_id=live)
