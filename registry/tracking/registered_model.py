"""MLflow registration: the generation's model and its registered model version.

The generation's run is opened before it trains (:mod:`registry.tracking.runs`); :meth:`MlflowRegistry.register` logs
into that run what the generation produced — metrics, artifacts (metrics JSON, the data and the index manifest under
their own folders, plots, the lineage picture) and the model (:mod:`registry.tracking.logged_model`: the exported
serving graph) — and registers the version, linked to the logged model, with its lineage tags (generation, ζ,
compatibility, promotion, backfill, parent, data hash …) and a description that spells out the chain.

A registration that fails half-way removes the version it created, so a retry starts clean;
:meth:`MlflowRegistry.rollback` undoes a finished registration when the lineage commit that follows it fails, and
:meth:`MlflowRegistry.move_alias` returns the undo of every alias move. The run itself stays: it is the record of the
attempt, ended FAILED by the flow and resumed by the next attempt of the same run key.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from registry.db_url import sqlite_path
from registry.tracking.common import TAG_MAX, finite_metrics, log_batch, param_values, quiet_mlflow
from registry.tracking.logged_model import link_version, log_embedder
from registry.tracking.relocation import owns_tracking_store, relocate_artifacts
from registry.tracking.runs import RunTracker

__all__ = ["MODEL_DESCRIPTION", "MlflowRegistry", "RegistrationRequest", "RegistrationResult", "version_tags"]

MODEL_DESCRIPTION = (
    "Embedding model generations managed by bctflow; each version is one generation, trained to stay compatible "
    "with the gallery of its parent."
)


@dataclass
class RegistrationRequest:
    generation_id: int
    name: str
    parent_id: int | None
    parent_version: str | None
    alignment: str
    geometry: str
    zeta: float | None
    curvature: float
    data_hash: str
    checkpoint: Path
    #: (n ≥ 2, H, W, C) uint8 images of the evaluation split: the model's input example and export trace
    example: np.ndarray
    description: str
    #: the generation's run, opened before training (:meth:`registry.tracking.runs.RunTracker.open`)
    run_id: str
    params: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float | None] = field(default_factory=dict)
    #: artifact folder of the run ("" = its root) → files or folders logged there
    artifacts: dict[str, list[Path]] = field(default_factory=dict)
    backfill_required: bool | None = None
    backfill_reasons: list[str] = field(default_factory=list)
    extra_tags: dict[str, str] = field(default_factory=dict)
    aliases: list[str] = field(default_factory=list)
    #: the run's identity (flows/planning/plan.py): one registered version per run key
    run_key: str = ""


@dataclass(frozen=True)
class RegistrationResult:
    model_name: str
    version: str
    run_id: str
    created_model: bool  # True when this registration created the registered model
    model_id: str | None = None  # the logged model the version is linked to


#: the version tags the logged model carries too (its page in the run's experiment)
_MODEL_TAGS = ("bctflow.generation", "bctflow.zeta", "bctflow.alignment", "bctflow.geometry", "bctflow.data_hash")


def _model_id(mv: Any) -> str | None:
    """The logged model a version registers: its source ``models:/<model_id>`` (MLflow's SQL registry keeps no
    separate column for it)."""
    source = str(mv.source or "")
    return source.removeprefix("models:/") if source.startswith("models:/m-") else None


def _status(req: RegistrationRequest) -> str:
    return "unknown" if req.backfill_required is None else str(req.backfill_required).lower()


def version_tags(req: RegistrationRequest) -> dict[str, str]:
    """The version's tags, the most telling first and each short (the UI lists them in this order)."""
    tags = {
        "bctflow.generation": str(req.generation_id),
        "bctflow.zeta": "none" if req.zeta is None else f"{req.zeta:g}",
        **{k: v for k, v in req.extra_tags.items() if k in ("bctflow.compatible_with_live_gallery",)},
        "bctflow.backfill_required": _status(req),
        **{k: v for k, v in req.extra_tags.items() if k == "bctflow.promotion"},
        "bctflow.alignment": req.alignment,
        "bctflow.parent_generation": "none" if req.parent_id is None else str(req.parent_id),
        "bctflow.generation_name": req.name,
        "bctflow.parent_version": req.parent_version or "none",
        "bctflow.geometry": req.geometry,
        "bctflow.curvature": f"{req.curvature:g}",
        "bctflow.data_hash": req.data_hash,
        "bctflow.backfill_reasons": "; ".join(req.backfill_reasons) or "none",
        "bctflow.run_key": req.run_key or "none",
    }
    for k, v in req.extra_tags.items():
        tags.setdefault(k, v)
    return {k: v[:TAG_MAX] for k, v in tags.items()}


def _log_outputs(req: RegistrationRequest, client: Any) -> Any:
    """Log metrics, params, artifacts and the model into the generation's run; the logged model's ``ModelInfo``.

    Params logged again keep their value (the run key fixes them); metrics are the evaluation's, at step 0."""
    from mlflow.entities import Metric, Param

    now = int(time.time() * 1000)
    log_batch(
        client,
        req.run_id,
        metrics=[Metric(k, v, now, 0) for k, v in finite_metrics(req.metrics).items()],
        params=[Param(k, v) for k, v in param_values(req.params).items()],
    )
    for folder, paths in req.artifacts.items():
        for path in paths:
            if path.is_dir():
                client.log_artifacts(req.run_id, str(path), artifact_path="/".join(filter(None, (folder, path.name))))
            else:
                client.log_artifact(req.run_id, str(path), artifact_path=folder or None)
    metadata = {"bctflow_generation": req.generation_id, "geometry": req.geometry, "zeta": req.zeta}
    tags = {k: v for k, v in version_tags(req).items() if k in _MODEL_TAGS}
    return log_embedder(client, req.checkpoint, req.example, req.run_id, metadata, tags)


class MlflowRegistry:
    """MLflow tracking + model registry at ``tracking_uri`` (``sqlite:///…`` by default)."""

    def __init__(
        self, tracking_uri: str, experiment: str, model_name: str, artifact_root: Path, *, readonly: bool = False
    ) -> None:
        """``readonly``: for a caller that only reads (``bctflow doctor`` without ``--repair``): the artifact URIs of
        a copied or moved workspace are left as they are (:meth:`moved_from` reports them), never rewritten."""
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.model_name = model_name
        self.artifact_root = Path(artifact_root)
        self.readonly = readonly
        self._located = False  # artifact URIs checked against the workspace's place (see relocate)

    def prepare(self) -> None:
        """Import MLflow, open its tracking and registry stores where they exist (not a missing SQLite file): a rollback
        calls it before its timer (the registry's opening took 0.5 s of a 1.0 s Milvus rollback's switch)."""
        import mlflow  # noqa: F401 (imported before the timer even where no store exists yet)

        if self.missing_file() is None:
            self.aliases()  # read-only: changes nothing

    def _client(self) -> Any:
        import mlflow

        mlflow.set_tracking_uri(self.tracking_uri)
        mlflow.set_registry_uri(self.tracking_uri)
        return mlflow.MlflowClient(self.tracking_uri, self.tracking_uri)

    def client(self) -> Any:
        """An MLflow client of this store (and the fluent API pointed at it); the first one of a writable store
        makes a copied or moved workspace's artifact URIs follow it (:meth:`relocate`)."""
        client = self._client()
        if not self._located and not self.readonly:
            self.relocate(client)
        return client

    @property
    def runs(self) -> RunTracker:
        """The store's runs: a generation's run is opened before it trains (:mod:`registry.tracking.runs`)."""
        return RunTracker(self)

    def missing_file(self) -> Path | None:
        """The SQLite file this store names when it does not exist (None: it exists, or the store is a server); a
        client would create it."""
        db = sqlite_path(self.tracking_uri)
        return db if db is not None and not db.is_file() else None

    def moved_from(self, client: Any = None) -> str | None:
        """The artifact root this store's URIs still point under when the workspace that owns it was copied or moved
        (None: in place, no store yet, or a shared store, which is never rewritten). Reads only."""
        db = sqlite_path(self.tracking_uri)
        if db is None or not db.is_file() or not owns_tracking_store(self.tracking_uri, self.artifact_root):
            return None
        with quiet_mlflow():
            exp = (client or self._client()).get_experiment_by_name(self.experiment)
        here = self.artifact_root.resolve().as_uri()
        return exp.artifact_location if exp is not None and exp.artifact_location != here else None

    def relocate(self, client: Any = None) -> int:
        """A workspace that owns its MLflow store and was copied or moved: its artifact URIs follow it (one
        transaction). Returns how many URIs were rewritten."""
        self._located = True
        old = self.moved_from(client)
        return 0 if old is None else relocate_artifacts(self.tracking_uri, old, self.artifact_root.resolve().as_uri())

    def experiment_id(self, client: Any) -> str:
        """The experiment's id, creating it (artifacts under this workspace's root) the first time."""
        exp = client.get_experiment_by_name(self.experiment)
        if exp is not None:
            return exp.experiment_id
        self.artifact_root.mkdir(parents=True, exist_ok=True)
        return client.create_experiment(self.experiment, artifact_location=self.artifact_root.resolve().as_uri())

    def _model_exists(self, client: Any) -> bool:
        from mlflow.exceptions import MlflowException

        try:
            client.get_registered_model(self.model_name)
            return True
        except MlflowException:
            return False

    def version_of_run_key(self, run_key: str) -> tuple[str, str, str | None] | None:
        """(version, run id, logged model id) of the registered version tagged with ``run_key`` (None if there is
        none)."""
        from mlflow.exceptions import MlflowException

        with quiet_mlflow():
            try:
                found = self.client().search_model_versions(
                    f"name='{self.model_name}' and tags.`bctflow.run_key` = '{run_key}'"
                )
            except MlflowException:
                return None
        return (str(found[0].version), str(found[0].run_id), _model_id(found[0])) if found else None

    def register(self, req: RegistrationRequest) -> RegistrationResult:
        """Log the generation's outputs and model into its run, register the version (linked to the logged model),
        tag it, set its aliases. All or nothing: a failure deletes the version, the logged model and (if this call
        created it) the registered model.

        Idempotent per ``req.run_key``: a version already registered for it (by an attempt that was killed before
        its lineage commit) is reused, its tags and aliases set again, instead of registering a second one.
        """
        if req.run_key and (found := self.version_of_run_key(req.run_key)) is not None:
            version, run_id, model_id = found
            self.set_tags(version, version_tags(req))  # this attempt's evaluation and gate decision
            for alias in req.aliases:
                self._set_alias(alias, version)
            return RegistrationResult(self.model_name, version, run_id, False, model_id)
        with quiet_mlflow():
            client = self.client()
            created_model = not self._model_exists(client)
            version: str | None = None
            model_id: str | None = None
            try:
                self._drop_unregistered_models(client, req.run_id)
                info = _log_outputs(req, client)
                model_id = info.model_id
                if created_model:
                    client.create_registered_model(self.model_name, description=MODEL_DESCRIPTION)
                mv = client.create_model_version(
                    self.model_name,
                    info.model_uri,
                    run_id=req.run_id,
                    tags=version_tags(req),
                    description=req.description,
                    model_id=model_id,
                )
                version = str(mv.version)
                link_version(client, model_id, self.model_name, version)
                for alias in req.aliases:
                    client.set_registered_model_alias(self.model_name, alias, version)
            except BaseException:
                self._undo(client, version, created_model, model_id)
                raise
        return RegistrationResult(self.model_name, version, req.run_id, created_model, model_id)

    def _drop_unregistered_models(self, client: Any, run_id: str) -> None:
        """Models an interrupted attempt logged into this run without registering them: deleted, so the run holds
        one model, the registered one."""
        for m in client.search_logged_models([self.experiment_id(client)], f"source_run_id = '{run_id}'"):
            client.delete_logged_model(m.model_id)

    def model_description(self) -> str | None:
        """The registered model's description (None: no registered model yet)."""
        from mlflow.exceptions import MlflowException

        with quiet_mlflow():
            try:
                return self.client().get_registered_model(self.model_name).description or ""
            except MlflowException:
                return None

    def set_model_description(self, text: str) -> None:
        with quiet_mlflow():
            self.client().update_registered_model(self.model_name, description=text)

    def move_alias(self, alias: str, version: str) -> Callable[[], None]:
        """Point ``alias`` at ``version``; returns the undo (back to the previous version, or no alias)."""
        previous = self.alias_version(alias)
        self._set_alias(alias, version)

        def undo() -> None:
            if previous is None:
                self._delete_alias(alias)
            else:
                self._set_alias(alias, previous)

        return undo

    def _set_alias(self, alias: str, version: str) -> None:
        with quiet_mlflow():
            self.client().set_registered_model_alias(self.model_name, alias, version)

    def _delete_alias(self, alias: str) -> None:
        from mlflow.exceptions import MlflowException

        with quiet_mlflow(), contextlib.suppress(MlflowException):
            self.client().delete_registered_model_alias(self.model_name, alias)

    def set_tags(self, version: str, tags: dict[str, str]) -> None:
        """Update lineage tags of a registered version (e.g. promotion status)."""
        with quiet_mlflow():
            client = self.client()
            for k, v in tags.items():
                client.set_model_version_tag(self.model_name, version, k, v[:TAG_MAX])

    def aliases(self) -> dict[str, str]:
        """Every alias of the registered model → its version, in one call ({} before the model exists)."""
        from mlflow.exceptions import MlflowException

        with quiet_mlflow():
            try:
                return {a: str(v) for a, v in self.client().get_registered_model(self.model_name).aliases.items()}
            except MlflowException:
                return {}

    def alias_version(self, alias: str) -> str | None:
        return self.aliases().get(alias)

    def generation_versions(self) -> list[tuple[str, str]]:
        """(version, its ``bctflow.generation`` tag) of every registered version bctflow created."""
        from mlflow.exceptions import MlflowException

        with quiet_mlflow():
            try:
                found = self.client().search_model_versions(f"name='{self.model_name}'")
            except MlflowException:
                return []
        return [(str(v.version), v.tags["bctflow.generation"]) for v in found if "bctflow.generation" in v.tags]

    def version_descriptions(self) -> dict[str, str]:
        """Every registered version's description, by version."""
        from mlflow.exceptions import MlflowException

        with quiet_mlflow():
            try:
                found = self.client().search_model_versions(f"name='{self.model_name}'")
            except MlflowException:
                return {}
        return {str(v.version): v.description or "" for v in found}

    def set_version_description(self, version: str, text: str) -> None:
        with quiet_mlflow():
            self.client().update_model_version(self.model_name, version, description=text)

    def delete_version(self, version: str) -> None:
        """Delete a registered version, its logged model and its run (an orphan no lineage row refers to: the
        abandoned attempt is undone whole)."""
        from mlflow.exceptions import MlflowException

        with quiet_mlflow():
            client = self.client()
            with contextlib.suppress(MlflowException):
                mv = client.get_model_version(self.model_name, version)
                client.delete_model_version(self.model_name, version)
                if (model_id := _model_id(mv)) is not None:
                    client.delete_logged_model(model_id)
                if mv.run_id:
                    client.delete_run(mv.run_id)

    def undo_registration(self, result: RegistrationResult) -> None:
        """Undo a registration (the lineage commit after it failed); its run stays, the record of the attempt."""
        with quiet_mlflow():
            self._undo(self.client(), result.version, result.created_model, result.model_id)

    def _undo(self, client: Any, version: str | None, created_model: bool, model_id: str | None) -> None:
        from mlflow.exceptions import MlflowException

        with contextlib.suppress(MlflowException):
            if version is not None:
                client.delete_model_version(self.model_name, version)
        with contextlib.suppress(MlflowException):
            if created_model and self._model_exists(client):
                client.delete_registered_model(self.model_name)
        with contextlib.suppress(MlflowException):
            if model_id is not None:
                client.delete_logged_model(model_id)
