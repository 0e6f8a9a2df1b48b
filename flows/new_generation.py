"""The ``new-generation`` flow: snapshot → train → index → evaluate → register → lineage.

Each task calls one step of :mod:`flows.steps`. Registration and
the lineage commit retry on transient failures; if the commit still fails the
MLflow registration is rolled back, so a failed run leaves the lineage DB, the
registry and the live index as they were.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.lock import workspace_lock
from flows.params import GenerationSpec, load_params_with
from flows import steps
from flows.plan import GenerationPlan, make_plan
from flows.progress import progress_bar
from flows.artifacts import generation_markdown
from flows.workspace import Workspace
from flows.transient import retry_condition


@task(name="plan", cache_policy=NO_CACHE)
def plan_task(home: str, params_path: str, overrides: list[str], spec: dict[str, Any] | None) -> GenerationPlan:
    params = load_params_with(params_path, overrides)
    ws = Workspace(home)
    store = steps.store_for(params, ws)
    try:
        plan = make_plan(params, ws, store, GenerationSpec(**spec) if spec else None)
    finally:
        store.close()
    log = get_run_logger()
    parent = f"parent g{plan.parent.id}" if plan.parent else "no parent (generation 0)"
    log.info("generation %d (%s): %s, %s, ζ=%s, %s", plan.gen_id, plan.name, plan.alignment, plan.geometry, plan.zeta, parent)
    for note in plan.notes:
        log.info(note)
    return plan


@task(name="snapshot-data", cache_policy=NO_CACHE)
def snapshot_task(plan: GenerationPlan) -> steps.Snapshot:
    snap = steps.snapshot_data(plan)
    get_run_logger().info("data snapshot %s: %d samples, %d classes, DVC md5 %s", snap.name, snap.n_train, len(snap.class_order), snap.data_hash)
    return snap


@task(name="train", cache_policy=NO_CACHE)
def train_task(plan: GenerationPlan, snap: steps.Snapshot, role: str) -> steps.Trained:
    log = get_run_logger()

    with progress_bar(f"g{plan.gen_id} {role}: epochs", plan.epochs) as advance:

        def on_epoch(epoch: int, rec: dict) -> None:
            terms = ", ".join(f"{k}={v:.3f}" for k, v in rec.items() if k not in ("epoch", "lr"))
            log.info("[%s] epoch %d/%d %s", role, epoch, plan.epochs, terms)
            advance(1)

        trained = steps.train_role(plan, snap, role, on_epoch)
    log.info("[%s] trained on %s in %.1fs", role, trained.device, trained.seconds)
    return trained


@task(name="embed-and-index", cache_policy=NO_CACHE)
def gallery_task(plan: GenerationPlan, trained: steps.Trained) -> steps.Gallery:
    n = len(steps.load_splits(plan.p, plan.workspace).test)
    with progress_bar(f"g{plan.gen_id} {trained.role}: embedding the gallery", n) as advance:
        return steps.build_gallery(plan, trained, on_batch=advance)


@task(name="evaluate", cache_policy=NO_CACHE)
def evaluate_task(plan: GenerationPlan, snap: steps.Snapshot, trained: steps.Trained, gallery: steps.Gallery, ref: steps.Trained | None, ref_gallery: steps.Gallery | None) -> steps.Evaluation:
    ev = steps.evaluate(plan, snap, trained, gallery, ref, ref_gallery)
    log = get_run_logger()
    log.info("self %s | cross %s", ev.summary["self"], ev.summary["cross"])
    if ev.decision.required:
        log.warning("backfill required: %s", "; ".join(ev.decision.reasons))
    return ev


@task(name="register-mlflow", cache_policy=NO_CACHE, retries=3, retry_delay_seconds=2, retry_condition_fn=retry_condition)
def register_task(plan: GenerationPlan, snap: steps.Snapshot, trained: steps.Trained, gallery: steps.Gallery, ev: steps.Evaluation) -> Any:
    reg = steps.register(plan, snap, trained, gallery, ev)
    get_run_logger().info("registered %s version %s (run %s)", reg.model_name, reg.version, reg.run_id)
    return reg


@task(name="update-lineage", cache_policy=NO_CACHE, retries=3, retry_delay_seconds=2, retry_condition_fn=retry_condition)
def commit_task(plan: GenerationPlan, snap: steps.Snapshot, trained: steps.Trained, gallery: steps.Gallery, ev: steps.Evaluation, reg: Any, ref: steps.Trained | None) -> None:
    steps.commit(plan, snap, trained, gallery, ev, reg, ref)


@task(name="rollback-mlflow", cache_policy=NO_CACHE, retries=3, retry_delay_seconds=2)
def rollback_task(plan: GenerationPlan, reg: Any) -> None:
    steps.rollback(plan, reg)
    get_run_logger().warning("lineage update failed: MLflow version %s of %s was removed again", reg.version, reg.model_name)


@flow(name="new-generation", log_prints=True)
def new_generation(
    home: str,
    params_path: str = "params.yaml",
    overrides: list[str] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Create the next generation in the workspace at ``home`` and return its evaluation summary."""
    with workspace_lock(Path(home), "a new generation is being created"):
        return _new_generation(home, params_path, overrides, spec)


def _new_generation(home: str, params_path: str, overrides: list[str] | None, spec: dict[str, Any] | None) -> dict[str, Any]:
    plan = plan_task(home, params_path, list(overrides or []), spec)
    snap = snapshot_task(plan)
    # the reference first: some methods (BT²) learn from it
    ref = train_task(plan, snap, "reference") if plan.reference else None
    trained = train_task(plan, snap, "model")
    gallery = gallery_task(plan, trained)
    ref_gallery = gallery_task(plan, ref) if ref is not None else None
    ev = evaluate_task(plan, snap, trained, gallery, ref, ref_gallery)
    reg = register_task(plan, snap, trained, gallery, ev)
    try:
        commit_task(plan, snap, trained, gallery, ev, reg, ref)
    except BaseException:
        rollback_task(plan, reg)
        raise
    summary = {**ev.summary, "mlflow_model": reg.model_name, "mlflow_version": reg.version}
    create_markdown_artifact(generation_markdown(summary), key=f"generation-{plan.gen_id}", description=f"bctflow generation {plan.gen_id}")
    return summary
