"""Step 5: register the generation in MLflow (run, model version, tags, aliases, description)."""

from __future__ import annotations

from pathlib import Path

from flows.steps.context import load_splits, registry_for, store_for
from flows.plan import GenerationPlan
from flows.steps.results import Evaluation, Gallery, Snapshot, Trained
from registry.lineage import DecisionRecord, LineageStore
from registry.tracking import RegistrationRequest, RegistrationResult

__all__ = ["chain_description", "promoted", "register"]


def promoted(plan: GenerationPlan, ev: Evaluation) -> bool:
    """The promotion gate: generation 0, or every backfill rule passed against the live gallery's generation."""
    return plan.parent is None or not ev.decision.required


def _zeta(z: float | None) -> str:
    return "—" if z is None else f"{z:.2f}"


def chain_description(plan: GenerationPlan, store: LineageStore, decision: DecisionRecord) -> str:
    """The lineage so far, in order, with ζ per step and the backfills between generations."""
    steps: list[tuple[str, str]] = []  # (ISO time, text): generations and backfills in the order they happened
    for g in store.generations():
        aligned = "" if g.parent_id is None else f", aligned to g{g.parent_id}"
        steps.append((g.created_at.isoformat(), f"g{g.id} [{g.alignment}, ζ={_zeta(g.zeta)}{aligned}, v{g.mlflow_version}]"))
    pointers = {pt.backfill_id: pt for pt in store.live_pointers() if pt.backfill_id is not None}
    for b in store.backfills():
        pt = pointers.get(b.id)
        restart = f", ζ restarts at {_zeta(pt.zeta)}" if b.zeta_restarted and pt is not None else ""
        steps.append((b.finished_at.isoformat(), f"⟲ {b.kind} backfill with g{b.to_generation_id} ({b.reembedded}/{b.total} items{restart})"))
    aligned = "" if plan.parent is None else f", aligned to g{plan.parent.id}"
    steps.append(("~", f"g{plan.gen_id} [{plan.alignment}, ζ={_zeta(plan.zeta)}{aligned}, this version]"))
    chain = " → ".join(text for _, text in sorted(steps))
    lines = [
        f"Generation {plan.gen_id} ({plan.name}) of the bctflow lineage.",
        "Chain: " + chain,
        f"Aligned to: {'nothing (generation 0: base loss only)' if plan.parent is None else f'generation {plan.parent.id}, whose embeddings fill the live gallery'}.",
        f"Backfill required: {'yes — ' + '; '.join(decision.reasons) if decision.required else 'no'}.",
    ]
    return "\n\n".join(lines)


def register(plan: GenerationPlan, snap: Snapshot, trained: Trained, gallery: Gallery, ev: Evaluation) -> RegistrationResult:
    """One MLflow run + one registered model version (tags, aliases, description)."""
    p, ws = plan.p, plan.workspace
    store = store_for(plan)
    splits = load_splits(p, ws)
    metrics: dict[str, float | None] = {}
    s = ev.summary
    for key in ("self", "cross", "parent_self"):
        for m, v in (s.get(key) or {}).items():
            metrics[f"{key}/{m}"] = v
    if s.get("reference"):
        for key in ("self", "cross"):
            for m, v in (s["reference"].get(key) or {}).items():
                metrics[f"reference_{key}/{m}"] = v
    metrics.update(ev.derived)
    metrics.update({f"diag/{k}": v for k, v in ev.diagnostics.items()})
    metrics["train_seconds"] = trained.seconds
    metrics["backfill_required"] = float(ev.decision.required)
    for c in ev.compat:
        for key in ("ac", "aa", "aca"):
            metrics[f"compat/{c.metric}/{key}"] = getattr(c, key)
    req = RegistrationRequest(
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
        image_shape=splits.test.image_shape,
        vector_dim=trained.stored_dim,
        description=chain_description(plan, store, ev.decision),
        params={
            "generation": {"id": plan.gen_id, "name": plan.name, "parent": plan.parent.id if plan.parent else None},
            "alignment": {"method": plan.alignment, "weight": p.alignment.weight, **plan.alignment_options},
            "model": {"backbone": plan.backbone, "backbone_kwargs": plan.backbone_kwargs, "geometry": plan.geometry, "embed_dim": p.model.embed_dim},
            "geometry": {"zeta": plan.zeta, "curvature": trained.curvature, "delta_zeta": plan.delta_zeta},
            "data": {"dataset": p.data.dataset, "classes": list(snap.class_order), "fraction": plan.fraction, "data_hash": snap.data_hash, "n_train": snap.n_train},
            "train": {**p.train.model_dump(), "epochs": plan.epochs},
        },
        metrics=metrics,
        history=trained.history,
        artifacts=[Path(a) for a in ev.artifacts] + [Path(snap.manifest)] + ([Path(gallery.index_dir) / "manifest.json"] if gallery.index_dir else []),
        backfill_required=ev.decision.required if plan.parent else None,
        backfill_reasons=ev.decision.reasons,
        extra_tags={
            "bctflow.promotion": "promoted (passed the gate)" if promoted(plan, ev) else "not promoted: " + ("; ".join(ev.decision.reasons) or "gate failed"),
            "bctflow.compatible_with_live_gallery": str(ev.compatible).lower(),
            "bctflow.live_gallery_generation": "none" if plan.parent is None else str(plan.parent.id),
        },
        aliases=[f"gen-{plan.gen_id}"] + (["gallery"] if plan.parent is None else []),
    )
    store.close()
    return registry_for(p, ws).register(req)
