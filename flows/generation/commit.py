"""Step 6: commit the generation — one lineage transaction, then what it implies (docs/commit-protocol.md).

The lineage transaction is the commit point: the generation's rows, its live-pointer row
(generation 0 creates the live gallery; a generation compatible with it — the measured fact,
docs/design.md §7 — joins the generations it accepts) and its promotion. If it fails nothing
is written and the flow deletes the MLflow registration. After it, :func:`roll_forward`
makes the files and the registry follow the rows: staging moves into ``generations/gen_NNN``,
``live/CURRENT`` is rewritten, the ``production`` / ``gallery`` aliases move. Each of those
is idempotent and re-done from the rows by the next command if this process dies among them.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from components.errors import LineageError
from components.faults import crash_point
from components.indexing.backend import collection_at
from components.indexing.parts import GalleryParts
from components.indexing.seal import seal_version
from components.indexing.version import GalleryVersion
from components.io import file_sha256
from flows.generation.registration import promoted
from flows.generation.results import Evaluation, EvaluationGallery, Snapshot, Trained
from flows.planning import GenerationPlan
from flows.recovery.reconcile import roll_forward
from registry.lineage import LineageDB
from registry.records import GenerationBundle, GenerationRecord, PointerRecord, ZetaRecord
from registry.tracking.registered_model import RegistrationResult

__all__ = ["PRODUCTION_ALIAS", "commit", "undo_registration"]

PRODUCTION_ALIAS = "production"


def _final(plan: GenerationPlan, staged: str | None) -> str | None:
    """Where a staged file will be once staging moves into place."""
    return None if staged is None else str(plan.final_dir / Path(staged).relative_to(plan.staging_dir))


def _record(
    plan: GenerationPlan, snap: Snapshot, trained: Trained, reg: RegistrationResult, **facts: Any
) -> GenerationRecord:
    """The generation's lineage row; ``facts``: index_path, gallery_sha256 (its evaluation gallery's pin),
    reference_checkpoint_path, promoted and compatible_with_live."""
    p = plan.params
    return GenerationRecord(
        id=plan.gen_id,
        name=plan.name,
        parent_id=plan.parent.id if plan.parent else None,
        dataset=p.data.dataset,
        data_hash=snap.data_hash,
        data_snapshot=snap.manifest,
        class_order=list(snap.class_order),
        architecture={
            "backbone": plan.backbone,
            "backbone_kwargs": plan.backbone_kwargs,
            "small_stem": p.model.small_stem,
            "embed_dim": p.model.embed_dim,
        },
        geometry=plan.geometry,
        alignment=plan.alignment,
        hyperparameters={
            "weight": p.alignment.weight,
            **plan.alignment_options,
            "train": {**p.train.model_dump(), "epochs": plan.epochs},
            **({"zeta_reason": plan.zeta_reason} if plan.zeta_reason else {}),
            **trained.choices,
        },
        zeta=plan.zeta,
        curvature=trained.curvature,
        embed_dim=trained.output_dim,
        checkpoint_path=_final(plan, trained.checkpoint),
        checkpoint_sha256=file_sha256(trained.checkpoint),  # staged bytes = final bytes (moved by rename)
        params_digest=plan.params_digest,
        data_fingerprint=snap.data_fingerprint,
        code_digest=plan.code_digest,
        train_seconds=trained.seconds,
        mlflow_model=reg.model_name,
        mlflow_version=reg.version,
        mlflow_run_id=reg.run_id,
        **facts,
    )


def _pointer(
    plan: GenerationPlan, store: LineageDB, record: GenerationRecord, compatible: bool, index_dir: Path
) -> PointerRecord | None:
    """The new live pointer: generation 0 embeds the gallery (its index ``index_dir``, staged, pinned by the sha256
    of its manifest; its evaluation gallery as the generation row pins it; the version sealed
    (:mod:`components.indexing.seal`) and its seal pinned, where its serving vectors live as the seal recorded them);
    a compatible generation may query it; else unchanged."""
    if plan.parent is None:
        seal, seal_sha256 = seal_version(GalleryVersion.of_index(index_dir))  # what its switches check, once
        return PointerRecord(
            plan.gen_id,
            record.index_path,
            "generation 0 embedded the gallery",
            record.checkpoint_path,
            plan.zeta,
            [plan.gen_id],
            model_sha256=record.checkpoint_sha256,
            index_sha256=collection_at(index_dir).digest(),
            gallery_sha256=record.gallery_sha256,
            seal_sha256=seal_sha256,
            **asdict(seal.facts),
        )
    if not compatible:
        return None
    cur = store.live_pointer()
    assert cur is not None
    allowed = sorted(set(cur.compatible_generations or [cur.generation_id]) | {plan.gen_id})
    reason = f"generation {plan.gen_id} passed the compatibility criterion against the live gallery"
    return PointerRecord.of_row(cur, reason=reason, compatible_generations=allowed)


def _bundle(
    plan: GenerationPlan, store: LineageDB, record: GenerationRecord, ev: Evaluation, index_dir: Path
) -> GenerationBundle:
    """Everything the lineage transaction writes for the generation (``index_dir``: its staged index)."""
    zeta = None
    if plan.zeta is not None:
        zeta = ZetaRecord(
            plan.zeta_prev, 0.0 if plan.parent is None else plan.delta_zeta, plan.zeta, plan.zeta_restarted
        )
    reason = "generation 0" if plan.parent is None else "passed the gate: compatible, and every backfill rule held"
    return GenerationBundle(
        generation=record,
        evaluations=ev.evaluations,
        derived=ev.derived.to_rows(),
        diagnostics=ev.diagnostics,
        zeta=zeta,
        decision=ev.decision,
        pointer=_pointer(plan, store, record, ev.compatible, index_dir),
        compat=ev.compat,
        promotion=(store.production_generation_id(), reason) if record.promoted else None,
    )


def commit(
    plan: GenerationPlan,
    snap: Snapshot,
    trained: Trained,
    gallery: EvaluationGallery,
    ev: Evaluation,
    reg: RegistrationResult,
    ref: Trained | None = None,
) -> list[dict[str, Any]]:
    """Write the lineage in one transaction (the commit point), then move staging, the live pointer and the aliases
    into line with it — steps that are re-done from the committed rows if this process dies among them. Returns the
    committed lineage (``bctflow lineage --json``'s document), for the command's tables."""
    with plan.workspace.lineage(plan.params) as store:
        existing = store.generation_by_name(plan.name)
        if existing is not None and existing.mlflow_run_id == reg.run_id:
            roll_forward(plan.workspace, plan.params, store)  # an earlier attempt committed: finish what follows
            return store.to_json()
        record = _record(
            plan,
            snap,
            trained,
            reg,
            index_path=_final(plan, gallery.index_dir) or "",
            gallery_sha256=GalleryParts(Path(gallery.path)).digest(),  # staged bytes = final bytes (rename)
            promoted=promoted(plan, ev),
            reference_checkpoint_path=_final(plan, ref.checkpoint if ref else None),
            compatible_with_live=ev.compatible,
        )
        bundle = _bundle(plan, store, record, ev, Path(str(gallery.index_dir)))
        if plan.final_dir.exists():
            raise LineageError(
                f"{plan.final_dir} already exists although generation {plan.gen_id} is not in the lineage; move it "
                "away and rerun (`bctflow doctor` lists such leftovers)"
            )
        crash_point("commit.before_sql")
        store.commit_generation(bundle)  # the commit point (docs/commit-protocol.md)
        crash_point("commit.after_sql")
        roll_forward(plan.workspace, plan.params, store)  # staging → generations/, live pointer, aliases
        return store.to_json()


def undo_registration(plan: GenerationPlan, reg: RegistrationResult) -> None:
    """Undo the MLflow registration of a generation whose lineage commit failed."""
    plan.workspace.tracking(plan.params).undo_registration(reg)
