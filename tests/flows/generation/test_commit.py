"""The commit step (flows/generation/commit.py): the live gallery and the promotion gate read the measured
compatibility fact, with ``backfill.rules.require_compatibility: false`` as well; a failed commit undoes every side
effect."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from components.errors import IncompatibleQueryError
from components.evaluation import DerivedMetrics
from components.indexing.live import LivePointer
from components.indexing.parts import GalleryParts
from components.indexing.version import GalleryVersion
from flows.generation.commit import PRODUCTION_ALIAS, commit
from flows.generation.mlflow_run import open_run
from flows.generation.registration import register
from flows.generation.results import Evaluation, EvaluationGallery, Trained
from flows.generation.snapshot import snapshot_data
from flows.params import GenerationSpec
from flows.planning import GenerationPlan, make_plan
from flows.recovery.reconcile import inspect_workspace, roll_forward
from registry.records import DecisionRecord
from tests.helpers import write_params


def _stage(plan: GenerationPlan) -> tuple[Trained, EvaluationGallery]:
    """Stage generation 0's model and gallery as the new generation's (what training and indexing would leave)."""
    g0 = plan.workspace.generation_dir(0)
    shutil.copytree(g0, plan.staging_dir, dirs_exist_ok=True, ignore=shutil.ignore_patterns("reference"))
    trained = Trained("model", str(plan.staging_dir / "model.pt"), [], 1.0, "cpu", None, 1.0, 16, 17)
    return trained, EvaluationGallery(
        "model", str(plan.staging_dir / "gallery"), str(plan.staging_dir / "index"), 539, 0.5
    )


def _commit(home: Path, params_file: Path, name: str, compatible: bool) -> GenerationPlan:
    """Plan, snapshot, stage, register and commit a generation whose evaluation measured ``compatible``."""
    params = write_params(params_file, ["backfill.rules.require_compatibility=false"])
    plan = make_plan(params, home, GenerationSpec(name=name, alignment="hbct", reference=False))
    snap = snapshot_data(plan)
    trained, gallery = _stage(plan)
    ev = Evaluation([], DerivedMetrics(), {}, DecisionRecord(False, [], [], 0), {}, [], [], compatible)
    commit(plan, snap, trained, gallery, ev, register(plan, snap, trained, gallery, ev, open_run(plan)))
    return plan


def _queries_accepted(home: Path, gen_id: int) -> bool:
    live = LivePointer(home / "live")
    g0 = GalleryParts(GalleryVersion(home / "generations" / "gen_000").evaluation_gallery()).embeddings()
    vectors = g0.vectors()[:3].astype(np.float32)
    try:
        live.search(vectors, 2, query_generation=gen_id)
    except IncompatibleQueryError:
        return False
    return True


def test_with_require_compatibility_off_a_promoted_generation_is_served_by_the_live_gallery(g0_workspace):
    home, params_file = g0_workspace
    incompatible = _commit(home, params_file, "g1", compatible=False)
    ws, params = incompatible.workspace, incompatible.params
    tracking = ws.tracking(params)
    store = ws.lineage(params, readonly=True)
    g1 = store.generation(1)
    assert g1.compatible_with_live is False and not g1.promoted
    assert tracking.version_descriptions()["2"].startswith("not promoted; not compatible with the live gallery\n\n")
    assert not _queries_accepted(home, 1) and tracking.alias_version(PRODUCTION_ALIAS) == "1"  # g0 still serves

    compatible = _commit(home, params_file, "g2", compatible=True)
    g2 = store.generation(2)
    assert g2.compatible_with_live is True and g2.promoted
    assert tracking.alias_version(PRODUCTION_ALIAS) == g2.mlflow_version == "3"
    assert _queries_accepted(home, compatible.gen_id)  # the production generation's queries are accepted
    assert LivePointer(home / "live").pointer()["compatible_generations"] == [0, 2]
    store.close()


def test_a_failed_commit_leaves_the_files_the_pointer_and_the_alias_untouched(g0_workspace, monkeypatch):
    """The SQL COMMIT comes first (docs/commit-protocol.md): when it fails, nothing else has moved yet."""
    home, params_file = g0_workspace
    params = write_params(params_file)
    plan = make_plan(params, home, GenerationSpec(name="g1", alignment="hbct", reference=False))
    snap = snapshot_data(plan)
    trained, gallery = _stage(plan)
    ev = Evaluation([], DerivedMetrics(), {}, DecisionRecord(False, [], [], 0), {}, [], [], True)
    reg = register(plan, snap, trained, gallery, ev, open_run(plan))
    description_before = plan.workspace.tracking(params).model_description()
    pointer_before = LivePointer(home / "live").pointer()
    store = plan.workspace.lineage(params)

    def fail_at_commit(self, bundle, before_commit=None):
        raise RuntimeError("connection lost at COMMIT")

    monkeypatch.setattr(type(store), "commit_generation", fail_at_commit)
    with pytest.raises(RuntimeError, match="connection lost"):
        commit(plan, snap, trained, gallery, ev, reg)
    assert LivePointer(home / "live").pointer() == pointer_before
    assert plan.workspace.tracking(params).alias_version(PRODUCTION_ALIAS) == "1"
    assert plan.workspace.tracking(params).model_description() == description_before  # still generation 0's picture
    assert (plan.staging_dir / "model.pt").exists() and not plan.final_dir.exists()
    store.close()


def test_the_model_description_follows_the_lineage(g0_workspace):
    """After a commit the registered model's description shows the new generation's lineage picture, and each
    version's description leads with its generation's state as the lineage has it now (g0's changed: g1 replaced it
    in production); one that lags (a process killed between the commit and the descriptions, a description written
    before versions led with their state) is reported by `doctor` and rolled forward."""
    home, params_file = g0_workspace
    plan = _commit(home, params_file, "g1", compatible=True)
    ws, params = plan.workspace, plan.params
    tracking = ws.tracking(params)
    with ws.lineage(params, readonly=True) as store:
        g1 = store.generation(1)
    description = tracking.model_description()
    assert f"get-artifact?path=lineage%2Flineage.png&run_uuid={g1.mlflow_run_id}" in description
    assert f"[{g1.mlflow_run_id}](#/runs/{g1.mlflow_run_id})" in description
    versions = tracking.version_descriptions()
    assert versions["2"].split("\n\n")[:2] == [
        "production; compatible with the live gallery",
        "Generation 1 (g1) of the bctflow lineage.",
    ]
    assert versions["1"].split("\n\n")[:2] == [
        "promoted, no longer production; its embeddings fill the live gallery",
        "Generation 0 (g0) of the bctflow lineage.",
    ]
    tracking.set_model_description("stale")
    tracking.set_version_description("1", versions["1"].partition("\n\n")[2])  # as written before state lines
    assert [f.what for f in inspect_workspace(ws, params)] == [
        "the registered model's description does not show the newest generation's lineage",
        "MLflow version 1's description does not lead with g0's state",
    ]
    assert [f.repaired for f in roll_forward(ws, params)] == [True, True]
    assert tracking.model_description() == description and inspect_workspace(ws, params) == []
    assert tracking.version_descriptions() == versions
