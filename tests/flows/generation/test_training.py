"""Step 2 (flows/generation/training.py): a role trains into staging under the plan's run key, a finished role is
returned
without training again, the reference is an independent twin (own method, own seed), and what the method chose from
data before training (HBCT's ε) reaches the lineage row."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from components.models import load_model
from components.models.checkpoint import load_torch_safe
from flows.generation.commit import _record
from flows.generation.results import Snapshot, Trained
from flows.generation.snapshot import snapshot_data
from flows.generation.training import train_role
from flows.params import GenerationSpec, Params, apply_overrides
from flows.planning import GenerationPlan, make_plan
from registry.records import GenerationBundle, GenerationRecord, PointerRecord
from registry.tracking.registered_model import RegistrationResult
from tests.helpers import write_live_gallery, write_params

#: the loss terms HBCT adds to the base loss
HBCT_TERMS = {"entail", "contrast"}


@pytest.fixture(scope="module")
def params(tmp_path_factory) -> Params:
    return write_params(tmp_path_factory.mktemp("training") / "params.yaml")  # tiny settings: 1 epoch


@pytest.fixture(scope="module")
def g0(params: Params, tmp_path_factory) -> tuple[GenerationPlan, Snapshot, Trained]:
    """Generation 0's plan and snapshot on an empty workspace, and its model trained once."""
    plan = make_plan(params, tmp_path_factory.mktemp("training-ws"), GenerationSpec(name="g0", classes=[0, 1, 2, 3, 4]))
    snap = snapshot_data(plan)
    return plan, snap, train_role(plan, snap, "model")


def _weights(path: str | Path) -> dict[str, torch.Tensor]:
    return load_torch_safe(Path(path))["state_dict"]


def test_generation_zero_trains_one_epoch_into_staging_with_the_run_key(g0):
    plan, snap, trained = g0
    assert plan.epochs == 1 and plan.alignment == "independent"
    assert trained.role == "model" and Path(trained.checkpoint) == plan.staging_dir / "model.pt"
    assert [h["epoch"] for h in trained.history] == [1.0] and trained.resumed_from is None
    h = trained.history[0]  # generation 0: the base loss only, no alignment terms
    assert h["loss"] == pytest.approx(h["base"]) and not HBCT_TERMS & set(h)
    obj = load_torch_safe(Path(trained.checkpoint))
    assert obj["run_key"] == plan.role_run_key("model") == f"{plan.run_key}:model"
    assert obj["history"] == trained.history and obj["curvature"] == trained.curvature == 1.0
    assert not (plan.staging_dir / "checkpoints").exists()  # epoch checkpoints are removed once the model is final
    assert not plan.final_dir.exists()  # nothing outside staging
    spec = load_model(Path(trained.checkpoint)).spec
    assert spec.class_order == snap.class_order == (0, 1, 2, 3, 4) and spec.zeta == plan.zeta == 1.0
    assert (trained.output_dim, spec.output_dim) == (16, 16)


def test_a_second_call_returns_the_finished_model_without_training(g0):
    plan, snap, first = g0
    path = Path(first.checkpoint)
    mtime = path.stat().st_mtime_ns
    epochs: list[int] = []
    again = train_role(plan, snap, "model", on_epoch=lambda epoch, rec: epochs.append(epoch))
    assert epochs == []  # no epoch ran
    assert again.history == first.history and again.seconds == first.seconds
    assert again.checkpoint == first.checkpoint and again.curvature == first.curvature
    assert path.stat().st_mtime_ns == mtime  # the file was not rewritten


@pytest.fixture(scope="module")
def g1(g0, params: Params) -> tuple[GenerationPlan, Snapshot]:
    """Generation 0's model committed by hand as the live gallery's generation; generation 1 planned with HBCT."""
    plan0, snap0, trained0 = g0
    ws = plan0.workspace
    ckpt = ws.generation_dir(0) / "model.pt"
    ckpt.parent.mkdir(parents=True)
    shutil.copy2(trained0.checkpoint, ckpt)
    spec = load_model(ckpt).spec
    store = ws.lineage(params)
    record = GenerationRecord(
        id=0,
        name="g0",
        parent_id=None,
        dataset="digits",
        data_hash=snap0.data_hash,
        data_snapshot=snap0.manifest,
        class_order=list(spec.class_order),
        architecture={},
        geometry=spec.geometry,
        alignment="independent",
        hyperparameters={},
        zeta=spec.zeta,
        curvature=trained0.curvature,
        embed_dim=spec.output_dim,
        checkpoint_path=str(ckpt),
        index_path=str(ws.generation_dir(0) / "index"),
        params_digest=plan0.params_digest,
    )
    pointer = PointerRecord(0, record.index_path, "generation 0 embedded the gallery", compatible_generations=[0])
    write_live_gallery(ws.live_dir, record.index_path)  # planning verifies the live gallery
    store.commit_generation(GenerationBundle(record, pointer=pointer))
    store.close()
    plan = make_plan(params, ws.home, GenerationSpec(name="g1", alignment="hbct", classes=[0, 1, 2, 3, 4, 5]))
    return plan, snapshot_data(plan)


def test_the_reference_of_an_aligned_generation_trains_without_the_alignment_from_its_own_seed(g1):
    plan, snap = g1
    assert plan.parent is not None and plan.alignment == "hbct" and plan.reference
    assert plan.train_config("reference").seed != plan.train_config("model").seed
    epochs: list[int] = []
    steps: list[tuple[int, int]] = []
    ref = train_role(
        plan,
        snap,
        "reference",
        on_epoch=lambda epoch, rec: epochs.append(epoch),
        on_step=lambda done, total: steps.append((done, total)),
    )
    assert epochs == [1] and ref.role == "reference"
    per_epoch = snap.n_train // plan.train_config("reference").batch_size  # full batches (the last part is dropped)
    assert per_epoch > 1 and steps == [(i, per_epoch) for i in range(1, per_epoch + 1)]  # the progress bar's feed
    assert Path(ref.checkpoint) == plan.staging_dir / "reference" / "model.pt"
    model = train_role(plan, snap, "model")
    assert not HBCT_TERMS & set(ref.history[0])  # independent: the base loss only
    assert set(model.history[0]) >= HBCT_TERMS  # the model itself is aligned to its parent
    assert ref.history[0]["loss"] == pytest.approx(ref.history[0]["base"])
    assert model.history[0]["loss"] > model.history[0]["base"]
    for role, trained in (("reference", ref), ("model", model)):
        assert load_torch_safe(Path(trained.checkpoint))["run_key"] == plan.role_run_key(role)
        assert load_model(Path(trained.checkpoint)).spec.class_order == snap.class_order == (0, 1, 2, 3, 4, 5)


def test_what_the_method_chose_from_data_travels_with_the_trained_model(g1, params: Params):
    plan, snap = g1
    chosen = apply_overrides(params, {"alignment.options.hbct.epsilon_rule": "view_angle"})
    shutil.rmtree(plan.staging_dir)  # the run with the default ε staged there: start over, as its refusal says
    plan = make_plan(chosen, plan.home, GenerationSpec(name="g1", alignment="hbct", classes=[0, 1, 2, 3, 4, 5]))
    trained = train_role(plan, snap, "model")
    eps, reason = trained.choices["epsilon"], trained.choices["epsilon_reason"]
    assert eps >= plan.alignment_options["epsilon"] == 0.1 and "view-to-view ε" in reason
    assert load_torch_safe(Path(trained.checkpoint))["choices"] == trained.choices  # saved with the model
    assert train_role(plan, snap, "model").choices == trained.choices  # and read back by a retried attempt
    record = _record(plan, snap, trained, RegistrationResult("bctflow-test", "1", "run", False), index_path="index")
    assert record.hyperparameters["epsilon"] == eps and record.hyperparameters["epsilon_reason"] == reason
    assert record.hyperparameters["epsilon_rule"] == "view_angle"
