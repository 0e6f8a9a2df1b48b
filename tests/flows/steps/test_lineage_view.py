"""The lineage picture's steps read from a real lineage (flows/steps/lineage_view.py) and the registered model's
description that shows it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from components.evaluation.lineage_plot import BackfillStep, GenerationStep
from flows.steps.lineage_view import lineage_steps, model_description
from registry.lineage import LineageStore
from registry.records import BackfillRecord, EvaluationRecord, GenerationBundle, PointerRecord
from registry.tracking.registered_model import MODEL_DESCRIPTION
from tests.helpers import generation_record


def _lineage(tmp_path: Path) -> LineageStore:
    """g0 → g1 (compatible, map cross 0.6 vs g0's 0.5) → full backfill with g1 (ζ restarts at 1.0) → g2 (not
    compatible), then g2 forced into production."""
    store = LineageStore(f"sqlite:///{tmp_path / 'lineage.db'}")
    g0 = generation_record(0, None, zeta=1.0, mlflow_version="1", mlflow_run_id="run0", promoted=True)
    store.commit_generation(
        GenerationBundle(
            g0,
            evaluations=[EvaluationRecord(0, 0, "map", 0.5)],
            pointer=PointerRecord(0, "/i/0", "g0", compatible_generations=[0]),
            promotion=(None, "generation 0"),
        )
    )
    g1 = generation_record(1, 0, alignment="hbct", zeta=1.2, mlflow_version="2", mlflow_run_id="run1")
    g1.compatible_with_live = True
    store.commit_generation(GenerationBundle(g1, evaluations=[EvaluationRecord(1, 0, "map", 0.6)]))
    event = BackfillRecord(0, 1, "full", 1.0, "all", 539, 539, "/live/v1/index", True, {}, datetime.now(UTC), 1.0)
    store.record_backfill(
        event, PointerRecord(1, "/live/v1/index", "full", "/live/v1/m.pt", 1.0, [1]), [0], promote=True
    )
    g2 = generation_record(2, 1, alignment="hbct", zeta=1.2, mlflow_version="3", mlflow_run_id="run2")
    g2.compatible_with_live = False
    store.commit_generation(GenerationBundle(g2))
    store.record_promotion(2, forced=True, by="alice", reason="hotfix")
    return store


def test_the_steps_are_the_lineage_in_the_order_it_happened(tmp_path: Path):
    store = _lineage(tmp_path)
    steps, production, live = lineage_steps(store, "map")
    store.close()
    assert [type(s).__name__ for s in steps] == ["GenerationStep", "GenerationStep", "BackfillStep", "GenerationStep"]
    g0, g1, backfill, g2 = steps
    assert isinstance(g1, GenerationStep) and (g1.parent_id, g1.compatible, g1.zeta, g1.version) == (0, True, 1.2, "2")
    assert (g1.cross, g1.old_old) == (0.6, 0.5)  # its queries on g0's gallery vs g0's own, on the decision metric
    assert isinstance(g0, GenerationStep) and g0.promoted and not g0.forced and g0.parent_id is None
    assert backfill == BackfillStep(to_gen=1, kind="full", reembedded=539, total=539, zeta_restart=1.0)
    assert isinstance(g2, GenerationStep) and g2.compatible is False and g2.forced and g2.promoted
    assert (production, live) == (2, 1)  # g2 forced into production; g1's backfill filled the live gallery


def test_the_model_description_shows_the_newest_generations_picture(tmp_path: Path):
    assert model_description(LineageStore(f"sqlite:///{tmp_path / 'empty.db'}")) is None
    store = _lineage(tmp_path)
    text = model_description(store)
    store.close()
    assert text.startswith(MODEL_DESCRIPTION)
    assert "as of generation 2 (g2, version 3; its run [run2](#/runs/run2)" in text
    assert "![lineage as of generation 2](get-artifact?path=lineage%2Flineage.png&run_uuid=run2)" in text
