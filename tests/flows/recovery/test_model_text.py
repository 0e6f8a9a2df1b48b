"""The registered model's description that shows the lineage picture, and a version's description led by its state
(flows/recovery/model_text.py); the picture's timeline is tested in tests/registry/test_timeline.py, the pending
generation at its end in test_registration.py."""

from __future__ import annotations

from pathlib import Path

from flows.recovery.model_text import model_description, with_state
from registry.lineage import LineageDB
from registry.tracking.registered_model import MODEL_DESCRIPTION
from tests.helpers import lineage_story


def test_the_model_description_shows_the_newest_generations_picture(tmp_path: Path):
    with LineageDB(f"sqlite:///{tmp_path / 'empty.db'}") as empty:
        assert model_description(empty) is None
    with lineage_story(tmp_path / "lineage.db") as store:
        text = model_description(store)
    assert text.startswith(MODEL_DESCRIPTION)
    assert "as of generation 2 (g2, version 3; its run [run2](#/runs/run2)" in text
    assert "![lineage as of generation 2](get-artifact?path=lineage%2Flineage.png&run_uuid=run2)" in text


def test_a_version_description_is_led_by_its_state_line_which_a_new_state_replaces():
    chain = "Generation 1 (g1) of the bctflow lineage.\n\nChain: g0 → g1"
    led = with_state(chain, "backfill required, not promoted: clip")  # a description written before state lines
    assert led == "backfill required, not promoted: clip\n\n" + chain
    assert with_state(led, "production; its embeddings fill the live gallery") == (
        "production; its embeddings fill the live gallery\n\n" + chain
    )
    assert with_state(led, "backfill required, not promoted: clip") == led
    assert with_state("", "not promoted") == "not promoted"
