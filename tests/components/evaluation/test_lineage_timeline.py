"""A generation's state in one line (components/evaluation/lineage_timeline.py, ``Timeline.state``: what leads its
registered version's description) and a decision's reasons in short (``short_reasons``: what the picture shows)."""

from __future__ import annotations

import pytest

from components.evaluation.lineage_timeline import BackfillStep, GenerationStep, Timeline, short_reasons

CLIP = "99% of gallery embeddings sit on the clip radius > 95% (the time axis has no room left to encode confidence)"
G0 = GenerationStep(0, "g0", "independent", 1.0, "1", None, None, promoted=True, backfill_required=False)
G1 = GenerationStep(1, "g1", "hbct", 1.2, "2", 0, True, backfill_required=True, backfill_reasons=(CLIP,))


def test_the_state_line_leads_with_what_matters_most():
    demo = Timeline((G0, G1), production=0, live=0)
    assert demo.state(0) == "production; its embeddings fill the live gallery"
    assert demo.state(1) == f"backfill required, not promoted: {CLIP}; compatible with the live gallery"
    # a compatible generation that passed the gate; the one it replaced in production
    g2 = GenerationStep(2, "g2", "hbct", 1.4, "3", 0, True, promoted=True, backfill_required=False)
    passed = Timeline((G0, G1, g2), production=2, live=0)
    assert passed.state(2) == "production; compatible with the live gallery"
    assert passed.state(0) == "promoted, no longer production; its embeddings fill the live gallery"
    # refused without a backfill (the compatibility rule switched off); forced in against a ζ rule
    refused = GenerationStep(3, "g3", "hbct", 1.4, "4", 0, False, backfill_required=False)
    forced = GenerationStep(
        4, "g4", "hbct", 3.2, "5", 0, True, promoted=True, forced=True, backfill_required=True,
        backfill_reasons=("clip radius ζ 3.20 > ceiling 3.00",),
    )  # fmt: skip
    both = Timeline((G0, refused, forced), production=4, live=0)
    assert both.state(3) == "not promoted; not compatible with the live gallery"
    assert both.state(4) == (
        "backfill required: clip radius ζ 3.20 > ceiling 3.00; production (forced); compatible with the live gallery"
    )


def test_a_backfill_with_the_generation_settles_its_required_backfill():
    after = Timeline(
        (G0, G1, BackfillStep(1, 1, "full", 539, 539, 1.0, 1.0)), production=1, live=1
    )  # what `bctflow backfill --generation 1` leaves
    assert not after.needs_backfill(after.generation(1))
    assert after.state(1) == "production; its embeddings fill the live gallery"
    assert Timeline((G0, G1), production=0, live=0).needs_backfill(G1)
    with pytest.raises(KeyError):
        after.generation(7)


def test_short_reasons_are_each_failed_checks_short_text_or_its_rule_and_numbers():
    checks = [
        {"rule": "compatibility", "value": 0.6, "threshold": 0.5, "passed": True, "detail": "…", "short": "ok"},
        {"rule": "clip_fraction_max", "value": 0.99, "threshold": 0.95, "passed": False, "short": "clip 99% > 95%"},
        {"rule": "zeta_ceiling", "value": 3.2, "threshold": 3.0, "passed": False, "detail": "ζ 3.20 > 3.00"},
        {"rule": "p_com_floor", "passed": False, "detail": "P_com below the floor"},
    ]
    # the last two were recorded before rules wrote a short text: their rule and numbers stand in
    assert short_reasons(checks) == ("clip 99% > 95%", "zeta_ceiling 3.2 vs 3", "p_com_floor")
    assert short_reasons([]) == ()
