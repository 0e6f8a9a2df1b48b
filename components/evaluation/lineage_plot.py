"""The lineage as a picture: generations, the parent each aligned to, ζ, compatibility, backfills, promotions.

One row of a lineage timeline's steps, in the order they happened (generations and backfills interleaved). Each
generation is a box — name, alignment, ζ, registry version — coloured by whether the live gallery accepted its
queries (the measured compatibility fact, docs/design.md §7.3); an arc joins it to the generation it was aligned to
(the one whose embeddings filled the live gallery then), labelled with the decision metric's cross and old-old
values. A backfill is a diamond, joined to the generation that re-embedded the gallery. Above the boxes: which
generation is ``production`` and which were promoted (forced ones say so); below: which generation's embeddings fill
the live gallery now. Logged on every generation's MLflow run (docs/design.md §7.17).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from components.evaluation.lineage_timeline import BackfillStep, GenerationStep, Timeline

__all__ = ["lineage_figure", "lineage_picture"]

_COMPATIBLE, _INCOMPATIBLE, _ROOT, _BACKFILL = "#2e7d32", "#c62828", "#455a64", "#6a1b9a"


def _zeta(z: float | None) -> str:
    return "—" if z is None else f"{z:.2f}"


def _label(g: GenerationStep, metric: str | None) -> str:
    version = "this version" if g.pending else (f"v{g.version}" if g.version else "unregistered")
    lines = [f"g{g.gen_id} · {g.alignment}", f"ζ {_zeta(g.zeta)} · {version}"]
    if g.cross is not None and g.old_old is not None:
        verdict = "✓" if g.compatible else "✗"
        lines.append(f"{verdict} {metric} cross {g.cross:.3f} vs old {g.old_old:.3f}")
    return "\n".join(lines)


def _colour(g: GenerationStep) -> str:
    if g.parent_id is None:
        return _ROOT
    return _COMPATIBLE if g.compatible else _INCOMPATIBLE


def lineage_figure(timeline: Timeline, title: str) -> Any:
    """The lineage as a matplotlib figure (headless): ``timeline``'s steps left to right, its production and live
    gallery generations marked; the boxes show the cross and old-old values on its metric (e.g. ``map``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps, production, live_gallery, metric = timeline.steps, timeline.production, timeline.live, timeline.metric
    n = max(len(steps), 1)
    width = min(max(2.3 * n + 1.5, 6.5), 40.0)  # inches: 2.3 per step
    fig, ax = plt.subplots(figsize=(width, 3.6), dpi=100)
    x_of = {step.gen_id: float(x) for x, step in enumerate(steps) if isinstance(step, GenerationStep)}
    for x, step in enumerate(steps):
        if isinstance(step, GenerationStep):
            _draw_generation(ax, float(x), step, x_of, production, live_gallery, metric)
        else:
            _draw_backfill(ax, float(x), step, x_of)
    ax.set_xlim(-0.8, n - 0.2)
    ax.set_ylim(-1.05, 1.25)
    ax.axis("off")
    ax.set_title(title, fontsize=10)
    _legend(ax, columns=4 if width >= 9 else 2)
    fig.tight_layout()
    return fig


def lineage_picture(path: Path, timeline: Timeline, title: str) -> Path:
    """:func:`lineage_figure` saved as the PNG ``path``; returns ``path``."""
    import matplotlib.pyplot as plt

    fig = lineage_figure(timeline, title)
    fig.savefig(path)
    plt.close(fig)
    return path


def _draw_generation(
    ax,
    x: float,
    g: GenerationStep,
    x_of: dict[int, float],
    production: int | None,
    live: int | None,
    metric: str | None,
) -> None:  # type: ignore[no-untyped-def]
    colour = _colour(g)
    box = {
        "boxstyle": "round,pad=0.45",
        "facecolor": "white",
        "edgecolor": colour,
        "linewidth": 2.6 if g.gen_id == production else 1.4,
        "linestyle": "--" if g.pending else "-",
    }
    ax.text(x, 0.0, _label(g, metric), ha="center", va="center", fontsize=7.5, bbox=box, zorder=3)
    marks = []
    if g.gen_id == production:
        marks.append("★ production")
    elif g.promoted:
        marks.append("promoted")
    if g.forced:
        marks.append("(forced)")
    if marks:
        ax.text(x, 0.42, " ".join(marks), ha="center", va="bottom", fontsize=8, color=colour, weight="bold")
    if g.gen_id == live:
        ax.text(x, -0.42, "▣ live gallery", ha="center", va="top", fontsize=8, color=_ROOT)
    if g.parent_id is not None and g.parent_id in x_of:
        x0 = x_of[g.parent_id]
        ax.annotate(
            "",
            xy=(x - 0.15, 0.3),
            xytext=(x0 + 0.15, 0.3),
            arrowprops={"arrowstyle": "->", "color": colour, "lw": 1.3, "connectionstyle": "arc3,rad=-0.3"},
            zorder=2,
        )


def _draw_backfill(ax, x: float, b: BackfillStep, x_of: dict[int, float]) -> None:  # type: ignore[no-untyped-def]
    ax.scatter([x], [0.0], marker="D", s=260, color=_BACKFILL, zorder=3)
    restart = f"\nζ restarts at {_zeta(b.zeta_restart)}" if b.zeta_restart is not None else ""
    ax.text(
        x,
        -0.15,
        f"⟲ {b.kind} backfill\nwith g{b.to_gen}: {b.reembedded}/{b.total}{restart}",
        ha="center",
        va="top",
        fontsize=7,
        color=_BACKFILL,
    )
    if b.to_gen in x_of:
        ax.annotate(
            "",
            xy=(x, -0.72),
            xytext=(x_of[b.to_gen], -0.55),
            arrowprops={
                "arrowstyle": "->",
                "color": _BACKFILL,
                "lw": 1.0,
                "ls": ":",
                "connectionstyle": "arc3,rad=0.15",
            },
        )


def _legend(ax, columns: int) -> None:  # type: ignore[no-untyped-def]
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], color=_ROOT, lw=2, label="generation 0 (embedded the gallery)"),
        Line2D([], [], color=_COMPATIBLE, lw=2, label="live gallery accepts its queries"),
        Line2D([], [], color=_INCOMPATIBLE, lw=2, label="not compatible with the live gallery"),
        Line2D([], [], color=_BACKFILL, marker="D", lw=0, label="backfill"),
    ]
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, -0.12), ncol=columns, fontsize=7, frameon=False)
