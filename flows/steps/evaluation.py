"""Step 4: evaluate the new generation against every serving generation and the live gallery.

* self M(φ_new, φ_new); cross M(φ_new, φ_g) for every serving generation g (its own
  gallery; for the live gallery's generation, the live gallery itself, which after a
  backfill may be a rescaled or mixed one); old-old M(φ_live, φ_live);
* the independent reference φ*: M(φ*, φ*) and M(φ*, φ_live), hence P_com and P_up
  (design §6);
* the compatibility matrix over all serving generations with AC / AA / ACA;
* Lorentz health diagnostics (design §4) and the backfill decision (design §7).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from flows.params import Params
from flows.steps.context import DERIVED, load_splits, store_for
from flows.plan import GenerationPlan
from flows.steps.results import Evaluation, Gallery, Snapshot, Trained
from flows.artifacts import fmt
from components.data.selection import DataManifest
from components.evaluation import compat_summary, gallery_metrics, p_com, p_up
from components.evaluation.diagnostics import (
    clip_fraction,
    in_cone_fraction,
    uncertainty_seen_unseen,
)
from components.evaluation.plots import (
    compat_heatmap,
    training_curves,
    uncertainty_histogram,
)
from components.indexing.gallery import GalleryEmbeddings, gallery_beside
from components.indexing.mixed import item_uncertainty
from components.io import atomic_write_text
from components.models import load_model
from components.training import embed_images
from flows.backfill_rules import BackfillEvidence, BackfillRules, decide_backfill
from registry.lineage import (
    CompatRecord,
    DecisionRecord,
    EvaluationRecord,
    LineageStore,
)

__all__ = ["compat_records", "evaluate"]


def _metrics(q: GalleryEmbeddings, g: GalleryEmbeddings, p: Params) -> dict[str, float]:
    """M(φ_q, φ_g) on the shared gallery: queries are the gallery items (leave-one-out by id)."""
    return gallery_metrics(q, g, ks=tuple(p.evaluation.cmc_k), chunk_size=p.evaluation.chunk_size)


def compat_records(store: LineageStore, gen_id: int, ids: list[int], new_row: dict[int, dict[str, float]]) -> list[CompatRecord]:
    """C[t][k] = M(φ_t, φ_k) for serving generations ``ids`` (ascending, ending with ``gen_id``):
    older rows from the lineage, the new row from ``new_row`` (gallery id → metrics)."""
    out = []
    for metric in DERIVED:
        mat = np.full((len(ids), len(ids)), np.nan)
        for i, t in enumerate(ids):
            for j, k in enumerate(ids[: i + 1]):
                v = new_row.get(k, {}).get(metric) if t == gen_id else store.metric_value(t, k, metric)
                mat[i, j] = np.nan if v is None else v
        try:
            s = compat_summary(mat)
        except ValueError:  # a pair that cannot be compared (other geometry or width)
            s = {"ac": None, "aa": None, "aca": None}
        out.append(CompatRecord(metric, list(ids), [[None if np.isnan(v) else float(v) for v in row] for row in mat], s["ac"], s["aa"], s["aca"]))
    return out


def evaluate(plan: GenerationPlan, snap: Snapshot, trained: Trained, gallery: Gallery, ref: Trained | None = None, ref_gallery: Gallery | None = None) -> Evaluation:
    """Self / cross / old-old / reference metrics, P_com, P_up, compatibility matrix, diagnostics, decision."""
    store = store_for(plan)
    try:
        return _evaluate(plan, store, snap, trained, gallery, ref, ref_gallery)
    finally:
        store.close()


def _evaluate(plan: GenerationPlan, store: LineageStore, snap: Snapshot, trained: Trained, gallery: Gallery, ref: Trained | None, ref_gallery: Gallery | None) -> Evaluation:
    p = plan.p
    new = GalleryEmbeddings.load(Path(gallery.path))
    gid = plan.gen_id
    evals: list[EvaluationRecord] = []

    def add(qid: int, galid: int, vals: dict[str, float], qrole: str = "model", grole: str = "model") -> None:
        evals.extend(EvaluationRecord(qid, galid, m, v, qrole, grole) for m, v in vals.items())

    self_m = _metrics(new, new, p)
    add(gid, gid, self_m)
    parent = plan.parent
    live = GalleryEmbeddings.load(Path(parent.gallery)) if parent else None
    against: dict[int, dict[str, float]] = {}
    skipped: dict[int, str] = {}
    galleries: dict[int, GalleryEmbeddings] = {}
    for sid in plan.serving:
        if parent is not None and sid == parent.id:
            other = live
        else:
            other = GalleryEmbeddings.load(gallery_beside(store.generation(sid).index_path))
        assert other is not None
        galleries[sid] = other
        why = new.incompatibility(other)
        if why:
            skipped[sid] = why
            continue
        against[sid] = _metrics(new, other, p)
        add(gid, sid, against[sid])

    cross = against.get(parent.id) if parent else None
    parent_self = _metrics(live, live, p) if live is not None else None
    derived: dict[str, float | None] = {f"parent_self/{m}": v for m, v in (parent_self or {}).items()}
    ref_block = None
    if ref is not None and ref_gallery is not None and parent is not None and parent_self is not None and live is not None:
        refg = GalleryEmbeddings.load(Path(ref_gallery.path))
        ref_self = _metrics(refg, refg, p)
        add(gid, gid, ref_self, "reference", "reference")
        ref_cross = None
        if refg.incompatibility(live) is None:
            ref_cross = _metrics(refg, live, p)
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
    if plan.geometry == "lorentz" and new.features == "embedding":
        diagnostics.update(_lorentz_diagnostics(plan, snap, trained, new, live))
        groups = {"this generation": item_uncertainty(new)}
        title = f"generation {gid} gallery uncertainty"
        if parent is not None and live is not None and live.geometry == "lorentz":
            seen = np.isin(live.labels, np.asarray(parent.class_order))
            u_old = item_uncertainty(live)
            groups = {"live gallery, classes g%d saw" % parent.id: u_old[seen], "live gallery, unseen classes": u_old[~seen], **groups}
            title = f"gallery uncertainty: live gallery (g{parent.id}) vs g{gid}"
        artifacts.append(str(uncertainty_histogram(plan.staging_dir / "uncertainty.png", groups, title)))
    artifacts.append(str(training_curves(plan.staging_dir / "training.png", trained.history, f"generation {gid} ({trained.role}, {plan.alignment})")))

    ids = sorted(set(plan.serving) | {gid})
    compat = compat_records(store, gid, ids, {**against, gid: self_m})
    if len(ids) > 1:
        c = compat[-1]
        title = f"compatibility (mAP) as of g{gid}\nAC {fmt(c.ac, 3)}, AA {fmt(c.aa, 3)}, ACA {fmt(c.aca, 3)}"
        artifacts.append(str(compat_heatmap(plan.staging_dir / "compat_matrix.png", c.matrix, [f"g{i}" for i in ids], title)))
    decision = _decide(plan, cross, parent_self, derived, gallery.clip_fraction, skipped)
    compatible = parent is None or any(c["rule"] == "compatibility" and c["passed"] for c in decision.checks)
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
        "compatibility_matrix": {c.metric: {"generations": c.generation_ids, "matrix": c.matrix, "ac": c.ac, "aa": c.aa, "aca": c.aca} for c in compat},
        "backfill": {"required": decision.required, "reasons": decision.reasons, "checks": decision.checks},
        "compatible_with_live_gallery": compatible,
        "train_seconds": trained.seconds,
        "reference_train_seconds": ref.seconds if ref else None,
        "device": trained.device,
    }
    metrics_path = plan.staging_dir / "metrics.json"
    atomic_write_text(metrics_path, json.dumps(summary, indent=2, default=float) + "\n")
    artifacts.append(str(metrics_path))
    return Evaluation(evals, derived, diagnostics, decision, summary, artifacts, compat, compatible)


def _lorentz_diagnostics(plan: GenerationPlan, snap: Snapshot, trained: Trained, new: GalleryEmbeddings, live: GalleryEmbeddings | None) -> dict[str, float | None]:
    p, ws = plan.p, plan.workspace
    d: dict[str, float | None] = {"clip_fraction_gallery": clip_fraction(new.clipped)}
    train = DataManifest.from_json(Path(snap.manifest).read_text()).take(load_splits(p, ws).train)
    model = load_model(Path(trained.checkpoint))
    d["clip_fraction_train"] = clip_fraction(embed_images(model, train.images, batch_size=p.train.eval_batch_size, device=p.train.device).clipped)
    d["uncertainty_gallery_seen"], d["uncertainty_gallery_unseen"] = uncertainty_seen_unseen(new.z, new.labels, list(snap.class_order), new.curvature)
    parent = plan.parent
    if live is not None and parent is not None and live.geometry == "lorentz" and live.z.shape == new.z.shape:
        parent_model = load_model(Path(parent.checkpoint))
        d["clip_fraction_train_parent"] = clip_fraction(embed_images(parent_model, train.images, batch_size=p.train.eval_batch_size, device=p.train.device).clipped)
        d["clip_fraction_gallery_parent"] = clip_fraction(live.clipped)
        d["in_cone_fraction"] = in_cone_fraction(live.z, new.z, live.curvature, plan.alignment_options.get("epsilon", 0.1))
        d["uncertainty_parent_seen"], d["uncertainty_parent_unseen"] = uncertainty_seen_unseen(live.z, live.labels, list(parent.class_order), live.curvature)
    return d


def _decide(
    plan: GenerationPlan,
    cross: dict[str, float] | None,
    live_self: dict[str, float] | None,
    derived: dict[str, float | None],
    gallery_clip: float | None,
    skipped: dict[int, str],
) -> DecisionRecord:
    if plan.parent is None or live_self is None:
        return DecisionRecord(False, [], [], None)
    b = plan.p.backfill
    rules = BackfillRules(b.metric, b.require_compatibility, b.p_com_floor, b.zeta_ceiling, b.max_generations_since_backfill, b.clip_fraction_max)
    pcom = {m: derived.get(f"p_com/{m}") for m in DERIVED} if any(k.startswith("p_com/") for k in derived) else None
    ev = BackfillEvidence(
        live_generation_id=plan.parent.id,
        cross=cross,
        live_self=live_self,
        p_com=pcom,
        zeta=plan.zeta,
        gallery_clip_fraction=gallery_clip,
        generations_since_backfill=plan.generations_since_backfill,
        incompatibility=skipped.get(plan.parent.id),
    )
    return decide_backfill(ev, rules)
