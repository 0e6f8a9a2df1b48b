"""The lineage as a picture that tells each generation's state at a glance (docs/design.md §7.17).

One row of a lineage timeline's steps, in the order they happened (generations and backfills interleaved). Each
generation is a box — name, alignment, ζ, registry version, ✓/✗ the decision metric's cross vs old-old values —
framed by whether the live gallery accepts its queries (green, red; grey for generation 0, dashed while it is being
registered) and filled amber while a backfill it requires has not been done. Badges say the rest: above the box
``★ production`` (magenta when forced), ``promoted`` (once, no longer) or ``✗ not promoted``; below it
``▣ live gallery`` (its embeddings fill the live gallery) and ``⚠ backfill required`` with the reasons in short
(``clip 99% > 95%``). An arc joins each generation to the one it was aligned to; a backfill is a diamond, joined to
the generation that re-embedded the gallery. A legend on the figure names every mark. Every mark carries a ``gid``
(``g1.box``, ``g1.promotion``, ``g1.live``, ``g1.backfill``, ``backfill2``), so tests read the figure's artists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from components.evaluation.lineage_timeline import BackfillStep, GenerationStep, Timeline

__all__ = ["STYLE", "lineage_figure", "lineage_picture"]

#: every mark's colours: frames (compatibility), fills and badges (state)
STYLE = {
    "compatible": "#2e7d32",
    "incompatible": "#c62828",
    "root": "#455a64",
    "plain_fill": "#ffffff",
    "backfill_fill": "#ffe0b2",
    "backfill_badge": "#ef6c00",
    "production": "#1565c0",
    "forced": "#ad1457",
    "not_promoted": "#757575",
    "live": "#00838f",
    "backfill_step": "#6a1b9a",
}
_BOX_Y, _PROMOTION_Y, _LIVE_Y, _BACKFILL_Y = 0.0, 0.42, -0.36, -0.62


def _zeta(z: float | None) -> str:
    return "—" if z is None else f"{z:.2f}"


def _label(g: GenerationStep, metric: str | None) -> str:
    version = "this version" if g.pending else (f"v{g.version}" if g.version else "unregistered")
    lines = [f"g{g.gen_id} · {g.alignment}", f"ζ {_zeta(g.zeta)} · {version}"]
    if g.cross is not None and g.old_old is not None:
        verdict = "✓" if g.compatible else "✗"
        lines.append(f"{verdict} {metric} cross {g.cross:.3f} vs old {g.old_old:.3f}")
    if g.night:
        lines.append(f"☾ {g.night}")
    return "\n".join(lines)


def _frame(g: GenerationStep) -> str:
    if g.parent_id is None:
        return STYLE["root"]
    return STYLE["compatible"] if g.compatible else STYLE["incompatible"]


def lineage_figure(timeline: Timeline, title: str) -> Any:
    """The lineage as a matplotlib figure (headless): ``timeline``'s steps left to right, each generation's state
    marked (production, promotion, live gallery, compatibility, backfill required); the boxes show the cross and
    old-old values on its metric (e.g. ``map``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = timeline.steps
    n = max(len(steps), 1)
    width = min(max(2.3 * n + 1.5, 9.0), 40.0)  # inches: 2.3 per step, room for the legend
    fig, ax = plt.subplots(figsize=(width, 3.9), dpi=100)
    x_of = {step.gen_id: float(x) for x, step in enumerate(steps) if isinstance(step, GenerationStep)}
    for x, step in enumerate(steps):
        if isinstance(step, GenerationStep):
            _draw_generation(ax, float(x), step, x_of, timeline)
        else:
            _draw_backfill(ax, float(x), step, x_of)
    ax.set_xlim(-0.8, n - 0.2)
    ax.set_ylim(-0.98, 0.56)
    ax.axis("off")
    ax.set_title(title, fontsize=10)
    _legend(ax, columns=max(2, min(6, int(width // 2.9))))  # a legend column takes ~2.6 inches
    fig.tight_layout()
    return fig


def lineage_picture(path: Path, timeline: Timeline, title: str) -> Path:
    """:func:`lineage_figure` saved as the PNG ``path``; returns ``path``."""
    import matplotlib.pyplot as plt

    fig = lineage_figure(timeline, title)
    try:
        fig.savefig(path, format="png", bbox_inches="tight", pad_inches=0.15)  # the legend whole
    finally:
        plt.close(fig)
    return path


def _badge(ax: Any, x: float, y: float, text: str, face: str, edge: str, colour: str, gid: str) -> None:
    """A small rounded label: the state marks above and below a generation's box."""
    box = {"boxstyle": "round,pad=0.3", "facecolor": face, "edgecolor": edge, "linewidth": 1.2, "linestyle": "-"}
    ax.text(x, y, text, ha="center", va="center", fontsize=8, color=colour, weight="bold", bbox=box, zorder=4, gid=gid)


def _promotion_badge(ax: Any, x: float, g: GenerationStep, production: int | None) -> None:
    gid = f"g{g.gen_id}.promotion"
    if g.gen_id == production:
        face = STYLE["forced"] if g.forced else STYLE["production"]
        _badge(ax, x, _PROMOTION_Y, "★ production" + (" (forced)" if g.forced else ""), face, face, "white", gid)
    elif g.promoted:
        edge = STYLE["forced"] if g.forced else STYLE["production"]
        _badge(ax, x, _PROMOTION_Y, "promoted" + (" (forced)" if g.forced else ""), "white", edge, edge, gid)
    elif g.parent_id is not None:
        grey = STYLE["not_promoted"]
        _badge(ax, x, _PROMOTION_Y, "✗ not promoted", grey, grey, "white", gid)


def _draw_generation(ax: Any, x: float, g: GenerationStep, x_of: dict[int, float], timeline: Timeline) -> None:
    frame, needs_backfill = _frame(g), timeline.needs_backfill(g)
    box = {
        "boxstyle": "round,pad=0.45",
        "facecolor": STYLE["backfill_fill"] if needs_backfill else STYLE["plain_fill"],
        "edgecolor": frame,
        "linewidth": 2.8 if g.gen_id == timeline.production else 1.4,
        "linestyle": "--" if g.pending else "-",
    }
    label = _label(g, timeline.metric)
    ax.text(x, _BOX_Y, label, ha="center", va="center", fontsize=8, bbox=box, zorder=3, gid=f"g{g.gen_id}.box")
    _promotion_badge(ax, x, g, timeline.production)
    if g.gen_id == timeline.live:
        _badge(ax, x, _LIVE_Y, "▣ live gallery", STYLE["live"], STYLE["live"], "white", f"g{g.gen_id}.live")
    if needs_backfill:
        why = "".join(f"\n{r}" for r in g.backfill_short[:2]) + (
            f"\n+{len(g.backfill_short) - 2} more" if len(g.backfill_short) > 2 else ""
        )
        orange = STYLE["backfill_badge"]
        _badge(ax, x, _BACKFILL_Y, "⚠ backfill required" + why, orange, orange, "white", f"g{g.gen_id}.backfill")
    if g.parent_id is not None and g.parent_id in x_of:
        x0 = x_of[g.parent_id]
        rad = -0.3 / max(1.0, x - x0)  # a long arc bends less: it stays under the badges and the title
        ax.annotate(
            "",
            xy=(x - 0.15, 0.2),
            xytext=(x0 + 0.15, 0.2),
            arrowprops={"arrowstyle": "->", "color": frame, "lw": 1.3, "connectionstyle": f"arc3,rad={rad:.3f}"},
            zorder=2,
            gid=f"g{g.gen_id}.arc",
        )


def _draw_backfill(ax: Any, x: float, b: BackfillStep, x_of: dict[int, float]) -> None:
    colour = STYLE["backfill_step"]
    ax.scatter([x], [_BOX_Y], marker="D", s=260, color=colour, zorder=3, gid=f"backfill{b.event_id}.diamond")
    restart = f"\nζ restarts at {_zeta(b.zeta_restart)}" if b.zeta_restart is not None else ""
    ax.text(
        x,
        -0.15,
        f"⟲ {b.kind} backfill\nwith g{b.to_gen}: {b.reembedded}/{b.total}{restart}",
        ha="center",
        va="top",
        fontsize=7,
        color=colour,
        gid=f"backfill{b.event_id}",
    )
    if b.to_gen in x_of:
        ax.annotate(
            "",
            xy=(x, -0.55),
            xytext=(x_of[b.to_gen], -0.88),
            arrowprops={"arrowstyle": "->", "color": colour, "lw": 1.0, "ls": ":", "connectionstyle": "arc3,rad=0.2"},
            gid=f"backfill{b.event_id}.arc",
        )


#: the legend's boxes and badges: label → (face, edge); then a dashed line (being registered) and a diamond
LEGEND = {
    "✓ compatible with the live gallery": (STYLE["plain_fill"], STYLE["compatible"]),
    "✗ not compatible with it": (STYLE["plain_fill"], STYLE["incompatible"]),
    "generation 0": (STYLE["plain_fill"], STYLE["root"]),
    "backfill required (amber box)": (STYLE["backfill_fill"], STYLE["root"]),
    "⚠ backfill required: why": (STYLE["backfill_badge"], STYLE["backfill_badge"]),
    "★ production": (STYLE["production"], STYLE["production"]),
    "★ forced promotion": (STYLE["forced"], STYLE["forced"]),
    "promoted (no longer production)": ("white", STYLE["production"]),
    "✗ not promoted": (STYLE["not_promoted"], STYLE["not_promoted"]),
    "▣ live gallery (its embeddings)": (STYLE["live"], STYLE["live"]),
}


def _legend(ax: Any, columns: int) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = [
        Patch(facecolor=face, edgecolor=edge, linewidth=1.4, label=label) for label, (face, edge) in LEGEND.items()
    ]
    handles.append(Line2D([], [], color=STYLE["root"], ls="--", lw=1.4, label="being registered (dashed frame)"))
    handles.append(Line2D([], [], color=STYLE["backfill_step"], marker="D", lw=0, label="⟲ backfill"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=columns, fontsize=7.5, frameon=False)
