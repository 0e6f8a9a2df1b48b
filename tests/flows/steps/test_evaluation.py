"""The evaluation step (flows/steps/evaluation.py) on synthetic galleries with known geometry.

Compatibility with the live gallery is a measured fact whatever rules are enabled: every combination of
``backfill.rules.require_compatibility`` on/off and a compatible/incompatible new generation.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from components.indexing.gallery import GalleryEmbeddings
from components.indexing.store import PartWriter, StoredPart
from flows.params import Params, apply_overrides
from flows.planning import GenerationPlan, ParentRef
from flows.planning.plan import Selection, ServingGeneration
from flows.steps.evaluation import evaluate
from flows.steps.registration import gate_failures, promoted
from flows.steps.results import EvaluationGallery, Snapshot, Trained

N_CLASSES, PER_CLASS, DIM = 5, 24, 16


def _gallery(z: np.ndarray, labels: np.ndarray) -> GalleryEmbeddings:
    unit = z / np.linalg.norm(z, axis=1, keepdims=True)
    n = len(labels)
    return GalleryEmbeddings(
        "euclidean",
        1.0,
        z.astype(np.float32),
        unit.astype(np.float32),
        np.arange(n),
        labels,
        np.zeros(n, bool),
        np.zeros((n, N_CLASSES), np.float32),
    )


def _galleries(compatible: bool) -> tuple[GalleryEmbeddings, GalleryEmbeddings]:
    """(live, new): live = class centres + strong noise; new = the same centres with little noise (so its
    queries retrieve the live items better than they retrieve each other), or in a rotated space (incompatible)."""
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(N_CLASSES, DIM))
    labels = np.repeat(np.arange(N_CLASSES), PER_CLASS)
    live = centres[labels] + 1.2 * rng.normal(size=(len(labels), DIM))
    new = centres[labels] + 0.2 * rng.normal(size=(len(labels), DIM))
    if not compatible:
        new = new @ np.linalg.qr(rng.normal(size=(DIM, DIM)))[0]
    return _gallery(live, labels), _gallery(new, labels)


def _plan(tmp_path: Path, params: Params, live_path: Path) -> GenerationPlan:
    parent = ParentRef(
        id=0,
        name="g0",
        checkpoint="unused.pt",
        evaluation_gallery=str(live_path),
        zeta=None,
        curvature=1.0,
        geometry="euclidean",
        embed_dim=DIM,
        class_order=tuple(range(N_CLASSES)),
        mlflow_version="1",
        pointer_id=1,
    )
    return GenerationPlan(
        home=str(tmp_path / "ws"),
        params=params,
        params_digest="d",
        gen_id=1,
        name="g1",
        parent=parent,
        serving=(ServingGeneration(id=0, evaluation_gallery=str(live_path)),),
        alignment="l2",
        alignment_options={},
        geometry="euclidean",
        zeta=None,
        delta_zeta=0.2,
        zeta_prev=None,
        zeta_restarted=False,
        classes="all",
        fraction=1.0,
        backbone="resnet18",
        backbone_kwargs={},
        epochs=1,
        selection=Selection(
            class_order=tuple(range(N_CLASSES)), class_names=tuple("abcde"), count=120, sha256="s", fingerprint="fp"
        ),
        roles={},
        run_key="k",
        generations_since_backfill=1,
    )


@pytest.mark.parametrize("require", [True, False])
@pytest.mark.parametrize("compatible", [True, False])
def test_compatibility_is_measured_whatever_the_rules(tmp_path: Path, require: bool, compatible: bool):
    live, new = _galleries(compatible)
    live.save(tmp_path / "live" / "gallery.npz")
    params = apply_overrides(Params(), {"model.geometry": "euclidean", "backfill.rules.require_compatibility": require})
    plan = _plan(tmp_path, params, tmp_path / "live" / "gallery.npz")
    # the live gallery as bctflow wrote it before part stores (one gallery.npz), the new one as a part store
    writer = PartWriter(plan.staging_dir / "gallery", chunk_size=50)
    writer.add(StoredPart(new, np.ones(len(new), np.int64)))
    writer.finish()
    trained = Trained("model", "unused.pt", [{"epoch": 1.0, "loss": 1.0}], 1.0, "cpu", None, 1.0, DIM, DIM)
    snap = Snapshot("gen_001", "unused.json", "h", tuple(range(N_CLASSES)), tuple("abcde"), 120, "fp")
    ev = evaluate(
        plan, snap, trained, EvaluationGallery("model", str(plan.staging_dir / "gallery"), None, len(new), None)
    )

    cross, live_self = ev.summary["cross"]["map"], ev.summary["parent_self"]["map"]
    assert (cross > live_self) is compatible  # the synthetic galleries do what they say
    assert ev.compatible is compatible and ev.summary["compatible_with_live_gallery"] is compatible
    rules = {c["rule"] for c in ev.decision.checks}
    assert ("compatibility" in rules) is require
    assert ev.decision.required is (require and not compatible)
    # the promotion gate reads the fact, not the rules: an incompatible generation is never promoted automatically
    assert promoted(plan, ev) is compatible
    failures = gate_failures(ev.compatible, ev.decision.checks)
    if compatible:
        assert failures == []
    elif require:  # the failed rule says why, with the numbers
        assert failures == [
            f"empirical compatibility fails against live gallery generation 0: cross map {cross:.4f} ≤ its self map "
            f"{live_self:.4f}"
        ]
    else:  # no rule asked, yet the gate still refuses: the live gallery would refuse its queries
        assert failures == [
            "the live gallery does not accept its queries (they fail the compatibility criterion against it)"
        ]
    assert (plan.staging_dir / "metrics.json").exists() and (plan.staging_dir / "training.png").exists()
