"""Step 6: commit the generation — lineage, live pointer, promotion — all or nothing.

Inside one lineage transaction (before its COMMIT):
* staging moves into ``generations/gen_NNN``;
* the live pointer (``live/CURRENT``) is created for generation 0, or extended with
  the new generation's id when its queries passed the compatibility criterion
  against the live gallery (so the live index accepts them);
* the promotion gate: when every backfill rule passed, the MLflow alias
  ``production`` moves to the new version.
If anything fails, all three are undone and the MLflow registration is rolled
back by the flow.
"""

from __future__ import annotations

import os
from pathlib import Path

from flows.params import params_digest
from flows.steps.context import load_splits, registry_for, store_for
from flows.plan import GenerationPlan
from flows.steps.registration import promoted
from flows.steps.results import Evaluation, Gallery, Snapshot, Trained
from components.errors import LineageError
from components.indexing.live import LiveGallery
from registry.lineage import (
    GenerationBundle,
    GenerationRecord,
    PointerRecord,
    ZetaRecord,
)
from registry.tracking import RegistrationResult

__all__ = ["PRODUCTION_ALIAS", "commit", "rollback"]

PRODUCTION_ALIAS = "production"


def commit(plan: GenerationPlan, snap: Snapshot, trained: Trained, gallery: Gallery, ev: Evaluation, reg: RegistrationResult, ref: Trained | None = None) -> None:
    """Write the lineage in one transaction; staging, the live pointer and the alias move inside it."""
    p, ws = plan.p, plan.workspace
    store = store_for(plan)
    registry = registry_for(p, ws)
    try:
        existing = store.generation_by_name(plan.name)
        if existing is not None and existing.mlflow_run_id == reg.run_id:
            return  # an earlier attempt committed (retry after a lost acknowledgement)
        final = plan.final_dir
        rel = lambda path: str(final / Path(path).relative_to(plan.staging_dir))
        gate = promoted(plan, ev)
        record = GenerationRecord(
            id=plan.gen_id,
            name=plan.name,
            parent_id=plan.parent.id if plan.parent else None,
            dataset=p.data.dataset,
            data_hash=snap.data_hash,
            data_snapshot=snap.manifest,
            class_order=list(snap.class_order),
            architecture={"backbone": plan.backbone, "backbone_kwargs": plan.backbone_kwargs, "small_stem": p.model.small_stem, "embed_dim": p.model.embed_dim},
            geometry=plan.geometry,
            alignment=plan.alignment,
            hyperparameters={"weight": p.alignment.weight, **plan.alignment_options, "train": {**p.train.model_dump(), "epochs": plan.epochs}},
            zeta=plan.zeta,
            curvature=trained.curvature,
            embed_dim=trained.output_dim,
            checkpoint_path=rel(trained.checkpoint),
            index_path=rel(gallery.index_dir) if gallery.index_dir else "",
            reference_checkpoint_path=rel(ref.checkpoint) if ref else None,
            params_digest=params_digest(p),
            data_fingerprint=load_splits(p, ws).fingerprint,
            train_seconds=trained.seconds,
            promoted=gate,
            mlflow_model=reg.model_name,
            mlflow_version=reg.version,
            mlflow_run_id=reg.run_id,
        )
        zeta = None
        if plan.zeta is not None:
            zeta = ZetaRecord(plan.zeta_prev, 0.0 if plan.parent is None else plan.delta_zeta, plan.zeta, plan.zeta_restarted)
        live = LiveGallery(ws.live_dir)
        old_pointer = live.pointer()
        pointer = None
        if plan.parent is None:
            pointer = PointerRecord(plan.gen_id, record.index_path, "generation 0 embedded the gallery", record.checkpoint_path, plan.zeta, [plan.gen_id])
        elif ev.compatible:
            cur = store.live_pointer()
            assert cur is not None
            allowed = sorted(set(cur.compatible_generations or [cur.generation_id]) | {plan.gen_id})
            pointer = PointerRecord(
                cur.generation_id, cur.index_path, f"generation {plan.gen_id} passed the compatibility criterion against the live gallery",
                cur.model_checkpoint, cur.zeta, allowed, cur.backfill_id,
            )
        prev_production = store.production_generation_id()
        prev_version = store.generation(prev_production).mlflow_version if prev_production is not None else None
        bundle = GenerationBundle(
            generation=record,
            evaluations=ev.evaluations,
            derived=ev.derived,
            diagnostics=ev.diagnostics,
            zeta=zeta,
            decision=ev.decision,
            pointer=pointer,
            compat=ev.compat,
            promotion=(prev_production, "generation 0" if plan.parent is None else "passed the gate: every backfill rule held") if gate else None,
        )
        done: list[str] = []

        def side_effects() -> None:
            if final.exists():
                raise LineageError(f"{final} already exists although generation {plan.gen_id} is not in the lineage; move it away and rerun")
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(plan.staging_dir, final)
            done.append("moved")
            if pointer is not None:
                live.switch(Path(pointer.index_path), generation=pointer.generation_id, compatible_generations=pointer.compatible_generations,
                            model_checkpoint=pointer.model_checkpoint, zeta=pointer.zeta)
                done.append("pointer")
            if gate:
                registry.set_alias(PRODUCTION_ALIAS, reg.version)
                done.append("alias")

        try:
            store.commit_generation(bundle, before_commit=side_effects)
        except BaseException:
            if "alias" in done:
                if prev_version is not None:
                    registry.set_alias(PRODUCTION_ALIAS, prev_version)
                else:
                    registry.delete_alias(PRODUCTION_ALIAS)
            if "pointer" in done:
                live.restore(old_pointer)
            if "moved" in done and final.exists():
                os.replace(final, plan.staging_dir)
            raise
    finally:
        store.close()


def rollback(plan: GenerationPlan, reg: RegistrationResult) -> None:
    """Undo the MLflow registration of a generation whose lineage commit failed."""
    registry_for(plan.p, plan.workspace).rollback(reg)
