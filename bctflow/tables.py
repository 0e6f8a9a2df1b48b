"""Rich tables of the lineage for the command line."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from components.evaluation import COMPAT_METRICS, ILL_CONDITIONED, REPORTED_METRICS
from components.evaluation.lineage_timeline import Timeline
from components.geometry import create_space
from flows.runtime.artifacts import fmt

__all__ = ["compat_table", "lineage_table", "retrieval_table"]


def _rows(gen: dict[str, Any]) -> list[tuple[str, str, dict[str, float] | None]]:
    m = gen["metrics"]
    g, p = gen["id"], gen["parent"]
    rows = [(f"g{g} {gen['alignment']}", f"g{g}", m["self"])]
    if p is not None:
        rows.append(
            (
                f"g{g} {gen['alignment']} (cross)",
                f"g{p} (live gallery)" if gen.get("backfill_against") == p else f"g{p}",
                m["cross"],
            )
        )
        rows.append((f"g{p} (old-old)", f"g{p}", m["parent_self"]))
    ref = m.get("reference")
    if ref:
        rows.append((f"g{g} reference φ* (independent)", "φ*", ref["self"]))
        if p is not None:
            rows.append((f"g{g} reference φ* (cross)", f"g{p}", ref["cross"]))
    return rows


def retrieval_table(
    gens: list[dict[str, Any]], title: str = "Retrieval on the gallery (test split, leave-one-out)"
) -> Table:
    t = Table(title=title, title_justify="left")
    t.add_column("queries embedded by")
    t.add_column("gallery embedded by")
    for m in REPORTED_METRICS:
        t.add_column(m.upper().replace("MAP", "mAP"), justify="right")
    for gen in gens:
        for label, gallery, vals in _rows(gen):
            t.add_row(label, gallery, *(fmt((vals or {}).get(k)) for k in REPORTED_METRICS))
    return t


def compat_table(gens: list[dict[str, Any]]) -> Table:
    """P_com with its denominator (ref self − parent self) and P_up, per aligned generation."""
    t = Table(title="Compatibility (design §6; φ* = independent reference)", title_justify="left")
    for col in ("generation", "metric", "P_com", "denominator", "P_up", "note"):
        t.add_column(col, justify="left" if col in ("generation", "metric", "note") else "right")
    for gen in gens:
        m = gen["metrics"]
        if gen["parent"] is None:
            continue
        for k in COMPAT_METRICS:
            pc = (m.get("p_com") or {}).get(k)
            den = (m.get("p_com_denominator") or {}).get(k)
            pu = (m.get("p_up") or {}).get(k)
            note = ""
            if den is None:
                note = "no reference trained"
            elif abs(den) < ILL_CONDITIONED:
                note = "ill-conditioned: tiny denominator, P_com swings with small changes in cross"
            t.add_row(f"g{gen['id']} {gen['alignment']}", k, fmt(pc, 3), fmt(den, 4), fmt(pu, 4), note)
    return t


LINEAGE_COLUMNS = (
    "gen",
    "parent",
    "alignment",
    "geom",
    "ζ",
    "self mAP",
    "cross mAP",
    "P_com mAP",
    "backfill",
    "role",
    "MLflow",
)


def _role(g: dict[str, Any]) -> str:
    """★ production (forced?), ● the live gallery's generation, ○ a generation whose queries it accepts, retired."""
    role = []
    if g.get("production"):
        forced = any(pr.get("forced") for pr in g.get("promotions", []))
        role.append("★ production" + (" (forced)" if forced else ""))
    if g["live"]:
        role.append("● gallery")
    elif g.get("live_gallery_accepts_queries"):
        role.append("○ queries")
    if g.get("status") == "retired":
        role.append("retired")
    return ", ".join(role)


def _backfill(g: dict[str, Any]) -> str:
    """``done (event N)`` once a full backfill with ``g`` ran, ``retired`` once a later generation's replaced its
    gallery (its decision is moot), else its decision: ``yes (<reasons>)``, ``no``, ``—``."""
    if g["backfill_done"] is not None:
        return f"done (event {g['backfill_done']})"
    if g["status"] == "retired":
        return "retired"
    if g["backfill_required"] is None:
        return "—"
    return f"yes ({len(g['backfill_reasons'])})" if g["backfill_required"] else "no"


def _lineage_row(g: dict[str, Any]) -> tuple[str, ...]:
    m = g["metrics"]
    return (
        str(g["id"]),
        "—" if g["parent"] is None else str(g["parent"]),
        g["alignment"],
        create_space(g["geometry"], g["curvature"]).label,
        fmt(g["zeta"], 2) + (" ↺" if (g.get("zeta_step") or {}).get("restarted") else ""),
        fmt((m["self"] or {}).get("map")),
        fmt((m["cross"] or {}).get("map")),
        fmt((m.get("p_com") or {}).get("map"), 3),
        _backfill(g),
        _role(g),
        f"v{g['mlflow_version']}",
    )


def decision_warnings(g: dict[str, Any]) -> list[str]:
    """A generation's failing checks that do not require a backfill (params ``backfill.gate`` does not name them):
    recorded warnings (docs/design.md §7.18)."""
    reasons = set(g["backfill_reasons"])
    return [
        c["detail"] for c in g.get("backfill_checks", []) if not c.get("passed", True) and c["detail"] not in reasons
    ]


def _night_notes(gens: list[dict[str, Any]]) -> list[str]:
    """One line per lifecycle night, oldest first: its action, why, its forecast and the outcome measured after."""
    nights = sorted((n for g in gens for n in g.get("nights", [])), key=lambda n: n["night"])
    lines = []
    for n in nights:
        what = n["action"] if n["fraction"] is None or n["action"] in ("full", "keep") else (
            f"{n['action']} {n['fraction']:.0%}")  # fmt: skip
        target = "" if n["target"] is None else f" g{n['target']}"
        state = "" if n["state"] == "done" else f" [{n['state']}]"
        lines.append(
            f"☾ {n['night']} ({n['policy']}): {what}{target}{state} — {n['reason']}; served mAP forecast "
            f"{fmt(n['forecast_map'], 3)}, outcome {fmt(n['outcome_map'], 3)}, {n['items']} items re-embedded"
        )
    return lines


def _lineage_notes(gens: list[dict[str, Any]], timeline: Timeline) -> list[str]:
    """Backfill reasons (warnings once a full backfill with the generation ran), the backfills in the order they
    happened, where the live gallery's vectors live and the newest compatibility summary, for the table's caption."""
    notes = [
        f"g{g['id']}: {r}"
        if g["backfill_done"] is None
        else f"g{g['id']} warning (backfill {g['backfill_done']} done): {r}"
        for g in gens
        if g["backfill_required"] and g["status"] != "retired"
        for r in g["backfill_reasons"]
    ]
    for b in timeline.backfills:
        restarted = "" if b.zeta_restart is None else ", ζ restarted"
        notes.append(
            f"⟲ backfill {b.event_id}: {b.kind} with g{b.to_gen} "
            f"({b.reembedded}/{b.total} items{restarted}, {b.duration_s:.0f}s)"
        )
    notes += [f"g{g['id']} warning: {w}" for g in gens if g["status"] != "retired" for w in decision_warnings(g)]
    notes += _night_notes(gens)
    live = next((g["live_gallery"] for g in gens if g.get("live_gallery")), None)
    if live is not None and live["store"] is not None:  # recorded since lineage revision 0007
        where = f"{live['store']} collection {live['collection']}" if live["collection"] else f"{live['store']} files"
        rows = ", ".join(f"g{gen} {n}" for gen, n in (live["rows_by_generation"] or {}).items())
        index = (live["index_params"] or {}).get("index_type")
        notes.append(f"● live gallery: {where}, index {index}, rows {rows}")
    latest = next((g for g in reversed(gens) if g.get("compatibility")), None)
    if latest is not None:
        c = latest["compatibility"]["map"]
        notes.append(
            f"compatibility over serving generations {c['generations']} (mAP): "
            f"AC {fmt(c['ac'], 3)}, AA {fmt(c['aa'], 3)}, ACA {fmt(c['aca'], 3)}"
        )
    return notes


def lineage_table(gens: list[dict[str, Any]], timeline: Timeline) -> Table:
    """The chain: ζ, alignment, P_com vs the parent, backfill flags, production, the live gallery (``gens``: the
    ``bctflow lineage --json`` document; ``timeline``: the same lineage's, for the backfills)."""
    t = Table(
        title="bctflow lineage  (geom: L = Lorentz, E = Euclidean; ↺ = ζ restarted after a backfill)",
        title_justify="left",
    )
    for col in LINEAGE_COLUMNS:
        t.add_column(col, no_wrap=True)
    for g in gens:
        t.add_row(*_lineage_row(g))
    notes = _lineage_notes(gens, timeline)
    if notes:
        t.caption = "\n".join(notes)
        t.caption_justify = "left"
    return t
