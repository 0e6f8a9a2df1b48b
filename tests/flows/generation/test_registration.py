"""Step 5 (flows/generation/registration.py): the promotion gate, the chain written into the MLflow description, and the
registration itself (run, version, tags, aliases) in a real SQLite MLflow store."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from mlflow import MlflowClient

from components.evaluation import DerivedMetrics
from components.evaluation.lineage_timeline import GenerationStep
from flows.generation.lineage_view import registering_timeline
from flows.generation.mlflow_run import log_snapshot, open_run
from flows.generation.registration import chain_description, gate_failures, register
from flows.generation.results import Evaluation, EvaluationGallery, Snapshot, Trained
from flows.generation.snapshot import snapshot_data
from flows.params import GenerationSpec, load_params
from flows.planning import GenerationPlan, make_plan
from registry.lineage import LineageDB
from registry.records import BackfillRecord, DecisionRecord, GenerationBundle, GenerationRecord, PointerRecord
from tests.helpers import copy_workspace, generation_record

LIVE = "the live gallery does not accept its queries (they fail the compatibility criterion against it)"
COMPAT_OK = {"rule": "compatibility", "passed": True, "detail": "cross map 0.60 > self map 0.50"}
COMPAT_FAIL = {"rule": "compatibility", "passed": False, "detail": "cross map 0.40 ≤ self map 0.50"}
ZETA_OK = {"rule": "zeta_ceiling", "passed": True, "detail": "ζ 1.20 ≤ 3.00"}
ZETA_FAIL = {"rule": "zeta_ceiling", "passed": False, "detail": "ζ 3.20 > 3.00"}
CLIP_FAIL = {"rule": "clip_fraction_max", "passed": False, "detail": "clip fraction 0.99 > 0.95"}


@pytest.mark.parametrize(
    ("compatible", "checks", "expected"),
    [
        (True, [], []),
        (None, [], []),  # not recorded (older lineage): only the rules speak
        (True, [COMPAT_OK, ZETA_OK], []),
        (None, [ZETA_FAIL], [ZETA_FAIL["detail"]]),
        (True, [ZETA_OK, ZETA_FAIL, CLIP_FAIL], [ZETA_FAIL["detail"], CLIP_FAIL["detail"]]),
        (True, [COMPAT_FAIL], [COMPAT_FAIL["detail"]]),  # the rule's own verdict counts
        (False, [], [LIVE]),  # no rule asked, yet the live gallery refuses its queries
        (False, [ZETA_OK], [LIVE]),
        (False, [COMPAT_OK, ZETA_FAIL], [LIVE, ZETA_FAIL["detail"]]),  # the fact first, then the failed rules
        (False, [COMPAT_FAIL], [COMPAT_FAIL["detail"]]),  # the failed compatibility rule says it once
        (False, [COMPAT_FAIL, CLIP_FAIL], [COMPAT_FAIL["detail"], CLIP_FAIL["detail"]]),
    ],
)
def test_gate_failures(compatible: bool | None, checks: list[dict], expected: list[str]):
    assert gate_failures(compatible, checks) == expected


@pytest.fixture(scope="module")
def g0(g0_template, tmp_path_factory) -> tuple[Path, Path]:
    """(home, params file) of a workspace holding generation 0 made by the real flow (read-only for the lineage)."""
    return copy_workspace(g0_template, tmp_path_factory.mktemp("registration"))


def _g1_plan(home: Path, params_file: Path) -> GenerationPlan:
    return make_plan(load_params(params_file), home, GenerationSpec(name="g1", alignment="hbct"))


def _evaluation(decision: DecisionRecord, compatible: bool = False) -> Evaluation:
    summary = {"self": {"map": 0.7}, "cross": {"map": 0.6}, "parent_self": {"map": 0.5}}
    return Evaluation([], DerivedMetrics(), {}, decision, summary, [], [], compatible)


def test_the_chain_lists_the_lineage_and_the_planned_generation(g0):
    home, params_file = g0
    plan = _g1_plan(home, params_file)
    no_decision = DecisionRecord(False, [], [], 0)
    with plan.workspace.lineage(plan.params, readonly=True) as store:
        g = store.generation(0)
    timeline = registering_timeline(plan, _evaluation(no_decision, compatible=True), True)
    no = chain_description(plan, timeline, no_decision, "run1")
    yes = chain_description(
        plan, timeline, DecisionRecord(True, ["ζ above the ceiling", "clip saturated"], [], 0), "run1"
    )
    assert g.mlflow_version == "1"
    # the picture's steps: g0, then g1 pending at the end, with its cross / old-old on the decision metric
    *_, pending = timeline.steps
    assert isinstance(pending, GenerationStep) and pending.pending and (pending.cross, pending.old_old) == (0.6, 0.5)
    assert (pending.gen_id, pending.parent_id, pending.compatible, pending.version) == (1, 0, True, None)
    assert (timeline.production, timeline.live, timeline.metric) == (1, 0, plan.params.backfill.rules.metric)
    assert no.split("\n\n") == [
        "production; compatible with the live gallery",  # the state first: MLflow's versions table shows it
        "Generation 1 (g1) of the bctflow lineage.",
        "Chain: g0 [independent, ζ=1.00, v1] → g1 [hbct, ζ=1.20, aligned to g0, this version]",
        "Aligned to: generation 0, whose embeddings fill the live gallery.",
        "Backfill required: no.",
        "The lineage as this version was registered (its run's `lineage/lineage.png`):",
        "![lineage as generation 1 is registered](get-artifact?path=lineage%2Flineage.png&run_uuid=run1)",
    ]
    assert yes.split("\n\n")[-3] == "Backfill required: yes — ζ above the ceiling; clip saturated."
    # a generation whose evaluation required a backfill: the picture's pending box and the state line say so
    clip = "99% of gallery embeddings sit on the clip radius > 95%"
    required = DecisionRecord(True, [clip], [COMPAT_OK, {**CLIP_FAIL, "short": "clip 99% > 95%"}], 0)
    refused = registering_timeline(plan, _evaluation(required, compatible=True), False)
    *_, pending = refused.steps
    assert isinstance(pending, GenerationStep) and not pending.promoted
    assert (pending.backfill_required, pending.backfill_reasons, pending.backfill_short) == (
        True,
        (clip,),
        ("clip 99% > 95%",),
    )
    assert chain_description(plan, refused, required, "run1").split("\n\n")[0] == (
        f"backfill required, not promoted: {clip}; compatible with the live gallery"
    )


def _record(gid: int, zeta: float) -> GenerationRecord:
    alignment = "independent" if gid == 0 else "hbct"
    return generation_record(
        gid,
        None if gid == 0 else gid - 1,
        architecture={},
        alignment=alignment,
        zeta=zeta,
        index_path=f"/i/{gid}",
        mlflow_version=str(gid + 1),
    )


def test_the_chain_puts_backfills_where_they_happened(g0, tmp_path: Path):
    """g0 → g1 → ⟲ full backfill with g1 (ζ restarts) → the planned generation, in the order they happened."""
    home, params_file = g0
    store = LineageDB(f"sqlite:///{tmp_path / 'lineage.db'}")
    store.commit_generation(
        GenerationBundle(_record(0, 1.0), pointer=PointerRecord(0, "/i/0", "g0", compatible_generations=[0]))
    )
    store.commit_generation(GenerationBundle(_record(1, 1.2)))
    event = BackfillRecord(0, 1, "full", 1.0, "all", 539, 539, "/live/v1/index", True, {}, datetime.now(UTC), 1.0)
    store.record_backfill(event, PointerRecord(1, "/live/v1/index", "full backfill", "/live/v1/m.pt", 1.0, [1]), [0])
    g1 = _g1_plan(home, params_file)
    parent = g1.parent.model_copy(update={"id": 1, "name": "g1"})
    with store:  # the lineage this generation is planned against
        timeline = store.timeline(g1.params.backfill.rules.metric)
    plan = g1.model_copy(update={"gen_id": 2, "name": "g2", "zeta": 1.2, "parent": parent, "timeline": timeline})
    decision = DecisionRecord(False, [], [], 1)
    text = chain_description(plan, registering_timeline(plan, _evaluation(decision), False), decision, "run2")
    chain = text.split("\n\n")[2]
    assert chain == (
        "Chain: g0 [independent, ζ=1.00, v1] → g1 [hbct, ζ=1.20, aligned to g0, v2] → "
        "⟲ full backfill with g1 (539/539 items, ζ restarts at 1.00) → g2 [hbct, ζ=1.20, aligned to g1, this version]"
    )


@pytest.fixture
def staged(g0) -> Iterator[tuple[GenerationPlan, Snapshot]]:
    """Generation 1 planned and snapshotted, with generation 0's files staged as its model and gallery (what training
    and indexing would leave); staging is removed afterwards, so the next test plans generation 1 afresh."""
    plan = _g1_plan(*g0)
    snap = snapshot_data(plan)
    shutil.copytree(plan.workspace.generation_dir(0), plan.staging_dir, dirs_exist_ok=True)
    yield plan, snap
    shutil.rmtree(plan.staging_dir)


def test_register_creates_the_version_with_its_tags_and_aliases(staged):
    plan, snap = staged
    chosen = {"epsilon": 0.42, "epsilon_reason": "P50 of the parent's view-to-view ε over 2000 training images"}
    trained = Trained(
        "model",
        str(plan.staging_dir / "model.pt"),
        [{"epoch": 1.0, "loss": 2.5}],
        3.0,
        "cpu",
        None,
        1.0,
        16,
        17,
        choices=chosen,
    )
    gallery = EvaluationGallery("model", str(plan.staging_dir / "gallery"), str(plan.staging_dir / "index"), 539, 0.5)
    decision = DecisionRecord(False, [], [COMPAT_FAIL], 0)
    ev = Evaluation(
        [], DerivedMetrics(), {"clip_fraction_gallery": 0.5}, decision, {"self": {"map": 0.7}}, [], [], False
    )
    run_id = open_run(plan)
    expected_description = chain_description(plan, registering_timeline(plan, ev, False), decision, run_id)
    log_snapshot(plan, run_id, snap)
    reg = register(plan, snap, trained, gallery, ev, run_id)

    uri = plan.workspace.tracking_uri(plan.params)
    client = MlflowClient(uri, uri)
    model = plan.params.tracking.registered_model
    assert reg.model_name == model and not reg.created_model  # generation 0 created the registered model
    mv = client.get_model_version(model, reg.version)
    assert int(reg.version) > 1 and mv.run_id == reg.run_id
    assert mv.description == expected_description
    assert mv.description.split("\n\n")[0] == "not promoted; not compatible with the live gallery"
    tags = mv.tags
    assert tags["bctflow.generation"] == "1" and tags["bctflow.parent_generation"] == "0"
    assert tags["bctflow.parent_version"] == "1" and tags["bctflow.alignment"] == "hbct"
    assert tags["bctflow.zeta"] == "1.2" and tags["bctflow.data_hash"] == snap.data_hash
    assert tags["bctflow.compatible_with_live_gallery"] == "false"
    assert tags["bctflow.live_gallery_generation"] == "0"
    assert tags["bctflow.promotion"] == "not promoted: " + COMPAT_FAIL["detail"]
    assert tags["bctflow.backfill_required"] == "false"
    # aliases: gen-N for this version; the gallery (and production) stay with generation 0
    assert str(client.get_model_version_by_alias(model, "gen-1").version) == reg.version
    assert str(client.get_model_version_by_alias(model, "gen-0").version) == "1"
    assert str(client.get_model_version_by_alias(model, "gallery").version) == "1"
    assert str(client.get_model_version_by_alias(model, "production").version) == "1"

    run = client.get_run(reg.run_id)
    assert run.data.metrics["compatible_with_live_gallery"] == 0.0 and run.data.metrics["self/map"] == 0.7
    assert run.data.metrics["train_seconds"] == 3.0 and run.data.metrics["diag/clip_fraction_gallery"] == 0.5
    assert run.data.params["generation.id"] == "1" and run.data.params["data_snapshot.dvc_md5"] == snap.data_hash
    assert [m.value for m in client.get_metric_history(reg.run_id, "train/loss")] == [2.5]
    # what the method chose from data before training (HBCT's ε), with its reason, as params of the run
    assert (
        run.data.params["chosen.epsilon"] == "0.42"
        and run.data.params["chosen.epsilon_reason"] == chosen["epsilon_reason"]
    )

    with plan.workspace.lineage(plan.params, readonly=True) as store:
        assert store.count() == 1  # registration writes no lineage


def test_a_compatible_generation_is_tagged_as_promoted(staged):
    plan, snap = staged
    plan = plan.model_copy(update={"run_key": plan.run_key + "-compatible"})  # another run: its own version
    trained = Trained("model", str(plan.staging_dir / "model.pt"), [], 1.0, "cpu", None, 1.0, 16, 17)
    gallery = EvaluationGallery("model", str(plan.staging_dir / "gallery"), None, 539, 0.5)
    ev = Evaluation([], DerivedMetrics(), {}, DecisionRecord(False, [], [COMPAT_OK], 0), {}, [], [], True)
    reg = register(plan, snap, trained, gallery, ev, open_run(plan))
    uri = plan.workspace.tracking_uri(plan.params)
    client = MlflowClient(uri, uri)
    tags = client.get_model_version(reg.model_name, reg.version).tags
    assert tags["bctflow.compatible_with_live_gallery"] == "true"
    assert tags["bctflow.promotion"] == "promoted (passed the gate)"
    assert str(client.get_model_version_by_alias(reg.model_name, "gen-1").version) == reg.version
    assert client.get_run(reg.run_id).data.metrics["compatible_with_live_gallery"] == 1.0


def _artifact_files(client: MlflowClient, run_id: str, path: str | None = None) -> list[str]:
    files = []
    for a in client.list_artifacts(run_id, path):
        files += _artifact_files(client, run_id, a.path) if a.is_dir else [a.path]
    return files


def test_the_run_keeps_both_the_data_and_the_index_manifest(staged, tmp_path: Path):
    plan, snap = staged
    trained = Trained("model", str(plan.staging_dir / "model.pt"), [], 1.0, "cpu", None, 1.0, 16, 17)
    gallery = EvaluationGallery("model", str(plan.staging_dir / "gallery"), str(plan.staging_dir / "index"), 539, 0.5)
    ev = Evaluation([], DerivedMetrics(), {}, DecisionRecord(False, [], [COMPAT_OK], 0), {}, [], [], True)
    run_id = open_run(plan)
    log_snapshot(plan, run_id, snap)
    reg = register(plan, snap, trained, gallery, ev, run_id)
    uri = plan.workspace.tracking_uri(plan.params)
    client = MlflowClient(uri, uri)
    logged = []
    for i, path in enumerate(_artifact_files(client, reg.run_id)):
        logged.append(Path(client.download_artifacts(reg.run_id, path, str(tmp_path / str(i)))).read_bytes())
    assert Path(snap.manifest).read_bytes() in logged  # the generation's data, as DVC snapshotted it
    assert (plan.staging_dir / "index" / "manifest.json").read_bytes() in logged  # and its index


def test_a_second_registration_of_the_same_run_reuses_its_version(staged):
    """A run killed after registering and before its lineage commit registers nothing new when rerun."""
    plan, snap = staged
    plan = plan.model_copy(update={"run_key": plan.run_key + "-rerun"})
    trained = Trained("model", str(plan.staging_dir / "model.pt"), [], 1.0, "cpu", None, 1.0, 16, 17)
    gallery = EvaluationGallery("model", str(plan.staging_dir / "gallery"), None, 539, 0.5)
    ev = Evaluation([], DerivedMetrics(), {}, DecisionRecord(False, [], [COMPAT_OK], 0), {}, [], [], True)
    first = register(plan, snap, trained, gallery, ev, open_run(plan))
    again = register(plan, snap, trained, gallery, ev, open_run(plan))
    assert (again.version, again.run_id) == (first.version, first.run_id) and not again.created_model
    uri = plan.workspace.tracking_uri(plan.params)
    versions = MlflowClient(uri, uri).search_model_versions(f"name='{first.model_name}'")
    assert sum(v.tags.get("bctflow.run_key") == plan.run_key for v in versions) == 1
