"""Step 4: evaluate the new generation against every serving generation and the live gallery.

* self M(φ_new, φ_new); cross M(φ_new, φ_g) for every serving generation g (its own
  gallery; for the live gallery's generation, the live gallery itself, which after a
  backfill may be a rescaled or mixed one); old-old M(φ_live, φ_live);
* the independent reference φ*: M(φ*, φ*) and M(φ*, φ_live), hence P_com and P_up
  (docs/design.md §6);
* whether the new generation is compatible with the live gallery — a measured
  fact, whatever backfill rules are enabled (docs/design.md §7);
* the compatibility matrix over all serving generations with AC / AA / ACA;
* health diagnostics (docs/design.md §4.5): the generic Lorentz ones, and the alignment method's own (its
  ``AlignmentLoss.diagnostics``, e.g. HBCT's cones) against the live gallery;
* the backfill decision (docs/design.md §7).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from components.data.selection import DataManifest
from components.data.sources.split import SAMPLE_SIZE, SourceDataset
from components.evaluation import COMPAT_METRICS, DerivedMetrics, compat_summary, gallery_metrics, is_compatible
from components.evaluation.diagnostics import clip_fraction, uncertainty_seen_unseen
from components.evaluation.plots import compat_heatmap, training_curves, uncertainty_histogram
from components.indexing.gallery import GalleryEmbeddings
from components.indexing.mixed import item_uncertainty
from components.indexing.parts import GalleryParts
from components.io import atomic_write_text
from components.models import load_model
from components.models.encoder import EmbeddingModel
from components.training import embed_split
from flows.backfill.rules import BackfillEvidence, decide_backfill
from flows.gallery.data import load_splits
from flows.generation.results import Evaluation, EvaluationGallery, Snapshot, Trained
from flows.params import Params
from flows.planning import GenerationPlan
from flows.runtime.artifacts import fmt
from registry.records import CompatRecord, DecisionRecord, EvaluationRecord

__all__ = ["compat_records", "evaluate", "train_clip_fraction"]


def _read(path: str) -> GalleryEmbeddings:
    """An evaluation gallery in memory: its part store, or a ``gallery.npz`` written before part stores."""
    return GalleryParts(Path(path)).embeddings()


def _metrics(q: GalleryEmbeddings, g: GalleryEmbeddings, p: Params) -> dict[str, float]:
    """M(φ_q, φ_g) on the shared gallery: queries are the gallery items (leave-one-out by id)."""
    return gallery_metrics(q, g, ks=tuple(p.evaluation.cmc_k), chunk_size=p.evaluation.chunk_size)


def compat_records(plan: GenerationPlan, ids: list[int], new_row: dict[int, dict[str, float]]) -> list[CompatRecord]:
    """C[t][k] = M(φ_t, φ_k) for serving generations ``ids`` (ascending, ending with the plan's generation):
    older rows from the committed matrix the plan read, the new row from ``new_row`` (gallery id → metrics)."""
    gen_id = plan.gen_id
    out = []
    for metric in COMPAT_METRICS:
        mat = np.full((len(ids), len(ids)), np.nan)
        for i, t in enumerate(ids):
            for j, k in enumerate(ids[: i + 1]):
                v = new_row.get(k, {}).get(metric) if t == gen_id else plan.compat_value(t, k, metric)
                mat[i, j] = np.nan if v is None else v
        try:
            s = compat_summary(mat)
        except ValueError:  # a pair that cannot be compared (other geometry or width)
            s = {"ac": None, "aa": None, "aca": None}
        out.append(
            CompatRecord(
                metric,
                list(ids),
                [[None if np.isnan(v) else float(v) for v in row] for row in mat],
                s["ac"],
                s["aa"],
                s["aca"],
            )
        )
    return out


@dataclass
class _Measured:
    """Retrieval numbers of the new generation, its live gallery and its reference."""

    records: list[EvaluationRecord] = field(default_factory=list)
    self_m: dict[str, float] = field(default_factory=dict)
    against: dict[int, dict[str, float]] = field(default_factory=dict)  # serving generation → M(φ_new, φ_g)
    skipped: dict[int, str] = field(default_factory=dict)  # serving generation → why it cannot be queried
    live_self: dict[str, float] | None = None
    reference: dict[str, dict[str, float] | None] | None = None

    def add(self, qid: int, galid: int, vals: dict[str, float], qrole: str = "model", grole: str = "model") -> None:
        self.records.extend(EvaluationRecord(qid, galid, m, v, qrole, grole) for m, v in vals.items())


def _measure(
    plan: GenerationPlan,
    new: GalleryEmbeddings,
    live: GalleryEmbeddings | None,
    ref_gallery: EvaluationGallery | None,
) -> _Measured:
    p, gid, parent = plan.params, plan.gen_id, plan.parent
    r = _Measured()
    r.self_m = _metrics(new, new, p)
    r.add(gid, gid, r.self_m)
    for serving in plan.serving:
        sid = serving.id
        other = live if parent is not None and sid == parent.id else _read(serving.evaluation_gallery)
        assert other is not None
        why = new.incompatibility(other)
        if why:
            r.skipped[sid] = why
            continue
        r.against[sid] = _metrics(new, other, p)
        r.add(gid, sid, r.against[sid])
    if live is None or parent is None:
        return r
    r.live_self = _metrics(live, live, p)
    if ref_gallery is not None:
        refg = _read(ref_gallery.path)
        ref_self = _metrics(refg, refg, p)
        r.add(gid, gid, ref_self, "reference", "reference")
        ref_cross = None
        if refg.incompatibility(live) is None:
            ref_cross = _metrics(refg, live, p)
            r.add(gid, parent.id, ref_cross, "reference", "model")
        r.reference = {"self": ref_self, "cross": ref_cross}
    return r


def _plots(
    plan: GenerationPlan,
    trained: Trained,
    new: GalleryEmbeddings,
    live: GalleryEmbeddings | None,
    compat: list[CompatRecord],
    ids: list[int],
) -> list[str]:
    gid, parent, out = plan.gen_id, plan.parent, plan.staging_dir
    artifacts: list[str] = []
    if new.retrieval_space.radius_encodes_confidence:
        groups = {"this generation": item_uncertainty(new)}
        title = f"generation {gid} gallery uncertainty"
        if parent is not None and live is not None and live.space.radius_encodes_confidence:
            seen = np.isin(live.labels, np.asarray(parent.class_order))
            u_old = item_uncertainty(live)
            groups = {
                f"live gallery, classes g{parent.id} saw": u_old[seen],
                "live gallery, unseen classes": u_old[~seen],
                **groups,
            }
            title = f"gallery uncertainty: live gallery (g{parent.id}) vs g{gid}"
        artifacts.append(str(uncertainty_histogram(out / "uncertainty.png", groups, title)))
    artifacts.append(
        str(
            training_curves(
                out / "training.png", trained.history, f"generation {gid} ({trained.role}, {plan.alignment})"
            )
        )
    )
    if len(ids) > 1:
        c = compat[-1]
        title = f"compatibility (mAP) as of g{gid}\nAC {fmt(c.ac, 3)}, AA {fmt(c.aa, 3)}, ACA {fmt(c.aca, 3)}"
        artifacts.append(str(compat_heatmap(out / "compat_matrix.png", c.matrix, [f"g{i}" for i in ids], title)))
    return artifacts


def evaluate(
    plan: GenerationPlan,
    snap: Snapshot,
    trained: Trained,
    gallery: EvaluationGallery,
    ref: Trained | None = None,
    ref_gallery: EvaluationGallery | None = None,
) -> Evaluation:
    """Self / cross / old-old / reference metrics, P_com, P_up, compatibility, matrix, diagnostics, decision."""
    new = _read(gallery.path)
    parent = plan.parent
    live = _read(parent.evaluation_gallery) if parent else None
    r = _measure(plan, new, live, ref_gallery if ref is not None else None)
    cross = r.against.get(parent.id) if parent else None
    derived = DerivedMetrics()
    if r.live_self is not None:
        derived = DerivedMetrics.measure(
            new_self=r.self_m, cross=cross, old_self=r.live_self, ref_self=r.reference["self"] if r.reference else None
        )
    metric = plan.params.backfill.rules.metric
    compatible = parent is None or (
        cross is not None and r.live_self is not None and is_compatible(cross[metric], r.live_self[metric])
    )
    diagnostics = (
        _lorentz_diagnostics(plan, snap, trained, new, live)
        if new.retrieval_space.radius_encodes_confidence
        else _method_diagnostics(plan, trained, new, live)
    )
    ids = sorted(set(plan.serving_ids) | {plan.gen_id})
    compat = compat_records(plan, ids, {**r.against, plan.gen_id: r.self_m})
    artifacts = _plots(plan, trained, new, live, compat, ids)
    decision = _decide(plan, cross, r.live_self, compatible, derived, gallery.clip_fraction, r.skipped, r.self_m)
    summary = {
        "generation": plan.gen_id,
        "name": plan.name,
        "parent": parent.id if parent else None,
        "alignment": plan.alignment,
        "geometry": plan.geometry,
        "zeta": plan.zeta,
        "self": r.self_m,
        "cross": cross,
        "parent_self": r.live_self,
        "against": {str(k): v for k, v in r.against.items()},
        "not_comparable": {str(k): v for k, v in r.skipped.items()},
        "reference": r.reference,
        "derived": derived.to_rows(),
        "diagnostics": diagnostics,
        "compatibility_matrix": {
            c.metric: {"generations": c.generation_ids, "matrix": c.matrix, "ac": c.ac, "aa": c.aa, "aca": c.aca}
            for c in compat
        },
        "backfill": {"required": decision.required, "reasons": decision.reasons, "checks": decision.checks},
        "compatible_with_live_gallery": compatible,
        "train_seconds": trained.seconds,
        "reference_train_seconds": ref.seconds if ref else None,
        "device": trained.device,
    }
    artifacts.append(_write_summary(plan, summary))
    return Evaluation(r.records, derived, diagnostics, decision, summary, artifacts, compat, compatible)


def _write_summary(plan: GenerationPlan, summary: dict) -> str:
    """The evaluation summary as staging's metrics.json (written atomically); its path."""
    path = plan.staging_dir / "metrics.json"
    atomic_write_text(path, json.dumps(summary, indent=2, default=float) + "\n")
    return str(path)


def train_clip_fraction(p: Params, model: EmbeddingModel, split: SourceDataset, sample: int = SAMPLE_SIZE) -> float:
    """The fraction of a seeded sample of at most ``sample`` training images that ``model`` clips at ζ."""
    t = p.train
    emb, _, _ = embed_split(
        model,
        split.sample(sample),
        batch_size=t.eval_batch_size,
        device=t.device,
        precision=t.precision,
        workers=p.data.workers,
    )
    return clip_fraction(emb.clipped)


def _lorentz_diagnostics(
    plan: GenerationPlan, snap: Snapshot, trained: Trained, new: GalleryEmbeddings, live: GalleryEmbeddings | None
) -> dict[str, float | None]:
    p = plan.params
    d: dict[str, float | None] = {"clip_fraction_gallery": clip_fraction(new.clipped)}
    train = DataManifest.from_json(Path(snap.manifest).read_text()).take(load_splits(p, plan.workspace).train)
    model = load_model(Path(trained.checkpoint))
    d["clip_fraction_train"] = train_clip_fraction(p, model, train)
    d["uncertainty_gallery_seen"], d["uncertainty_gallery_unseen"] = uncertainty_seen_unseen(
        new.z, new.labels, list(snap.class_order), new.curvature
    )
    parent = plan.parent
    if live is not None and parent is not None and live.space.radius_encodes_confidence and live.z.shape == new.z.shape:
        parent_model = parent.model()
        d["clip_fraction_train_parent"] = train_clip_fraction(p, parent_model, train)
        d["clip_fraction_gallery_parent"] = clip_fraction(live.clipped)
        d |= _method_diagnostics(plan, trained, new, live)
        d["uncertainty_parent_seen"], d["uncertainty_parent_unseen"] = uncertainty_seen_unseen(
            live.z, live.labels, list(parent.class_order), live.curvature
        )
    return d


def _method_diagnostics(
    plan: GenerationPlan, trained: Trained, new: GalleryEmbeddings, live: GalleryEmbeddings | None
) -> dict[str, float | None]:
    """The alignment method's own health numbers against the live gallery (``AlignmentLoss.diagnostics``, e.g.
    HBCT's cones; empty for a method without any), measured where the new gallery can query the live one."""
    if live is None or plan.parent is None or new.incompatibility(live) is not None:
        return {}
    return plan.roles["model"].choice().diagnostics(trained.choices, live, new).measured


def _decide(
    plan: GenerationPlan,
    cross: dict[str, float] | None,
    live_self: dict[str, float] | None,
    compatible: bool,
    derived: DerivedMetrics,
    gallery_clip: float | None,
    skipped: dict[int, str],
    new_self: dict[str, float] | None = None,
) -> DecisionRecord:
    if plan.parent is None or live_self is None:
        return DecisionRecord(False, [], [], None)
    ev = BackfillEvidence(
        live_generation_id=plan.parent.id,
        cross=cross,
        live_self=live_self,
        compatible=compatible,
        p_com=derived.p_com,
        zeta=plan.zeta,
        gallery_clip_fraction=gallery_clip,
        generations_since_backfill=plan.generations_since_backfill,
        incompatibility=skipped.get(plan.parent.id),
        new_self=new_self,
    )
    return decide_backfill(ev, plan.params.backfill.rules, plan.params.backfill.gate)
