"""The generation's MLflow run, opened before anything trains (docs/design.md §7.17).

:func:`open_run` right after the plan is checked under the workspace lock: the run's params are the keys of
params.yaml, as this run resolved them, that apply to this generation (flattened: ``train.epochs``,
``alignment.weight`` …; :func:`flows.params.keys.generation_keys`: generation 0 trains with the base loss only, so it
records no ``alignment.*``, and a generation whose entry names its method records no ``alignment.method``) and the
generation's own choices (``generation.*``: what it trained with — ``generation.alignment`` is its model's method —,
ζ, epochs, parent …); params.yaml itself is logged under ``params/``; the tags name the generation, the Prefect flow
run and the git commit. :func:`log_snapshot` adds the datasets the
generation used (MLflow dataset inputs: the training selection, digest = the DVC md5 of its manifest, and the
evaluation split) and the DVC-snapshotted manifest under ``data/``. Training logs each epoch as it ends
(:func:`log_training`); the reference φ* trains in a child run (:func:`open_reference_run`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml

from flows.gallery.data import load_splits
from flows.generation.results import Snapshot, Trained
from flows.params.keys import generation_keys
from flows.params.tags import pick
from flows.planning import GenerationPlan
from flows.runtime.provenance import git_commit, mlflow_run_url, prefect_flow_run
from registry.tracking.runs import DatasetInput, RunSpec

__all__ = ["log_snapshot", "log_training", "open_reference_run", "open_run", "run_name", "run_url"]


def run_name(plan: GenerationPlan) -> str:
    return f"gen-{plan.gen_id}-{plan.alignment}"


def _applied_params(plan: GenerationPlan) -> dict[str, Any]:
    """params.yaml as this run resolved it, less the keys that do not apply to this generation (the alignment of
    generation 0, which trains with the base loss only; ``alignment.method`` where the entry names another method)."""
    p, raw = plan.params, plan.params.as_dict()
    named = plan.alignment != p.alignment.method
    keys = generation_keys(p, aligned=plan.parent is not None, method=plan.alignment, named=named, run_options=True)
    return {**pick(raw, keys), "generations": raw["generations"]}


def _generation_params(plan: GenerationPlan) -> dict[str, Any]:
    """What this generation chose and trained with, beside params.yaml's keys (its spec and what planning derived):
    ``alignment`` is its model's method (``independent`` for generation 0, whatever ``alignment.method`` says)."""
    return {
        "id": plan.gen_id,
        "name": plan.name,
        "parent": plan.parent.id if plan.parent else None,
        "alignment": plan.alignment,
        "alignment_options": plan.alignment_options,
        "geometry": plan.geometry,
        "zeta": plan.zeta,
        "zeta_previous": plan.zeta_prev,
        "delta_zeta": plan.delta_zeta,
        "zeta_restarted": plan.zeta_restarted,
        "classes": plan.classes,
        "fraction": plan.fraction,
        "backbone": plan.backbone,
        "backbone_kwargs": plan.backbone_kwargs,
        "epochs": plan.epochs,
        "reference": plan.reference,
    }


def _description(plan: GenerationPlan, links: dict[str, str]) -> str:
    """The run's description (markdown, the run page's first lines)."""
    aligned = (
        "generation 0: base loss only (`independent`, whatever `alignment.method` says), its embeddings fill the "
        "live gallery"
        if plan.parent is None
        else f"{plan.alignment}, aligned to g{plan.parent.id} (whose embeddings fill the live gallery)"
    )
    zeta = "" if plan.zeta is None else f", ζ = {plan.zeta:g}"
    lines = [f"**Generation {plan.gen_id} ({plan.name})** of the bctflow lineage — {aligned}{zeta}."]
    if "prefect.flow_run_id" in links:
        name = links.get("prefect.flow_run_name", links["prefect.flow_run_id"])
        where = f"[{name}]({links['prefect.flow_run_url']})" if "prefect.flow_run_url" in links else f"`{name}`"
        lines.append(f"Prefect flow run {where} (id `{links['prefect.flow_run_id']}`).")
    lines.append(
        "What it trained with: the `generation.*` params (`generation.alignment`: its model's method); the other "
        "params are params.yaml's keys that apply to it (the whole file: `params/params.yaml`)."
    )
    lines.append("The lineage so far: `lineage/lineage.png` (artifacts); the reference φ*: the nested run.")
    return "\n\n".join(lines)


def open_run(plan: GenerationPlan) -> str:
    """Open (or resume, for the same run key and params) the generation's MLflow run; its id."""
    p, ws = plan.params, plan.workspace
    plan.staging_dir.mkdir(parents=True, exist_ok=True)
    params_file = plan.staging_dir / "params.yaml"  # params.yaml as this run resolved it (overrides, defaults)
    params_file.write_text(yaml.safe_dump(p.as_dict(), sort_keys=False, allow_unicode=True))
    links = prefect_flow_run()
    tags = {
        "bctflow.generation": str(plan.gen_id),
        "bctflow.generation_name": plan.name,
        "bctflow.alignment": plan.alignment,
        "bctflow.params_digest": plan.params_digest,
        **({"bctflow.code_digest": plan.code_digest} if plan.code_digest else {}),
        "mlflow.source.name": "bctflow: Prefect flow new-generation",
        "mlflow.source.type": "JOB",
        **links,
        **git_commit(),
    }
    spec = RunSpec(
        run_key=plan.run_key,
        name=run_name(plan),
        params={**_applied_params(plan), "generation": _generation_params(plan)},
        tags=tags,
        files={"params": [params_file]},
        description=_description(plan, links),
    )
    return ws.tracking(p).runs.open(spec)


def run_url(plan: GenerationPlan, run_id: str) -> str:
    """The run's page in the MLflow UI (see :func:`flows.runtime.provenance.mlflow_run_url`)."""
    store = plan.workspace.tracking(plan.params)
    return mlflow_run_url(store.tracking_uri, store.experiment_id(store.client()), run_id)


def log_snapshot(plan: GenerationPlan, run_id: str, snap: Snapshot) -> None:
    """The datasets the generation uses, as MLflow dataset inputs, and the DVC-snapshotted manifest under data/."""
    p = plan.params
    splits = load_splits(p, plan.workspace)
    manifest = Path(snap.manifest)
    source = p.data.path or p.data.dataset
    training = DatasetInput(
        name=f"{p.data.dataset}-{snap.name}",
        digest=snap.data_hash,  # the DVC md5 of the manifest (the lineage's data_hash)
        source=str(manifest),
        context="training",
        profile={"num_rows": snap.n_train, "num_classes": len(snap.class_order), "dvc_md5": snap.data_hash},
        image_shape=splits.train.image_shape,
    )
    evaluation = DatasetInput(
        name=f"{p.data.dataset}-test",
        digest=hashlib.md5(splits.fingerprint.encode()).hexdigest(),
        source=str(source),
        context="evaluation",
        profile={"num_rows": len(splits.test), "num_classes": splits.test.num_classes},
        image_shape=splits.test.image_shape,
    )
    runs = plan.workspace.tracking(p).runs
    runs.log_datasets(run_id, [training, evaluation])
    runs.log_params(run_id, {"data_snapshot": {"name": snap.name, "dvc_md5": snap.data_hash, "n_train": snap.n_train}})
    runs.log_files(run_id, "data", [manifest, manifest.with_name(manifest.name + ".dvc")])


def open_reference_run(plan: GenerationPlan, parent_run_id: str) -> str:
    """The child run in which the reference φ* trains (nested under the generation's run in the UI)."""
    cfg = plan.train_config("reference")
    spec = RunSpec(
        run_key=plan.role_run_key("reference"),
        name=f"gen-{plan.gen_id}-reference",
        params={"role": "reference", "alignment": "independent", "seed": cfg.seed, "epochs": plan.epochs},
        tags={"bctflow.generation": str(plan.gen_id), "bctflow.role": "reference"},
        parent_run_id=parent_run_id,
        description=f"The independent reference φ* of generation {plan.gen_id}: the same model trained without "
        "alignment, for P_com / P_up (docs/design.md §6.3).",
    )
    return plan.workspace.tracking(plan.params).runs.open(spec)


def log_training(plan: GenerationPlan, run_id: str, trained: Trained) -> None:
    """The training's per-epoch records (those the run does not hold yet), its duration and device, and what the
    method chose from data before training (params ``chosen.<name>``, e.g. HBCT's ε and the sentence saying why)."""
    runs = plan.workspace.tracking(plan.params).runs
    runs.log_epochs(run_id, trained.history)
    runs.log_metrics(run_id, {"train_seconds": trained.seconds})
    runs.set_tags(run_id, {"bctflow.device": trained.device})
    if trained.choices:
        runs.log_params(run_id, {"chosen": trained.choices})
