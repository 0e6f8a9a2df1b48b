"""The lineage picture (components/evaluation/lineage_plot.py): what each box, arc and mark says, and its colours."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.colors import to_hex

from components.evaluation.lineage_plot import lineage_figure, lineage_picture
from components.evaluation.lineage_timeline import BackfillStep, GenerationStep, Timeline

STEPS = (
    GenerationStep(0, "g0", "independent", 1.0, "1", None, None, promoted=True),
    GenerationStep(1, "g1", "hbct", 1.2, "2", 0, True, cross=0.632, old_old=0.575, promoted=True),
    GenerationStep(2, "g2", "hbct", 1.4, "3", 1, False, cross=0.41, old_old=0.57),
    BackfillStep(1, 1, "full", 539, 539, 12.0, zeta_restart=1.0),
    GenerationStep(3, "g3", "bct", 1.2, "4", 1, True, cross=0.7, old_old=0.6, promoted=True, forced=True),
    GenerationStep(4, "g4", "hbct", 1.4, None, 3, True, cross=0.71, old_old=0.7, pending=True),
)
TIMELINE = Timeline(STEPS, production=3, live=1, metric="map")
GREEN, RED, GREY = "#2e7d32", "#c62828", "#455a64"


def _texts(fig) -> list:
    return [t for t in fig.axes[0].texts if type(t).__name__ == "Text"]


def _at(fig, text: str) -> list[tuple[float, float]]:
    return [t.get_position() for t in _texts(fig) if t.get_text() == text]


def test_every_generation_says_its_alignment_zeta_version_and_compatibility():
    fig = lineage_figure(TIMELINE, title="t")
    boxes = {t.get_text(): t.get_bbox_patch() for t in _texts(fig) if t.get_bbox_patch() is not None}
    assert list(boxes) == [
        "g0 · independent\nζ 1.00 · v1",
        "g1 · hbct\nζ 1.20 · v2\n✓ map cross 0.632 vs old 0.575",
        "g2 · hbct\nζ 1.40 · v3\n✗ map cross 0.410 vs old 0.570",
        "g3 · bct\nζ 1.20 · v4\n✓ map cross 0.700 vs old 0.600",
        "g4 · hbct\nζ 1.40 · this version\n✓ map cross 0.710 vs old 0.700",
    ]
    # the frame: green when the live gallery accepted the queries, red when not, grey for generation 0; the
    # production generation's frame is heavier, the one being registered dashed
    assert [to_hex(b.get_edgecolor()) for b in boxes.values()] == [GREY, GREEN, RED, GREEN, GREEN]
    assert [b.get_linewidth() for b in boxes.values()] == [1.4, 1.4, 1.4, 2.6, 1.4]
    assert [b.get_linestyle() for b in boxes.values()] == ["-", "-", "-", "-", "--"]
    plt.close(fig)


def test_marks_backfills_and_one_arc_per_parent():
    fig = lineage_figure(TIMELINE, title="t")
    assert _at(fig, "promoted") == [(0.0, 0.42), (1.0, 0.42)]  # above g0 and g1
    assert _at(fig, "★ production (forced)") == [(4.0, 0.42)]  # above g3, forced
    assert _at(fig, "▣ live gallery") == [(1.0, -0.42)]  # under g1, whose full backfill made its gallery live
    assert _at(fig, "⟲ full backfill\nwith g1: 539/539\nζ restarts at 1.00") == [(3.0, -0.15)]  # between g2 and g3
    arcs = [a for a in fig.axes[0].texts if type(a).__name__ == "Annotation"]
    starts = sorted(a.xyann for a in arcs)  # from the parent (arcs) and from g1 to the backfill
    assert starts == [(0.15, 0.3), (1.0, -0.55), (1.15, 0.3), (1.15, 0.3), (4.15, 0.3)]
    assert [to_hex(a.arrow_patch.get_edgecolor()) for a in arcs if a.xyann[1] == 0.3] == [GREEN, RED, GREEN, GREEN]
    plt.close(fig)


def test_the_picture_is_a_png(tmp_path: Path):
    path = lineage_picture(tmp_path / "l.png", Timeline(STEPS[:1], production=0, live=0, metric="map"), title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
