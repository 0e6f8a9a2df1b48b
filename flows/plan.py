"""Planning a generation: every decision and every validation, before anything is written.

``make_plan`` reads params and the lineage and returns an immutable
:class:`GenerationPlan`, made once per run and handed to every step (and, as a
Prefect flow parameter, to the flow). It raises ConfigError / DataError /
CheckpointMismatchError for bad input — unknown alignment or dataset,
ζ ≤ 0, K ≤ 0, Δζ < 0, a parent checkpoint that does not match its lineage
record, a resumable checkpoint of another run — so nothing is trained or
written when the input is wrong. :func:`check_current` re-checks, under the
workspace lock, that the lineage has not moved since the plan was made (docs/design.md §7.9).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from components.code_digest import code_digest
from components.data.catalog import get_dataset_loader
from components.errors import CheckpointMismatchError, ConfigError, IndexIntegrityError, LineageError
from components.indexing import MANIFEST_FILE
from components.indexing.gallery import gallery_beside
from components.indexing.live import LiveGallery
from components.io import file_sha256
from components.losses import AlignmentChoice, choose_alignment
from components.losses.base_losses import base_loss
from components.models.checkpoint import load_torch_safe, read_spec
from components.training.loop import TrainConfig, latest_checkpoint
from components.training.seeds import init_seed
from flows.params import GenerationSpec, Params, params_digest
from flows.specs import train_config_from_params
from flows.workspace import Workspace
from registry.lineage import LineageStore

__all__ = ["ROLES", "GenerationPlan", "ParentRef", "check_current", "make_plan"]

ROLES = ("model", "reference")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ParentRef(_Frozen):
    """The generation whose embeddings fill the live gallery (the new one aligns to it).

    ``checkpoint`` / ``zeta`` are those of the model that embedded the live gallery:
    the generation's own, or its rescaled copy after a ζ-restarting backfill.
    ``gallery``: the live gallery's embeddings (gallery.npz beside the live index);
    ``pointer_id``: the live-pointer row the plan was made against.
    """

    id: int
    name: str
    checkpoint: str
    gallery: str
    zeta: float | None
    curvature: float
    geometry: str
    embed_dim: int
    class_order: tuple[int, ...]
    mlflow_version: str | None
    pointer_id: int
    #: sha256 the lineage recorded for ``checkpoint`` (None: recorded before lineage revision 0002)
    checkpoint_sha256: str | None = None


class GenerationPlan(_Frozen):
    home: str
    params: Params
    #: digest of the model-shaping params and the dataset's content fingerprint (the nightly check hands both over)
    params_digest: str
    data_fingerprint: str | None = None
    #: digest of the model-shaping code (components/code_digest.py), recorded in the lineage
    code_digest: str | None = None
    gen_id: int
    name: str
    parent: ParentRef | None
    serving: tuple[int, ...]
    alignment: str
    alignment_options: dict[str, Any]
    geometry: str
    zeta: float | None
    delta_zeta: float
    zeta_prev: float | None
    zeta_restarted: bool
    #: why ζ is what it is, when data chose it (geometry.zeta_rule: percentile; flows/steps/zeta.py)
    zeta_reason: str | None = None
    classes: tuple[int, ...] | str
    fraction: float
    backbone: str
    backbone_kwargs: dict[str, Any]
    epochs: int
    reference: bool
    run_key: str
    generations_since_backfill: int
    notes: tuple[str, ...] = ()

    @property
    def workspace(self) -> Workspace:
        return Workspace(Path(self.home))

    @property
    def staging_dir(self) -> Path:
        return self.workspace.staging(self.gen_id)

    @property
    def final_dir(self) -> Path:
        return self.workspace.generation_dir(self.gen_id)

    def role_dir(self, role: str) -> Path:
        """Staging folder of the generation's model or of its independent reference."""
        return self.staging_dir if role == "model" else self.staging_dir / "reference"

    def train_config(self, role: str) -> TrainConfig:
        """The role's training config; its seed is the role's own (components/training/seeds.py): the generation's
        model does not start from its parent's weights, and the reference is an independent twin, not a copy."""
        return train_config_from_params(
            self.params, epochs=self.epochs, seed=init_seed(self.params.train.seed, self.gen_id, role)
        )

    def role_alignment(self, role: str) -> str:
        return "independent" if role == "reference" else self.alignment

    def role_run_key(self, role: str) -> str:
        return f"{self.run_key}:{role}"


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


def _parent_ref(store: LineageStore) -> ParentRef | None:
    """The live gallery's generation and model, from the newest live pointer (None: empty lineage)."""
    ptr = store.live_pointer()
    if ptr is None:
        return None
    g = store.generation(ptr.generation_id)
    return ParentRef(
        pointer_id=ptr.id,
        id=g.id,
        name=g.name,
        checkpoint=ptr.model_checkpoint or g.checkpoint_path,
        gallery=str(gallery_beside(ptr.index_path)),
        zeta=ptr.zeta if ptr.zeta is not None else g.zeta,
        curvature=g.curvature,
        geometry=g.geometry,
        embed_dim=g.embed_dim,
        class_order=tuple(g.class_order),
        mlflow_version=g.mlflow_version,
        checkpoint_sha256=ptr.model_sha256 if ptr.model_checkpoint else g.checkpoint_sha256,
    )


def _zeta_prev(store: LineageStore) -> tuple[float | None, bool]:
    """ζ the next generation grows from: the newest generation's, or ζ₀ after a ζ-restarting backfill since."""
    gens = store.generations()
    if not gens:
        return None, False
    newest = gens[-1]
    ptr = store.live_pointer()
    restart = next((b for b in reversed(store.backfills()) if b.zeta_restarted), None)
    if (
        restart is not None
        and ptr is not None
        and ptr.backfill_id == restart.id
        and restart.to_generation_id >= newest.id
    ):
        return ptr.zeta, True
    return newest.zeta, False


def _check_no_orphaned_workspace(ws: Workspace, store: LineageStore) -> None:
    """An empty lineage beside committed generation folders or a live gallery means the lineage was lost (a deleted
    or zero-byte database, a wrong lineage.db_url): training generation 0 again would re-register it in MLflow and
    take over its aliases. Refuse instead."""
    gens = sorted(p.name for p in ws.generations_dir.glob("gen_*")) if ws.generations_dir.is_dir() else []
    live = (ws.live_dir / "CURRENT").exists()
    if gens or live:
        found = ", ".join(gens[:3]) + ("…" if len(gens) > 3 else "") + (" and a live gallery" if live else "")
        raise LineageError(
            f"the lineage database {store.url} records no generation, but {ws.home} holds {found.lstrip(', ')}: the "
            "lineage is missing or was emptied. Restore it from a backup (or fix lineage.db_url); to start a new "
            "chain, use another --home"
        )


def _check_live_gallery(ws: Workspace, store: LineageStore) -> None:
    """The live gallery must serve what the lineage says: CURRENT names the lineage's live index and generation, that
    index loads (manifest, sha256 of every file, structure — components/indexing/faiss_index.py), and its manifest is
    the one the lineage pinned (revision 0005)."""
    ptr, live = store.live_pointer(), LiveGallery(ws.live_dir)
    try:
        if ptr is not None and not live.matches(ptr.index_path, generation=ptr.generation_id):
            raise IndexIntegrityError(
                f"{live.pointer_path} does not name the live index the lineage records ({ptr.index_path}, generation "
                f"{ptr.generation_id}); run `bctflow doctor --repair` to rewrite it from the lineage"
            )
        live.index()
        manifest = Path(ptr.index_path) / MANIFEST_FILE if ptr is not None else None
        if ptr is not None and ptr.index_sha256 and manifest and file_sha256(manifest) != ptr.index_sha256:
            raise IndexIntegrityError(
                f"{manifest} is not the manifest the lineage pinned when generation {ptr.generation_id}'s gallery went "
                f"live (sha256 {ptr.index_sha256[:12]}…): the index was replaced or edited; restore that folder from a "
                "backup, or rebuild the gallery with `bctflow backfill`"
            )
    except IndexIntegrityError as err:
        raise IndexIntegrityError(f"the live gallery cannot serve: {err}") from None


def _check_parent_checkpoint(parent: ParentRef) -> None:
    """The parent's checkpoint must be the model its lineage record describes: its bytes (sha256, when recorded),
    then its spec."""
    path = Path(parent.checkpoint)
    if parent.checkpoint_sha256 is not None and path.is_file() and file_sha256(path) != parent.checkpoint_sha256:
        raise CheckpointMismatchError(
            f"parent generation {parent.id}'s checkpoint {path} is not the file the lineage recorded (sha256 "
            f"{parent.checkpoint_sha256[:12]}…, the file has another content); restore the original checkpoint of "
            "that generation from a backup"
        )
    obj = load_torch_safe(path)
    spec = read_spec(obj, parent.checkpoint)
    expected = {
        "geometry": parent.geometry,
        "output_dim": parent.embed_dim,
        "zeta": parent.zeta,
        "class_order": parent.class_order,
    }
    diffs = [
        f"{k}: checkpoint has {getattr(spec, k)!r}, lineage has {v!r}"
        for k, v in expected.items()
        if getattr(spec, k) != v
    ]
    if diffs:
        raise CheckpointMismatchError(
            f"parent generation {parent.id}'s checkpoint {parent.checkpoint} does not match its lineage record "
            f"({'; '.join(diffs)}); "
            "restore the original checkpoint of that generation"
        )


def _check_resumable(plan: GenerationPlan) -> None:
    """Leftover training output in staging (epoch checkpoints or a finished model) must belong to
    this very run; otherwise refuse now rather than overwrite it or resume from it."""
    for role in ROLES:
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


def _named_spec(store: LineageStore, spec: GenerationSpec | None, gen_id: int) -> GenerationSpec:
    """The request with its name (default g<id>), refused when the lineage already has that name."""
    spec = spec or GenerationSpec()
    if spec.name is None:
        spec = spec.model_copy(update={"name": f"g{gen_id}"})
    if store.generation_by_name(spec.name) is not None:
        raise ConfigError(f"a generation named {spec.name!r} already exists in the lineage; choose another --name")
    return spec


def _alignment(params: Params, spec: GenerationSpec, parent: ParentRef | None, notes: list[str]) -> AlignmentChoice:
    """The method and options this generation trains with (ConfigError for an unknown name or bad options, even
    for generation 0, which always trains with the base loss only)."""
    requested = spec.alignment or params.alignment.method
    choice = choose_alignment(requested, params.alignment.options.get(requested))
    if parent is None and requested != "independent":
        notes.append(f"generation 0 trains with the base loss only; alignment {requested!r} applies from generation 1")
        choice = choose_alignment("independent", params.alignment.options.get("independent"))
    return choice


def _zeta(
    params: Params, store: LineageStore, parent: ParentRef | None, notes: list[str]
) -> tuple[float | None, float | None, bool]:
    """(ζ of the new generation, ζ it grows from, whether that restarted after a backfill) — docs/design.md §3.3."""
    g = params.geometry
    zeta_prev, restarted = _zeta_prev(store)
    lorentz = params.model.geometry == "lorentz"
    if parent is None:
        return (g.zeta0 if lorentz else None), None, restarted
    if restarted:
        notes.append(f"ζ restarts from the rescaled live gallery (ζ = {zeta_prev}) after the last backfill")
    zeta = round((zeta_prev if zeta_prev is not None else g.zeta0) + g.delta_zeta, 10) if lorentz else None
    return zeta, zeta_prev, restarted


def _uses_reference(params: Params, spec: GenerationSpec, parent: ParentRef | None, choice: AlignmentChoice) -> bool:
    """Train the independent reference φ*: asked for (P_com / P_up) and meaningful, or needed by the method (BT²)."""
    if parent is None:
        return False
    asked = spec.reference if spec.reference is not None else params.evaluation.reference
    return bool(asked and choice.name != "independent") or choice.needs_reference


def make_plan(
    params: Params,
    ws: Workspace,
    store: LineageStore,
    spec: GenerationSpec | None = None,
    *,
    digest: str | None = None,
    data_fingerprint: str | None = None,
    code: str | None = None,
) -> GenerationPlan:
    """Decide and validate the next generation. Writes nothing.

    ``digest`` / ``data_fingerprint`` / ``code``: already computed by the caller (the nightly change check).
    """
    get_dataset_loader(params.data.dataset)  # DataError for an unknown dataset
    gen_id = store.next_generation_id()
    if gen_id == 0:
        _check_no_orphaned_workspace(ws, store)
    parent = _parent_ref(store)
    spec = _named_spec(store, spec, gen_id)
    notes: list[str] = []
    choice = _alignment(params, spec, parent, notes)
    zeta, zeta_prev, restarted = _zeta(params, store, parent, notes)
    choice.check_models(
        params.model.geometry, params.model.embed_dim, parent and parent.geometry, parent and parent.embed_dim
    )
    base_loss(params.train.base_loss, params.train.base_options)  # ConfigError: bad base-loss options
    if parent is not None:
        _check_parent_checkpoint(parent)
        _check_live_gallery(ws, store)
    serving = store.serving_generation_ids()
    digest = digest or params_digest(params)
    plan = GenerationPlan(
        home=str(ws.home),
        params=params,
        params_digest=digest,
        data_fingerprint=data_fingerprint,
        code_digest=code or code_digest(),
        gen_id=gen_id,
        name=spec.name,
        parent=parent,
        serving=tuple(i for i in serving if i != gen_id),
        alignment=choice.name,
        alignment_options=dict(params.alignment.options.get(choice.name, {})),
        geometry=params.model.geometry,
        zeta=zeta,
        delta_zeta=params.geometry.delta_zeta,
        zeta_prev=zeta_prev,
        zeta_restarted=restarted,
        classes=tuple(spec.classes) if isinstance(spec.classes, list) else spec.classes,
        fraction=spec.fraction,
        backbone=spec.backbone or params.model.backbone,
        backbone_kwargs=dict(
            spec.backbone_kwargs if spec.backbone_kwargs is not None else params.model.backbone_kwargs
        ),
        epochs=spec.epochs or params.train.epochs,
        reference=_uses_reference(params, spec, parent, choice),
        run_key=_run_key(gen_id, parent, spec, choice.name, digest),
        generations_since_backfill=0 if parent is None else sum(1 for gid in serving if gid > parent.id) + 1,
        notes=tuple(notes),
    )
    _check_resumable(plan)
    return plan


def check_current(plan: GenerationPlan, store: LineageStore) -> None:
    """Refuse a plan the lineage has moved past (another run committed, or the live gallery switched since)."""
    pointer = store.live_pointer()
    now = (store.next_generation_id(), pointer.id if pointer is not None else None)
    planned = (plan.gen_id, plan.parent.pointer_id if plan.parent is not None else None)
    if now != planned:
        raise LineageError(
            f"the lineage changed since generation {plan.gen_id} was planned (next generation {now[0]}, live pointer "
            f"{now[1]}; "
            f"planned against {planned[0]}, {planned[1]}); run the command again to plan on the current lineage"
        )
