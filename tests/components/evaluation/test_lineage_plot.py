"""The lineage picture (components/evaluation/lineage_plot.py): each generation's state — production, live gallery,
compatible or not, backfill required (with its reason in short), not promoted, forced, pending — and each backfill
drawn distinctly, read from the figure's artists (texts, box face / edge colours, legend entries), not its pixels."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from matplotlib.colors import to_hex

from components.evaluation.lineage_plot import LEGEND, STYLE, lineage_figure, lineage_picture
from components.evaluation.lineage_timeline import BackfillStep, GenerationStep, Timeline

CLIP = ("99% of gallery embeddings sit on the clip radius > 95%",)
STEPS = (
    # g0 embedded the gallery; promoted, no longer production
    GenerationStep(0, "g0", "independent", 1.0, "1", None, None, promoted=True, backfill_required=False),
    # g1: compatible, but its gallery sits on the clip radius: backfill required, not promoted (then backfilled)
    GenerationStep(1, "g1", "hbct", 1.2, "2", 0, True, cross=0.657, old_old=0.59, backfill_required=True,
                   backfill_reasons=CLIP, backfill_short=("clip 99% > 95%",)),
    # g2: not compatible with the live gallery, backfill required for three reasons, not promoted
    GenerationStep(2, "g2", "hbct", 1.4, "3", 1, False, cross=0.41, old_old=0.57, backfill_required=True,
                   backfill_reasons=("a", "b", "c"), backfill_short=("cross 0.410 ≤ old 0.570", "ζ 1.40 > 1.30",
                                                                     "clip 99% > 95%")),
    BackfillStep(1, 1, "full", 539, 539, 12.0, zeta_restart=1.0),
    # g3: backfill required (ζ), forced into production
    GenerationStep(3, "g3", "bct", 1.2, "4", 1, True, cross=0.7, old_old=0.6, promoted=True, forced=True,
                   backfill_required=True, backfill_reasons=("ζ 1.20 > ceiling 1.10",),
                   backfill_short=("ζ 1.20 > 1.10",)),
    # g4: being registered, compatible, not promoted, no backfill required
    GenerationStep(4, "g4", "hbct", 1.4, None, 3, True, cross=0.71, old_old=0.7, pending=True,
                   backfill_required=False),
)  # fmt: skip
TIMELINE = Timeline(STEPS, production=3, live=1, metric="map")
#: the badges' gid suffixes
BADGES = {"promotion", "live", "backfill"}


@pytest.fixture(scope="module")
def fig():
    figure = lineage_figure(TIMELINE, title="t")
    yield figure
    plt.close(figure)


def _marks(fig) -> dict[str, object]:
    """Every mark of the picture by its gid (``g1.box``, ``g1.promotion``, ``backfill1`` …)."""
    return {a.get_gid(): a for a in fig.axes[0].get_children() if a.get_gid()}


def _look(text) -> tuple[str, str, str, str, float]:  # type: ignore[no-untyped-def]
    """What a badge or box looks like: its text colour, face, edge, line style and width."""
    b = text.get_bbox_patch()
    return to_hex(text.get_color()), to_hex(b.get_facecolor()), to_hex(b.get_edgecolor()), b.get_linestyle(), b.get_lw()


def test_every_generation_box_says_what_it_is_and_its_frame_and_fill_say_its_state(fig):
    marks = _marks(fig)
    boxes = [marks[f"g{i}.box"] for i in range(5)]
    assert [b.get_text() for b in boxes] == [
        "g0 · independent\nζ 1.00 · v1",
        "g1 · hbct\nζ 1.20 · v2\n✓ map cross 0.657 vs old 0.590",
        "g2 · hbct\nζ 1.40 · v3\n✗ map cross 0.410 vs old 0.570",
        "g3 · bct\nζ 1.20 · v4\n✓ map cross 0.700 vs old 0.600",
        "g4 · hbct\nζ 1.40 · this version\n✓ map cross 0.710 vs old 0.700",
    ]
    white, amber = STYLE["plain_fill"], STYLE["backfill_fill"]
    green, red, grey = STYLE["compatible"], STYLE["incompatible"], STYLE["root"]
    # frame: compatibility (grey: generation 0); fill: a backfill still required (g1's was done: white again);
    # heavy frame: production; dashed: being registered
    assert [_look(b)[1:] for b in boxes] == [
        (white, grey, "-", 1.4),
        (white, green, "-", 1.4),
        (amber, red, "-", 1.4),
        (amber, green, "-", 2.8),
        (white, green, "--", 1.4),
    ]


def test_badges_say_production_promotion_live_gallery_and_backfill_required_each_in_its_own_colours(fig):
    marks = _marks(fig)
    badges = {gid: (m.get_text(), _look(m)) for gid, m in marks.items() if gid.split(".")[-1] in BADGES}
    white = "#ffffff"
    blue, magenta, grey = STYLE["production"], STYLE["forced"], STYLE["not_promoted"]
    live, orange = STYLE["live"], STYLE["backfill_badge"]
    assert badges == {
        "g0.promotion": ("promoted", (blue, white, blue, "-", 1.2)),
        "g1.promotion": ("✗ not promoted", (white, grey, grey, "-", 1.2)),
        "g1.live": ("▣ live gallery", (white, live, live, "-", 1.2)),
        "g2.promotion": ("✗ not promoted", (white, grey, grey, "-", 1.2)),
        "g2.backfill": (
            "⚠ backfill required\ncross 0.410 ≤ old 0.570\nζ 1.40 > 1.30\n+1 more",
            (white, orange, orange, "-", 1.2),
        ),
        "g3.promotion": ("★ production (forced)", (white, magenta, magenta, "-", 1.2)),
        "g3.backfill": ("⚠ backfill required\nζ 1.20 > 1.10", (white, orange, orange, "-", 1.2)),
        "g4.promotion": ("✗ not promoted", (white, grey, grey, "-", 1.2)),
    }
    # each state its own look: no two different states share face and edge
    looks = {text.split("\n")[0]: look[1:3] for text, look in badges.values()}
    assert len(set(looks.values())) == len(looks) == 5
    # above the box: promotion; below: the live gallery, then the backfill required
    ys = {gid: marks[gid].get_position()[1] for gid in badges}
    assert {ys[g] for g in badges if g.endswith("promotion")} == {0.42}
    assert ys["g1.live"] == -0.36 and ys["g2.backfill"] == ys["g3.backfill"] == -0.62


def test_a_production_that_passed_the_gate_is_blue_and_a_backfill_is_a_diamond_joined_to_its_generation(fig):
    marks = _marks(fig)
    assert "production" not in marks["g0.promotion"].get_text()
    clean = lineage_figure(Timeline(STEPS[:2], production=0, live=0, metric="map"), "t")
    g0 = _marks(clean)["g0.promotion"]
    assert (g0.get_text(), _look(g0)[1]) == ("★ production", STYLE["production"])
    plt.close(clean)
    assert marks["backfill1"].get_text() == "⟲ full backfill\nwith g1: 539/539\nζ restarts at 1.00"
    assert [to_hex(c) for c in marks["backfill1.diamond"].get_facecolor()] == [STYLE["backfill_step"]]
    arc = marks["backfill1.arc"]
    assert (arc.xyann[0], arc.xy[0]) == (1.0, 3.0)  # from g1 (x=1) to the backfill (x=3)
    # one arc per parent, coloured as the child's frame
    arcs = {gid: marks[gid] for gid in marks if gid.endswith(".arc") and gid.startswith("g")}
    assert sorted(arcs) == ["g1.arc", "g2.arc", "g3.arc", "g4.arc"]
    assert [to_hex(arcs[g].arrow_patch.get_edgecolor()) for g in sorted(arcs)] == [
        STYLE["compatible"],
        STYLE["incompatible"],
        STYLE["compatible"],
        STYLE["compatible"],
    ]


def test_the_legend_names_every_mark_in_the_colours_it_is_drawn_in(fig):
    legend = fig.axes[0].get_legend()
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels == [*LEGEND, "being registered (dashed frame)", "⟲ backfill"]
    *patches, registering, backfill = legend.legend_handles
    drawn = [(to_hex(p.get_facecolor()), to_hex(p.get_edgecolor())) for p in patches]
    assert drawn == [(to_hex(face), to_hex(edge)) for face, edge in LEGEND.values()]
    assert len(set(drawn)) == len(drawn)  # no two entries look the same
    # the legend's colours are the ones the marks are drawn in
    marks = _marks(fig)
    assert LEGEND["★ forced promotion"][0] == _look(marks["g3.promotion"])[1]
    assert LEGEND["✗ not promoted"][0] == _look(marks["g1.promotion"])[1]
    assert LEGEND["▣ live gallery (its embeddings)"][0] == _look(marks["g1.live"])[1]
    assert LEGEND["⚠ backfill required: why"][0] == _look(marks["g2.backfill"])[1]
    assert LEGEND["backfill required (amber box)"][0] == _look(marks["g2.box"])[1]
    assert LEGEND["✗ not compatible with it"][1] == _look(marks["g2.box"])[2]
    assert (registering.get_linestyle(), _look(marks["g4.box"])[3]) == ("--", "--")
    assert backfill.get_marker() == "D" and to_hex(backfill.get_color()) == STYLE["backfill_step"]


def test_the_picture_is_a_png(tmp_path: Path):
    path = lineage_picture(tmp_path / "l.png", Timeline(STEPS[:1], production=0, live=0, metric="map"), title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
