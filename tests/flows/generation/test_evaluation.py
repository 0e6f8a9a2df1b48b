"""The evaluation step (flows/generation/evaluation.py) on synthetic galleries with known geometry.

Compatibility with the live gallery is a measured fact whatever rules are enabled: every combination of
``backfill.rules.require_compatibility`` on/off and a compatible/incompatible new generation.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from components.evaluation.lineage_timeline import Timeline
from components.indexing.gallery import GalleryEmbeddings
from components.indexing.parts import PartWriter, StoredPart
from flows.generation.evaluation import _method_diagnostics, evaluate
from flows.generation.registration import gate_failures, promoted
from flows.generation.results import EvaluationGallery, Snapshot, Trained
from flows.params import Params, apply_overrides
from flows.params.specs import train_config_from_params
from flows.planning import GenerationPlan, ParentRef, RolePlan
from flows.planning.plan import Selection, ServingGeneration
from tests.helpers import tiny_spec

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
        selection=Selection(
            class_order=tuple(range(N_CLASSES)), class_names=tuple("abcde"), count=120, sha256="s", fingerprint="fp"
        ),
        backbone="resnet18",
        backbone_kwargs={},
        epochs=1,
        roles={
            "model": RolePlan(
                role="model",
                alignment="l2",
                alignment_options={},
                spec=tiny_spec(
                    geometry="euclidean",
                    zeta=None,
                    embed_dim=DIM,
                    num_classes=N_CLASSES,
                    class_order=tuple(range(N_CLASSES)),
                ),
                config=train_config_from_params(params, epochs=1),
                run_key="k:model",
            )
        },
        run_key="k",
        generations_since_backfill=1,
        timeline=Timeline((), None, 0),
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


def _trained_with(plan: GenerationPlan, method: str, options: dict) -> GenerationPlan:
    """The plan of a Lorentz generation whose model trains with ``method`` (a test's stand-in for planning one)."""
    role = plan.roles["model"].model_copy(update={"alignment": method, "alignment_options": options})
    return plan.model_copy(
        update={"alignment": method, "alignment_options": options, "geometry": "lorentz", "roles": {"model": role}}
    )


def test_the_alignment_method_reports_its_own_diagnostics_against_the_live_gallery(tmp_path: Path):
    """HBCT's cones come from its AlignmentLoss.diagnostics, at the ε it trained with (its choices, else configured);
    a method that trains no cones reports none, and nothing is measured against a gallery the new one cannot query."""
    live, new = (replace(g, geometry="lorentz") for g in _galleries(compatible=True))
    plan = _plan(tmp_path, Params(), tmp_path / "live" / "gallery.npz")
    hbct = _trained_with(plan, "hbct", {"epsilon": 0.3})
    trained = Trained("model", "unused.pt", [], 1.0, "cpu", None, 1.0, DIM, DIM + 1)
    configured = _method_diagnostics(hbct, trained, new, live)
    chosen = _method_diagnostics(hbct, replace(trained, choices={"epsilon": 0.6}), new, live)
    assert list(configured) == ["in_cone_fraction", "entail_angle_deg", "aperture_deg"]  # the MLflow diag/… names
    assert 0.0 <= configured["in_cone_fraction"] <= chosen["in_cone_fraction"] <= 1.0
    assert chosen["aperture_deg"] > configured["aperture_deg"]  # the wider cone of the ε chosen from data
    bct = _trained_with(plan, "bct", {})
    assert _method_diagnostics(bct, trained, new, live) == {}
    assert _method_diagnostics(hbct, trained, replace(new, ids=new.ids + 1), live) == {}  # other items
