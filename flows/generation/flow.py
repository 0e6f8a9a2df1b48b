"""The ``new-generation`` flow: MLflow run → snapshot → train → index → evaluate → register → lineage.

The flow takes the run's one :class:`~flows.planning.GenerationPlan` (made by
:func:`flows.planning.make_plan` from params parsed once) and
runs each step of :mod:`flows.generation.steps` as a task. The generation's MLflow run is
opened first, under the workspace lock, and stays active (with system metrics)
until the lineage is committed: FINISHED then, FAILED if a step fails; the next
attempt of the same run resumes it. Registration and the lineage commit retry
on transient failures; if the commit still fails the MLflow registration is
rolled back, so a failed run leaves the lineage DB, the registry and the live
index as they were. The flow run's markdown artifact links to the MLflow run,
and the MLflow run's tags name the flow run (docs/design.md §7.17).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from components.faults import crash_point
from flows.gallery.data import load_splits, open_corpus
from flows.generation import steps
from flows.planning import GenerationPlan, check_current
from flows.runtime.artifacts import generation_markdown
from flows.runtime.lock import NEW_GENERATION, workspace_lock
from flows.runtime.progress import progress_bar
from flows.runtime.transient import retry_condition
from registry.tracking.registered_model import RegistrationResult


@task(name="check-plan", cache_policy=NO_CACHE)
def check_plan_task(plan: GenerationPlan) -> None:
    """Under the workspace lock: the lineage must still be the one the plan was made against."""
    with plan.workspace.lineage(plan.params, readonly=True) as store:
        check_current(plan, store)
    log = get_run_logger()
    parent = f"parent g{plan.parent.id}" if plan.parent else "no parent (generation 0)"
    log.info(
        "generation %d (%s): %s, %s, ζ=%s, %s", plan.gen_id, plan.name, plan.alignment, plan.geometry, plan.zeta, parent
    )
    for note in plan.notes:
        log.info(note)


@task(
    name="open-mlflow-run", cache_policy=NO_CACHE, retries=3, retry_delay_seconds=2, retry_condition_fn=retry_condition
)
def open_run_task(plan: GenerationPlan) -> str:
    """The generation's MLflow run, before anything trains (resumed when an earlier attempt of this run opened it)."""
    run_id = steps.open_run(plan)
    get_run_logger().info("MLflow run %s: %s", run_id, steps.run_url(plan, run_id))
    return run_id


@task(name="snapshot-data", cache_policy=NO_CACHE)
def snapshot_task(plan: GenerationPlan, run_id: str) -> steps.Snapshot:
    snap = steps.snapshot_data(plan)
    steps.log_snapshot(plan, run_id, snap)
    get_run_logger().info(
        "data snapshot %s: %d samples, %d classes, DVC md5 %s",
        snap.name,
        snap.n_train,
        len(snap.class_order),
        snap.data_hash,
    )
    return snap


def resume_line(plan: GenerationPlan, role: str, run_id: str) -> str | None:
    """The one line a resumed training says before it goes on (None: it starts from scratch), e.g. "resuming g1
    from epoch 3 of 5 (MLflow run …)": the epochs an earlier attempt of this very run staged, and the MLflow run its
    epochs go on in (the same run, resumed by its run key and params: registry/tracking/runs.py)."""
    done = steps.staged_epochs(plan, role)
    if not done:
        return None
    who = plan.name if role == "model" else f"{plan.name}'s reference φ*"
    epochs = plan.train_config(role).epochs
    trained = ": it finished training in an earlier attempt" if done >= epochs else ""
    return f"resuming {who} from epoch {done} of {epochs} (MLflow run {run_id}){trained}"


@task(name="train", cache_policy=NO_CACHE)
def train_task(plan: GenerationPlan, snap: steps.Snapshot, role: str, run_id: str) -> steps.Trained:
    """Train the role; each epoch goes to the MLflow run as it ends (the reference φ* trains in a child run). A
    resumed training says so first (:func:`resume_line`)."""
    log = get_run_logger()
    target = steps.open_reference_run(plan, run_id) if role == "reference" else run_id
    runs = plan.workspace.tracking(plan.params).runs
    if (resuming := resume_line(plan, role, target)) is not None:
        log.info(resuming)
    try:

        def on_epoch(epoch: int, rec: dict) -> None:
            terms = ", ".join(f"{k}={v:.3f}" for k, v in rec.items() if k not in ("epoch", "lr"))
            log.info("[%s] epoch %d/%d %s", role, epoch, plan.epochs, terms)
            runs.log_epochs(target, [rec])
            crash_point("train.after_epoch")  # the fault-injection tests' kill after an epoch checkpoint

        # per batch: the loop reports (steps done, steps in all) after each step; the total is known from its first
        with progress_bar(f"g{plan.gen_id} {role}: training, {plan.epochs} epochs (batches)", None) as bar:
            trained = steps.train_role(plan, snap, role, on_epoch, on_step=bar.update)
        steps.log_training(plan, target, trained)  # epochs trained in other processes (train.nproc > 1)
    except BaseException:
        if target != run_id:
            runs.end(target, "FAILED")
        raise
    if target != run_id:
        runs.end(target, "FINISHED")
    log.info("[%s] trained on %s in %.1fs", role, trained.device, trained.seconds)
    return replace(trained, run_id=target)


@task(name="embed-and-index", cache_policy=NO_CACHE)
def gallery_task(plan: GenerationPlan, trained: steps.Trained) -> steps.EvaluationGallery:
    n = len(load_splits(plan.params, plan.workspace).test)
    corpus = open_corpus(plan.params, plan.workspace) if plan.parent is None and trained.role == "model" else None
    what = "the evaluation split" + (" and the serving corpus" if corpus is not None else "")
    total = n + (len(corpus) if corpus is not None else 0)
    with progress_bar(f"g{plan.gen_id} {trained.role}: embedding {what} (items)", total) as advance:
        return steps.embed_and_index(plan, trained, on_batch=advance)


@task(name="evaluate", cache_policy=NO_CACHE)
def evaluate_task(
    plan: GenerationPlan,
    snap: steps.Snapshot,
    trained: steps.Trained,
    gallery: steps.EvaluationGallery,
    ref: steps.Trained | None,
    ref_gallery: steps.EvaluationGallery | None,
) -> steps.Evaluation:
    ev = steps.evaluate(plan, snap, trained, gallery, ref, ref_gallery)
    log = get_run_logger()
    log.info(
        "self %s | cross %s | compatible with the live gallery: %s",
        ev.summary["self"],
        ev.summary["cross"],
        ev.compatible,
    )
    if ev.decision.required:
        log.warning("backfill required: %s", "; ".join(ev.decision.reasons))
    return ev


@task(
    name="register-mlflow", cache_policy=NO_CACHE, retries=3, retry_delay_seconds=2, retry_condition_fn=retry_condition
)
def register_task(
    plan: GenerationPlan,
    snap: steps.Snapshot,
    trained: steps.Trained,
    gallery: steps.EvaluationGallery,
    ev: steps.Evaluation,
    run_id: str,
    reference_run_id: str | None,
) -> RegistrationResult:
    reg = steps.register(plan, snap, trained, gallery, ev, run_id, reference_run_id)
    get_run_logger().info("registered %s version %s (run %s)", reg.model_name, reg.version, reg.run_id)
    return reg


@task(
    name="update-lineage", cache_policy=NO_CACHE, retries=3, retry_delay_seconds=2, retry_condition_fn=retry_condition
)
def commit_task(
    plan: GenerationPlan,
    snap: steps.Snapshot,
    trained: steps.Trained,
    gallery: steps.EvaluationGallery,
    ev: steps.Evaluation,
    reg: RegistrationResult,
    ref: steps.Trained | None,
) -> list[dict[str, Any]]:
    return steps.commit(plan, snap, trained, gallery, ev, reg, ref)


@task(name="undo-registration", cache_policy=NO_CACHE, retries=3, retry_delay_seconds=2)
def undo_registration_task(plan: GenerationPlan, reg: RegistrationResult) -> None:
    steps.undo_registration(plan, reg)
    get_run_logger().warning(
        "lineage update failed: MLflow version %s of %s was removed again", reg.version, reg.model_name
    )


@flow(name="new-generation", log_prints=True)
def new_generation(plan: GenerationPlan) -> dict[str, Any]:
    """Create the planned generation in its workspace; return its evaluation summary and, under ``lineage``, the
    committed lineage document (``bctflow lineage --json``'s)."""
    with workspace_lock(plan.workspace.home, NEW_GENERATION, plan.params.lineage.db_url):
        check_plan_task(plan)
        run_id = open_run_task(plan)
        with plan.workspace.tracking(plan.params).runs.active(run_id):  # system metrics; FINISHED / FAILED at the end
            snap = snapshot_task(plan, run_id)
            # the reference first: some methods (BT²) learn from it
            ref = train_task(plan, snap, "reference", run_id) if plan.reference else None
            trained = train_task(plan, snap, "model", run_id)
            gallery = gallery_task(plan, trained)
            ref_gallery = gallery_task(plan, ref) if ref is not None else None
            ev = evaluate_task(plan, snap, trained, gallery, ref, ref_gallery)
            reg = register_task(plan, snap, trained, gallery, ev, run_id, ref.run_id if ref else None)
            try:
                lineage = commit_task(plan, snap, trained, gallery, ev, reg, ref)
            except BaseException:
                undo_registration_task(plan, reg)
                raise
    summary = {
        **ev.summary,
        "mlflow_model": reg.model_name,
        "mlflow_version": reg.version,
        "mlflow_run_id": reg.run_id,
        "mlflow_run_url": steps.run_url(plan, reg.run_id),
    }
    create_markdown_artifact(
        generation_markdown(summary), key=f"generation-{plan.gen_id}", description=f"bctflow generation {plan.gen_id}"
    )
    return {**summary, "lineage": lineage}
