"""The registered model's description that shows the lineage picture (flows/steps/lineage_view.py); the picture's
timeline is tested in tests/registry/test_timeline.py, the pending generation at its end in test_registration.py."""

from __future__ import annotations

from pathlib import Path

from flows.steps.lineage_view import model_description
from registry.lineage import LineageStore
from registry.tracking.registered_model import MODEL_DESCRIPTION
from tests.helpers import lineage_story


def test_the_model_description_shows_the_newest_generations_picture(tmp_path: Path):
    with LineageStore(f"sqlite:///{tmp_path / 'empty.db'}") as empty:
        assert model_description(empty) is None
    with lineage_story(tmp_path / "lineage.db") as store:
        text = model_description(store)
    assert text.startswith(MODEL_DESCRIPTION)
    assert "as of generation 2 (g2, version 3; its run [run2](#/runs/run2)" in text
    assert "![lineage as of generation 2](get-artifact?path=lineage%2Flineage.png&run_uuid=run2)" in text
