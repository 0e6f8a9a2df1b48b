"""Make the plan of the next generation: every decision and every check, once, before anything is written.

:func:`make_plan` runs in the calling process (no Prefect server needed) and writes nothing but the dataset cache
(a dataset that is not there yet is fetched now, when downloads are on). It reads the lineage in one read-only
session (an empty lineage stands in for one that does not exist yet) and the parent's checkpoint once, and refuses
bad input — unknown alignment or dataset, ζ ≤ 0, K ≤ 0, Δζ < 0, a parent checkpoint that does not match its
lineage record, a live gallery that cannot serve, an evaluation gallery that is not the one the lineage pinned, a
resumable checkpoint of another run, a data selection, a model, an index or a disk that will not do
(:mod:`flows.planning.checks`) — with one line. The plan it returns is final: the flow takes it as its parameter and
no step changes it (docs/design.md §7.9).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from components.code_digest import code_digest
from components.data.catalog import DATASETS
from components.errors import CheckpointMismatchError, ConfigError
from components.geometry import create_space
from components.losses import AlignmentChoice, choose_alignment
from components.losses.base_losses import base_loss
from components.models.checkpoint import load_torch_safe
from components.training.checkpoints import latest_checkpoint
from flows.gallery.data import load_splits, select_generation_data
from flows.params import GenerationSpec, Params, params_digest
from flows.planning import past
from flows.planning.checks import check_models_and_disk, check_run_environment
from flows.planning.plan import GenerationPlan, ParentRef, RolePlan, Selection
from flows.planning.roles import ROLES, RoleRequest, resolve_role
from flows.planning.zeta import choose_zeta
from flows.runtime.workspace import Workspace
from registry.lineage import LineageDB

__all__ = ["make_plan"]


def make_plan(
    params: Params,
    home: str | Path,
    spec: GenerationSpec | None = None,
    *,
    digest: str | None = None,
    data_fingerprint: str | None = None,
    code: str | None = None,
    store: LineageDB | None = None,
) -> GenerationPlan:
    """The plan of the next generation in the workspace at ``home``, or the error the input deserves.

    ``digest`` / ``data_fingerprint`` / ``code``: already computed by the caller (the nightly change check);
    ``store``: a read-only lineage session the caller already holds (else one is opened and closed here).
    """
    ws = Workspace(Path(home))
    if store is not None:
        return _plan(params, ws, store, spec, digest, data_fingerprint, code)
    with ws.lineage(params, readonly=True) as own:
        return _plan(params, ws, own, spec, digest, data_fingerprint, code)


def _plan(
    params: Params,
    ws: Workspace,
    store: LineageDB,
    spec: GenerationSpec | None,
    digest: str | None,
    data_fingerprint: str | None,
    code: str | None,
) -> GenerationPlan:
    DATASETS.get(params.data.dataset)  # DataError for an unknown dataset
    gen_id = store.next_generation_id()
    if gen_id == 0:
        past.check_no_orphaned_workspace(ws, store)
    spec = _named_spec(store, spec, gen_id)
    notes: list[str] = []
    choice = _alignment(params, spec, gen_id, notes)
    parent = past.parent_ref(store)  # its checkpoint read once and verified against the lineage
    fixed, zeta_prev, restarted = _fixed_zeta(params, store, parent, notes)
    choice.check_models(
        params.model.geometry, params.model.embed_dim, parent and parent.geometry, parent and parent.embed_dim
    )
    base_loss(params.train.base_loss, params.train.base_options)  # ConfigError: bad base-loss options
    if parent is not None:
        past.check_live_gallery(ws, store)
    serving = past.serving_generations(store, parent, gen_id)
    past.check_evaluation_galleries(store, parent, serving)  # what evaluation reads: the galleries the lineage pinned
    ids = tuple(sorted({s.id for s in serving}))
    history = past.compat_history(store, ids)
    digest = digest or params_digest(params)
    check_run_environment(params, ws)

    splits = load_splits(params, ws)
    classes = "all" if spec.classes == "all" else list(spec.classes)
    manifest = select_generation_data(
        params, splits, gen_id, classes, spec.fraction, parent.class_order if parent else None
    )
    clipped_parent = parent.model() if parent is not None and parent.space.radius_encodes_confidence else None
    zeta = choose_zeta(params.geometry, fixed, zeta_prev, clipped_parent, splits.train, params.data.split_seed + gen_id)
    if zeta.raised:
        notes.append(zeta.reason or "")
    backbone = spec.backbone or params.model.backbone
    kwargs = dict(spec.backbone_kwargs if spec.backbone_kwargs is not None else params.model.backbone_kwargs)
    run_key = _run_key(gen_id, parent, spec, choice.name, digest)
    options = dict(params.alignment.options.get(choice.name, {}))
    roles: dict[str, RolePlan] = {}
    for role in ROLES if _uses_reference(params, spec, parent, choice) else ("model",):
        resolved = resolve_role(
            RoleRequest(
                params=params,
                role=role,
                generation=gen_id,
                method=choice.name,
                options=options,
                parent=parent.spec if parent is not None else None,
                train=splits.train,  # normalisation statistics of the training split (one seeded sample)
                class_order=manifest.class_order,
                class_names=manifest.class_names,
                geometry=params.model.geometry,
                zeta=zeta.zeta,
                backbone=backbone,
                backbone_kwargs=kwargs,
                epochs=spec.epochs or params.train.epochs,
            )
        )
        roles[role] = RolePlan(
            role=role,
            alignment=resolved.alignment.name,
            alignment_options=options if role == "model" else {},
            spec=resolved.spec,
            config=resolved.config,
            run_key=f"{run_key}:{role}",
        )
    check_models_and_disk(params, ws, [r.spec for r in roles.values()], splits.test, splits.name, gen_id == 0)
    plan = GenerationPlan(
        home=str(ws.home),
        params=params,
        params_digest=digest,
        data_fingerprint=data_fingerprint,
        code_digest=code or code_digest(),
        gen_id=gen_id,
        name=spec.name,
        parent=parent,
        serving=serving,
        compat_history=history,
        alignment=choice.name,
        alignment_options=options,
        geometry=params.model.geometry,
        zeta=zeta.zeta,
        delta_zeta=zeta.delta_zeta,
        zeta_prev=zeta_prev,
        zeta_restarted=restarted,
        zeta_reason=zeta.reason,
        classes=tuple(spec.classes) if isinstance(spec.classes, list) else spec.classes,
        fraction=spec.fraction,
        selection=Selection(
            class_order=manifest.class_order,
            class_names=manifest.class_names,
            count=len(manifest),
            sha256=manifest.sha256,
            fingerprint=splits.fingerprint,
        ),
        backbone=backbone,
        backbone_kwargs=kwargs,
        epochs=spec.epochs or params.train.epochs,
        roles=roles,
        run_key=run_key,
        generations_since_backfill=0 if parent is None else sum(1 for s in serving if s.id > parent.id) + 1,
        timeline=store.timeline(params.backfill.rules.metric),
        notes=tuple(notes),
    )
    _check_resumable(plan)
    return plan


def _run_key(gen_id: int, parent: ParentRef | None, spec: GenerationSpec, alignment: str, digest: str) -> str:
    body = json.dumps(
        {
            "gen": gen_id,
            "parent": parent and parent.id,
            "spec": spec.model_dump(mode="json"),
            "alignment": alignment,
            "params": digest,
        },
        sort_keys=True,
    )
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def _named_spec(store: LineageDB, spec: GenerationSpec | None, gen_id: int) -> GenerationSpec:
    """The request with its name (default g<id>), refused when the lineage already has that name."""
    spec = spec or GenerationSpec()
    if spec.name is None:
        spec = spec.model_copy(update={"name": f"g{gen_id}"})
    if store.generation_by_name(spec.name) is not None:
        raise ConfigError(f"a generation named {spec.name!r} already exists in the lineage; choose another --name")
    return spec


def _alignment(params: Params, spec: GenerationSpec, gen_id: int, notes: list[str]) -> AlignmentChoice:
    """The method and options this generation trains with (ConfigError for an unknown name or bad options, even
    for generation 0, which always trains with the base loss only)."""
    requested = spec.alignment or params.alignment.method
    choice = choose_alignment(requested, params.alignment.options.get(requested))
    if gen_id == 0 and requested != "independent":
        notes.append(f"generation 0 trains with the base loss only; alignment {requested!r} applies from generation 1")
        choice = choose_alignment("independent", params.alignment.options.get("independent"))
    return choice


def _fixed_zeta(
    params: Params, store: LineageDB, parent: ParentRef | None, notes: list[str]
) -> tuple[float | None, float | None, bool]:
    """(ζ by the fixed rule, ζ it grows from, whether that restarted after a backfill) — docs/design.md §3.3."""
    g = params.geometry
    zeta_prev, restarted = past.zeta_prev(store)
    clipped = create_space(params.model.geometry).radius_encodes_confidence  # the model has a clip radius ζ
    if parent is None:
        return (g.zeta0 if clipped else None), None, restarted
    if restarted:
        notes.append(f"ζ restarts from the rescaled live gallery (ζ = {zeta_prev}) after the last backfill")
    zeta = round((zeta_prev if zeta_prev is not None else g.zeta0) + g.delta_zeta, 10) if clipped else None
    return zeta, zeta_prev, restarted


def _uses_reference(params: Params, spec: GenerationSpec, parent: ParentRef | None, choice: AlignmentChoice) -> bool:
    """Train the independent reference φ*: asked for (P_com / P_up) and meaningful, or needed by the method (BT²)."""
    if parent is None:
        return False
    asked = spec.reference if spec.reference is not None else params.evaluation.reference
    return bool(asked and choice.name != "independent") or choice.needs_reference


def _check_resumable(plan: GenerationPlan) -> None:
    """Leftover training output in staging (epoch checkpoints or a finished model) must belong to
    this very run; otherwise refuse now rather than overwrite it or resume from it."""
    for role in plan.roles:
        found = [
            p
            for p in (latest_checkpoint(plan.role_dir(role) / "checkpoints"), plan.role_dir(role) / "model.pt")
            if p and p.exists()
        ]
        for path in found:
            obj = load_torch_safe(path)
            if obj.get("run_key") != plan.role_run_key(role):
                raise CheckpointMismatchError(
                    f"staging checkpoint {path} belongs to another run of generation {plan.gen_id} "
                    f"(run key {obj.get('run_key')!r}, this run {plan.role_run_key(role)!r}); "
                    f"delete {plan.staging_dir} to start over, or rerun with that run's parameters to resume it"
                )
