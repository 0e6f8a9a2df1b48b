"""Step 5: register the generation in MLflow (run, model version, tags, aliases, description) and the promotion gate."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from components.data.sources.split import SourceDataset
from components.evaluation.lineage_timeline import BackfillStep, GenerationStep, Timeline
from components.faults import crash_point
from flows.backfill.rules import gated_failures
from flows.gallery.data import load_splits
from flows.generation.lineage_view import draw_lineage, registering_timeline
from flows.generation.mlflow_run import log_training
from flows.generation.results import Evaluation, EvaluationGallery, Snapshot, Trained
from flows.planning import GenerationPlan
from flows.recovery.model_text import LINEAGE_ARTIFACT, picture_markdown
from registry.records import DecisionRecord
from registry.tracking.registered_model import RegistrationRequest, RegistrationResult

__all__ = ["chain_description", "example_images", "gate_failures", "promoted", "register"]


def gate_failures(
    compatible: bool | None, checks: list[dict[str, Any]], gate: Sequence[str] | None = None
) -> list[str]:
    """Why the promotion gate refuses a generation; empty when it passes.

    The gate needs the live gallery to accept the generation's queries (the measured
    compatibility fact; None = not recorded) and every check ``gate`` names to pass (params ``backfill.gate``;
    None: every check). A failing check the gate does not name is a recorded warning, not a refusal.
    """
    failed = gated_failures(checks, gate)
    if compatible is False and not any(c["rule"] == "compatibility" and not c["passed"] for c in checks):
        failed.insert(
            0, "the live gallery does not accept its queries (they fail the compatibility criterion against it)"
        )
    return failed


def promoted(plan: GenerationPlan, ev: Evaluation) -> bool:
    """The promotion gate for a new generation (generation 0 always passes)."""
    return plan.parent is None or not gate_failures(ev.compatible, ev.decision.checks, plan.params.backfill.gate)


def _zeta(z: float | None) -> str:
    return "—" if z is None else f"{z:.2f}"


def _chain_step(s: GenerationStep | BackfillStep) -> str:
    """One step of the chain: ``g1 [hbct, ζ=1.20, aligned to g0, v2]`` or ``⟲ full backfill with g1 (…)``."""
    if isinstance(s, BackfillStep):
        restart = "" if s.zeta_restart is None else f", ζ restarts at {_zeta(s.zeta_restart)}"
        return f"⟲ {s.kind} backfill with g{s.to_gen} ({s.reembedded}/{s.total} items{restart})"
    aligned = "" if s.parent_id is None else f", aligned to g{s.parent_id}"
    version = "this version" if s.pending else f"v{s.version}"
    return f"g{s.gen_id} [{s.alignment}, ζ={_zeta(s.zeta)}{aligned}, {version}]"


def chain_description(plan: GenerationPlan, timeline: Timeline, decision: DecisionRecord, run_id: str) -> str:
    """The version's description: its state in one line first (:meth:`Timeline.state`: what MLflow's versions table
    shows), then the lineage in order, with ζ per step and the backfills between generations, then the lineage
    picture its run ``run_id`` holds; ``timeline``: the lineage with this generation pending at its end
    (:func:`flows.generation.lineage_view.registering_timeline`)."""
    aligned_to = (
        "nothing (generation 0: base loss only)"
        if plan.parent is None
        else f"generation {plan.parent.id}, whose embeddings fill the live gallery"
    )
    lines = [
        timeline.state(plan.gen_id),
        f"Generation {plan.gen_id} ({plan.name}) of the bctflow lineage.",
        "Chain: " + " → ".join(_chain_step(s) for s in timeline.steps),
        f"Aligned to: {aligned_to}.",
        f"Backfill required: {'yes — ' + '; '.join(decision.reasons) if decision.required else 'no'}.",
        f"The lineage as this version was registered (its run's `{LINEAGE_ARTIFACT}`):",
        picture_markdown(run_id, f"lineage as generation {plan.gen_id} is registered"),
    ]
    return "\n\n".join(lines)


def _run_metrics(trained: Trained, ev: Evaluation) -> dict[str, float | None]:
    """Every number of the evaluation, named for MLflow (``self/map``, ``p_com/map``, ``diag/…``, ``compat/map/ac``)."""
    metrics: dict[str, float | None] = {}
    s = ev.summary
    for key in ("self", "cross", "parent_self"):
        for m, v in (s.get(key) or {}).items():
            metrics[f"{key}/{m}"] = v
    for key in ("self", "cross"):
        for m, v in ((s.get("reference") or {}).get(key) or {}).items():
            metrics[f"reference_{key}/{m}"] = v
    metrics.update(ev.derived.to_rows())
    metrics.update({f"diag/{k}": v for k, v in ev.diagnostics.items()})
    metrics["train_seconds"] = trained.seconds
    metrics["backfill_required"] = float(ev.decision.required)
    metrics["compatible_with_live_gallery"] = float(ev.compatible)
    for c in ev.compat:
        for key in ("ac", "aa", "aca"):
            metrics[f"compat/{c.metric}/{key}"] = getattr(c, key)
    return metrics


def example_images(split: SourceDataset, n: int = 2) -> np.ndarray:
    """The first ``n`` images (N, H, W, C) uint8 of a split: the registered model's input example."""
    return split.subset(np.arange(min(n, len(split)))).decode().images


def _request(
    plan: GenerationPlan, snap: Snapshot, trained: Trained, gallery: EvaluationGallery, ev: Evaluation, run_id: str
) -> RegistrationRequest:
    """What the registration logs into the run and onto the version (the lineage picture drawn here)."""
    p, ws = plan.params, plan.workspace
    passed = promoted(plan, ev)
    timeline = registering_timeline(plan, ev, passed)
    return RegistrationRequest(
        generation_id=plan.gen_id,
        name=plan.name,
        parent_id=plan.parent.id if plan.parent else None,
        parent_version=plan.parent.mlflow_version if plan.parent else None,
        alignment=plan.alignment,
        geometry=plan.geometry,
        zeta=plan.zeta,
        curvature=trained.curvature,
        data_hash=snap.data_hash,
        checkpoint=Path(trained.checkpoint),
        example=example_images(load_splits(p, ws).test),
        description=chain_description(plan, timeline, ev.decision, run_id),
        run_id=run_id,
        metrics={**_run_metrics(trained, ev), "model/curvature": trained.curvature},
        artifacts={  # the data manifest went to data/ when the snapshot was taken (flows/generation/mlflow_run.py)
            "": [Path(a) for a in ev.artifacts],
            "index": [Path(gallery.index_dir) / "manifest.json"] if gallery.index_dir else [],
            "lineage": [draw_lineage(plan, timeline)],
        },
        backfill_required=ev.decision.required if plan.parent else None,
        backfill_reasons=ev.decision.reasons,
        extra_tags={
            "bctflow.promotion": "promoted (passed the gate)"
            if passed
            else "not promoted: " + "; ".join(gate_failures(ev.compatible, ev.decision.checks, p.backfill.gate)),
            "bctflow.compatible_with_live_gallery": str(ev.compatible).lower(),
            "bctflow.live_gallery_generation": "none" if plan.parent is None else str(plan.parent.id),
        },
        aliases=[f"gen-{plan.gen_id}"] + (["gallery"] if plan.parent is None else []),
        run_key=plan.run_key,
    )


def register(
    plan: GenerationPlan,
    snap: Snapshot,
    trained: Trained,
    gallery: EvaluationGallery,
    ev: Evaluation,
    run_id: str,
    reference_run_id: str | None = None,
) -> RegistrationResult:
    """Into the generation's run (opened before training): the evaluation, artifacts, lineage picture and model;
    then one registered model version (tags, aliases, description). ``reference_run_id``: the reference φ*'s child
    run, which gets its own self / cross numbers."""
    log_training(plan, run_id, trained)
    req = _request(plan, snap, trained, gallery, ev, run_id)
    if reference_run_id is not None:
        ref = ev.summary.get("reference") or {}
        metrics = {f"{k}/{m}": v for k in ("self", "cross") for m, v in (ref.get(k) or {}).items()}
        plan.workspace.tracking(plan.params).runs.log_metrics(reference_run_id, metrics)
    crash_point("generation.before_register")
    reg = plan.workspace.tracking(plan.params).register(req)
    crash_point("generation.after_register")
    return reg
