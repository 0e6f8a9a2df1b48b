"""The steps of a generation. flows/ wraps each in a Prefect task; tests call them too.

Every step writes only under the generation's *staging* folder (or, for the
data snapshot, a new DVC-tracked manifest), so nothing that serves users
changes until :func:`commit`, which moves staging into place inside the
lineage transaction.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from bctflow.params import Params
from bctflow.pipeline.specs import model_spec_from_params
from bctflow.pipeline.plan import GenerationPlan
from bctflow.workspace import Workspace
from components.data import DataSnapshotStore, resolve_class_order, select_training_data
from components.data.base import DatasetSplits
from components.data.batches import to_image_tensor
from components.data.prepare import prepared_splits
from components.errors import LineageError
from components.evaluation import gallery_metrics, p_com, p_up
from components.evaluation.diagnostics import clip_fraction, in_cone_fraction, uncertainty_seen_unseen
from components.evaluation.plots import training_curves, uncertainty_histogram
from components.indexing import GalleryIndex
from components.indexing.gallery import GalleryEmbeddings
from components.io import atomic_write_text
from components.losses import create_alignment
from components.models import ModelSpec, build_model, load_model, save_model
from components.models.checkpoint import load_torch_safe, read_spec
from components.training import embed_images, train_model
from components.training.device import cuda_available
from registry.backfill import BackfillEvidence, BackfillRules, decide_backfill
from registry.lineage import (
    DecisionRecord,
    EvaluationRecord,
    GenerationBundle,
    GenerationRecord,
    LineageStore,
    ZetaRecord,
)
from registry.tracking import MlflowRegistry, RegistrationRequest, RegistrationResult

__all__ = [
    "Snapshot",
    "Trained",
    "Gallery",
    "Evaluation",
    "load_splits",
    "snapshot_data",
    "train_role",
    "build_gallery",
    "evaluate",
    "register",
    "commit",
    "rollback",
    "store_for",
    "registry_for",
]

METRICS = ("cmc@1", "cmc@5", "map")
DERIVED = ("cmc@1", "map")


# ----------------------------------------------------------------------------- data
@dataclass(frozen=True)
class Snapshot:
    name: str
    manifest: str
    data_hash: str
    class_order: tuple[int, ...]
    class_names: tuple[str, ...]
    n_train: int


def load_splits(p: Params, ws: Workspace) -> DatasetSplits:
    d = p.data
    return prepared_splits(
        d.dataset, str(ws.datasets_dir(p)), download=d.download, test_fraction=d.test_fraction, split_seed=d.split_seed,
        image_size=d.image_size, path=d.path, max_train_per_class=d.max_train_per_class, max_test_per_class=d.max_test_per_class,
    )


def snapshot_data(plan: GenerationPlan) -> Snapshot:
    """Select the generation's training data and snapshot its manifest with DVC."""
    p, ws = plan.p, plan.workspace
    splits = load_splits(p, ws)
    classes = "all" if plan.classes == "all" else list(plan.classes)
    order = resolve_class_order(classes, splits.train.num_classes, plan.parent.class_order if plan.parent else None)
    manifest = select_training_data(
        splits.train, dataset=splits.name, fingerprint=splits.fingerprint, class_order=order, fraction=plan.fraction, seed=p.data.split_seed + plan.gen_id
    )
    info = DataSnapshotStore(ws.data_dir).snapshot(f"gen_{plan.gen_id:03d}", manifest)
    return Snapshot(info.name, str(info.path), info.data_hash, manifest.class_order, manifest.class_names, len(manifest))


# ----------------------------------------------------------------------------- training
@dataclass(frozen=True)
class Trained:
    role: str
    checkpoint: str
    history: list[dict[str, float]]
    seconds: float
    device: str
    resumed_from: int | None
    curvature: float
    output_dim: int
    stored_dim: int


def _model_spec(plan: GenerationPlan, snap: Snapshot, splits: DatasetSplits, overrides: dict | None = None) -> ModelSpec:
    """The new model's spec from params, the data, and the alignment method's requirements."""
    return model_spec_from_params(
        plan.p, splits.train, snap.class_order, snap.class_names,
        geometry=plan.geometry, zeta=plan.zeta, backbone=plan.backbone, backbone_kwargs=plan.backbone_kwargs, overrides=overrides,
    )


def _label_map(new_order: tuple[int, ...], old_order: tuple[int, ...]) -> torch.Tensor:
    pos = {c: i for i, c in enumerate(old_order)}
    return torch.tensor([pos.get(c, -1) for c in new_order], dtype=torch.long)


def train_role(plan: GenerationPlan, snap: Snapshot, role: str, on_epoch: Callable[[int, dict], None] | None = None) -> Trained:
    """Train the generation's model (role "model") or its independent reference ("reference").

    Resumes from the last epoch checkpoint in staging; if the final model of
    this run already exists there, returns it without training.
    """
    p, ws = plan.p, plan.workspace
    out_dir = plan.role_dir(role)
    final = out_dir / "model.pt"
    run_key = plan.role_run_key(role)
    if final.exists():
        obj = load_torch_safe(final)
        if obj.get("run_key") == run_key:
            spec = read_spec(obj, final)
            return Trained(role, str(final), list(obj["history"]), float(obj["seconds"]), str(obj["device"]), None, float(obj["curvature"]), spec.output_dim, spec.stored_dim)
    splits = load_splits(p, ws)
    from components.data.selection import DataManifest

    manifest = DataManifest.from_json(Path(snap.manifest).read_text())
    train = manifest.take(splits.train)
    method = create_alignment(plan.role_alignment(role), plan.alignment_options if role == "model" else None)
    parent = plan.parent
    parent_spec = read_spec(load_torch_safe(Path(parent.checkpoint)), parent.checkpoint) if parent is not None else None
    model_method = method if role == "model" else create_alignment(plan.alignment, plan.alignment_options)
    overrides = model_method.model_overrides(parent_spec)
    if role == "reference":  # the reference is an independent model in the same retrieval space
        overrides = {k: v for k, v in overrides.items() if k == "features"}
    spec = _model_spec(plan, snap, splits, overrides)
    method.check_lineage(spec.class_order, parent_spec)
    cfg = plan.train_config(role)
    torch.manual_seed(cfg.seed)  # the initialisation is part of the run: same seed, same model
    model = build_model(spec, p.model.pretrained_path)
    old_model = label_map = reference = None
    if parent is not None and method.trains and method.requires_old:
        old_model = load_model(Path(parent.checkpoint))
        label_map = _label_map(snap.class_order, parent.class_order)
    if method.trains and method.requires_reference:
        reference = load_model(plan.role_dir("reference") / "model.pt")
    data = to_image_tensor(train.images, manifest.model_labels(), pin=cuda_available())
    result = train_model(
        model,
        data,
        cfg,
        method,
        out_dir / "checkpoints",
        old_model=old_model,
        label_map=label_map,
        reference_model=reference,
        run_key=run_key,
        on_epoch=on_epoch,
    )
    k = float(result.model.curvature)
    save_model(
        result.model.cpu(),
        final,
        extra={"run_key": run_key, "history": result.history, "seconds": result.seconds, "device": result.device, "curvature": k},
    )
    shutil.rmtree(out_dir / "checkpoints", ignore_errors=True)
    return Trained(role, str(final), result.history, result.seconds, result.device, result.resumed_from, k, spec.output_dim, spec.stored_dim)


# ----------------------------------------------------------------------------- gallery
@dataclass(frozen=True)
class Gallery:
    role: str
    path: str
    index_dir: str | None
    count: int
    clip_fraction: float | None


def build_gallery(plan: GenerationPlan, trained: Trained) -> Gallery:
    """Embed the gallery (the test split) and, for the generation's own model, build its FAISS index."""
    p, ws = plan.p, plan.workspace
    splits = load_splits(p, ws)
    model = load_model(Path(trained.checkpoint))
    emb = embed_images(model, splits.test.images, batch_size=p.train.eval_batch_size, device=p.train.device)
    gal = GalleryEmbeddings.from_embeddings(emb, model.spec, trained.curvature, splits.test.ids, splits.test.labels)
    out_dir = plan.role_dir(trained.role)
    gal.save(out_dir / "gallery.npz")
    index_dir = None
    if trained.role == "model":
        index = GalleryIndex.build(
            gal.vectors(), gal.ids, geometry=gal.retrieval_geometry, curvature=trained.curvature, generation=plan.gen_id
        )
        index_dir = str(index.save(out_dir / "index"))
    cf = clip_fraction(emb.clipped) if plan.geometry == "lorentz" else None
    return Gallery(trained.role, str(out_dir / "gallery.npz"), index_dir, len(gal), cf)


# ----------------------------------------------------------------------------- evaluation
@dataclass
class Evaluation:
    evaluations: list[EvaluationRecord]
    derived: dict[str, float | None]
    diagnostics: dict[str, float | None]
    decision: DecisionRecord
    summary: dict[str, Any]
    artifacts: list[str] = field(default_factory=list)


def store_for(plan_or_params: GenerationPlan | Params, ws: Workspace | None = None) -> LineageStore:
    if isinstance(plan_or_params, GenerationPlan):
        return LineageStore(plan_or_params.workspace.lineage_url(plan_or_params.p))
    assert ws is not None
    return LineageStore(ws.lineage_url(plan_or_params))


def registry_for(p: Params, ws: Workspace) -> MlflowRegistry:
    return MlflowRegistry(ws.mlflow_uri(p), p.tracking.experiment, p.tracking.registered_model, ws.mlflow_artifacts)


def _metrics(q: GalleryEmbeddings, g: GalleryEmbeddings, p: Params) -> dict[str, float]:
    """M(φ_q, φ_g) on the shared gallery: queries are the gallery items (leave-one-out by id)."""
    return gallery_metrics(q, g, ks=tuple(p.evaluation.cmc_k), chunk_size=p.evaluation.chunk_size)


def _comparable(q: GalleryEmbeddings, g: GalleryEmbeddings) -> str | None:
    """Why ``q``'s model cannot query ``g`` (None when it can)."""
    return q.incompatibility(g)


def evaluate(plan: GenerationPlan, snap: Snapshot, trained: Trained, gallery: Gallery, ref: Trained | None = None, ref_gallery: Gallery | None = None) -> Evaluation:
    """Self / cross / parent-self / reference metrics, P_com, P_up, diagnostics, backfill decision."""
    p = plan.p
    store = store_for(plan)
    new = GalleryEmbeddings.load(Path(gallery.path))
    gid = plan.gen_id
    evals: list[EvaluationRecord] = []

    def add(qid: int, galid: int, vals: dict[str, float], qrole: str = "model", grole: str = "model") -> None:
        evals.extend(EvaluationRecord(qid, galid, m, v, qrole, grole) for m, v in vals.items())

    self_m = _metrics(new, new, p)
    add(gid, gid, self_m)
    against: dict[int, dict[str, float]] = {}
    skipped: dict[int, str] = {}
    galleries: dict[int, GalleryEmbeddings] = {}
    for sid in plan.serving:
        g = store.generation(sid)
        other = GalleryEmbeddings.load(Path(g.index_path).parent / "gallery.npz")
        galleries[sid] = other
        why = _comparable(new, other)
        if why:
            skipped[sid] = why
            continue
        against[sid] = _metrics(new, other, p)
        add(gid, sid, against[sid])

    parent = plan.parent
    cross = against.get(parent.id) if parent else None
    parent_self: dict[str, float] | None = None
    if parent is not None:
        parent_self = {m: store.metric_value(parent.id, parent.id, m) for m in METRICS}  # type: ignore[misc]
        if any(v is None for v in parent_self.values()):
            parent_self = _metrics(galleries[parent.id], galleries[parent.id], p)

    derived: dict[str, float | None] = {}
    ref_block = None
    if ref is not None and ref_gallery is not None and parent is not None and parent_self is not None:
        refg = GalleryEmbeddings.load(Path(ref_gallery.path))
        ref_self = _metrics(refg, refg, p)
        add(gid, gid, ref_self, "reference", "reference")
        ref_cross = None
        if _comparable(refg, galleries[parent.id]) is None:
            ref_cross = _metrics(refg, galleries[parent.id], p)
            add(gid, parent.id, ref_cross, "reference", "model")
        ref_block = {"self": ref_self, "cross": ref_cross}
        for m in DERIVED:
            if cross is not None:
                v, den = p_com(cross[m], parent_self[m], ref_self[m])
                derived[f"p_com/{m}"] = v
                derived[f"p_com_denominator/{m}"] = den
            derived[f"p_up/{m}"] = p_up(self_m[m], ref_self[m])

    diagnostics: dict[str, float | None] = {}
    artifacts: list[str] = []
    if plan.geometry == "lorentz":
        diagnostics.update(_lorentz_diagnostics(plan, snap, trained, new, galleries.get(parent.id) if parent else None))
        groups = {"this generation": _uncertainty(new)}
        title = f"generation {gid} gallery uncertainty"
        if parent is not None and parent.id in galleries:
            old = galleries[parent.id]
            seen = np.isin(old.labels, np.asarray(parent.class_order))
            u_old = _uncertainty(old)
            groups = {"parent, seen classes": u_old[seen], "parent, unseen classes": u_old[~seen], **groups}
            title = f"gallery uncertainty: parent g{parent.id} vs g{gid}"
        artifacts.append(str(uncertainty_histogram(plan.staging_dir / "uncertainty.png", groups, title)))
    artifacts.append(str(training_curves(plan.staging_dir / "training.png", trained.history, f"generation {gid} ({trained.role}, {plan.alignment})")))

    decision = _decide(plan, store, cross, galleries, new, derived, gallery.clip_fraction, skipped)
    summary = {
        "generation": gid,
        "name": plan.name,
        "parent": parent.id if parent else None,
        "alignment": plan.alignment,
        "geometry": plan.geometry,
        "zeta": plan.zeta,
        "self": self_m,
        "cross": cross,
        "parent_self": parent_self,
        "against": {str(k): v for k, v in against.items()},
        "not_comparable": {str(k): v for k, v in skipped.items()},
        "reference": ref_block,
        "derived": derived,
        "diagnostics": diagnostics,
        "backfill": {"required": decision.required, "reasons": decision.reasons, "checks": decision.checks},
        "train_seconds": trained.seconds,
        "reference_train_seconds": ref.seconds if ref else None,
        "device": trained.device,
    }
    metrics_path = plan.staging_dir / "metrics.json"
    atomic_write_text(metrics_path, json.dumps(summary, indent=2, default=float) + "\n")
    artifacts.append(str(metrics_path))
    store.close()
    return Evaluation(evals, derived, diagnostics, decision, summary, artifacts)


def _uncertainty(g: GalleryEmbeddings) -> np.ndarray:
    z = torch.from_numpy(g.z).double()
    return (1.0 - torch.tanh(np.sqrt(g.curvature) * torch.linalg.vector_norm(z, dim=1))).numpy()


def _lorentz_diagnostics(plan: GenerationPlan, snap: Snapshot, trained: Trained, new: GalleryEmbeddings, old: GalleryEmbeddings | None) -> dict[str, float | None]:
    p, ws = plan.p, plan.workspace
    d: dict[str, float | None] = {"clip_fraction_gallery": clip_fraction(new.clipped)}
    splits = load_splits(p, ws)
    from components.data.selection import DataManifest

    train = DataManifest.from_json(Path(snap.manifest).read_text()).take(splits.train)
    model = load_model(Path(trained.checkpoint))
    emb_train = embed_images(model, train.images, batch_size=p.train.eval_batch_size, device=p.train.device)
    d["clip_fraction_train"] = clip_fraction(emb_train.clipped)
    seen_new, unseen_new = uncertainty_seen_unseen(new.z, new.labels, list(snap.class_order), new.curvature)
    d["uncertainty_gallery_seen"] = seen_new
    d["uncertainty_gallery_unseen"] = unseen_new
    if old is not None and plan.parent is not None and old.geometry == "lorentz" and old.z.shape == new.z.shape:
        parent_model = load_model(Path(plan.parent.checkpoint))
        d["clip_fraction_train_parent"] = clip_fraction(embed_images(parent_model, train.images, batch_size=p.train.eval_batch_size, device=p.train.device).clipped)
        d["clip_fraction_gallery_parent"] = clip_fraction(old.clipped)
        d["in_cone_fraction"] = in_cone_fraction(old.z, new.z, old.curvature, plan.alignment_options.get("epsilon", 0.1))
        s, u = uncertainty_seen_unseen(old.z, old.labels, list(plan.parent.class_order), old.curvature)
        d["uncertainty_parent_seen"] = s
        d["uncertainty_parent_unseen"] = u
    return d


def _decide(
    plan: GenerationPlan,
    store: LineageStore,
    cross: dict[str, float] | None,
    galleries: dict[int, GalleryEmbeddings],
    new: GalleryEmbeddings,
    derived: dict[str, float | None],
    gallery_clip: float | None,
    skipped: dict[int, str],
) -> DecisionRecord:
    if plan.parent is None:
        return DecisionRecord(False, [], [], None)
    b = plan.p.backfill
    rules = BackfillRules(b.metric, b.require_compatibility, b.p_com_floor, b.zeta_ceiling, b.max_generations_since_backfill, b.clip_fraction_max)
    pid = plan.parent.id
    live_self = {m: store.metric_value(pid, pid, m) for m in METRICS}
    pcom = {m: derived.get(f"p_com/{m}") for m in DERIVED} if derived else None
    ev = BackfillEvidence(
        live_generation_id=pid,
        cross=cross,
        live_self=live_self,  # type: ignore[arg-type]
        p_com=pcom,
        zeta=plan.zeta,
        gallery_clip_fraction=gallery_clip,
        generations_since_backfill=plan.generations_since_backfill,
        incompatibility=skipped.get(pid),
    )
    return decide_backfill(ev, rules)


# ----------------------------------------------------------------------------- registration + commit
def _chain_description(plan: GenerationPlan, store: LineageStore, decision: DecisionRecord) -> str:
    chain = []
    gid = plan.parent.id if plan.parent else None
    while gid is not None:
        g = store.generation(gid)
        chain.append(f"g{g.id} [{g.alignment}, {g.geometry}, ζ={'—' if g.zeta is None else f'{g.zeta:.2f}'}, v{g.mlflow_version}]")
        gid = g.parent_id
    chain.reverse()
    chain.append(f"g{plan.gen_id} [{plan.alignment}, {plan.geometry}, ζ={'—' if plan.zeta is None else f'{plan.zeta:.2f}'}, this version]")
    lines = [
        f"Generation {plan.gen_id} ({plan.name}) of the bctflow lineage.",
        "Chain: " + " → ".join(chain),
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
        description=_chain_description(plan, store, ev.decision),
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
        aliases=[f"gen-{plan.gen_id}"] + (["gallery"] if plan.parent is None else []),
    )
    store.close()
    return registry_for(p, ws).register(req)


def commit(plan: GenerationPlan, snap: Snapshot, trained: Trained, gallery: Gallery, ev: Evaluation, reg: RegistrationResult, ref: Trained | None = None) -> None:
    """Write the lineage in one transaction; staging moves into place inside it."""
    p = plan.p
    store = store_for(plan)
    existing = store.generation_by_name(plan.name)
    if existing is not None and existing.mlflow_run_id == reg.run_id:
        return  # an earlier attempt committed (retry after a lost acknowledgement)
    final = plan.final_dir
    rel = lambda path: str(final / Path(path).relative_to(plan.staging_dir))  # noqa: E731
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
        params_digest=plan.run_key,
        train_seconds=trained.seconds,
        mlflow_model=reg.model_name,
        mlflow_version=reg.version,
        mlflow_run_id=reg.run_id,
    )
    zeta = None
    if plan.zeta is not None:
        parent_zeta = plan.parent.zeta if plan.parent else None
        zeta = ZetaRecord(parent_zeta, 0.0 if plan.parent is None else plan.delta_zeta, plan.zeta, False)
    bundle = GenerationBundle(
        generation=record,
        evaluations=ev.evaluations,
        derived=ev.derived,
        diagnostics=ev.diagnostics,
        zeta=zeta,
        decision=ev.decision,
        make_live=plan.parent is None,
        live_reason="generation 0 embedded the gallery",
    )
    moved = False

    def move_into_place() -> None:
        nonlocal moved
        if final.exists():
            raise LineageError(f"{final} already exists although generation {plan.gen_id} is not in the lineage; move it away and rerun")
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(plan.staging_dir, final)
        moved = True

    try:
        store.commit_generation(bundle, before_commit=move_into_place)
    except BaseException:
        if moved and final.exists():
            os.replace(final, plan.staging_dir)
        raise
    finally:
        store.close()


def rollback(plan: GenerationPlan, reg: RegistrationResult) -> None:
    """Undo the MLflow registration of a generation whose lineage commit failed."""
    registry_for(plan.p, plan.workspace).rollback(reg)
