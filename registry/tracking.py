"""MLflow registration: one run and one registered model version per generation.

The run carries params, metrics (incl. per-epoch training curves), artifacts
(metrics JSON, data manifest, index manifest, plots) and the model (pyfunc,
*models from code*: :mod:`registry.mlflow_model`, weights = the checkpoint).
The version carries lineage tags (generation, parent, alignment, geometry, ζ,
K, data hash, backfill status) and a description that spells out the chain.

A registration that fails half-way removes what it created, so a retry starts
clean; :meth:`MlflowStore.rollback` undoes a finished registration when the
lineage commit that follows it fails, and :meth:`MlflowStore.move_alias`
returns the undo of every alias move.
"""

from __future__ import annotations

import contextlib
import logging
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

import numpy as np

from registry.relocation import owns_tracking_store, relocate_artifacts

__all__ = ["MlflowStore", "RegistrationRequest", "RegistrationResult", "flatten", "metric_key"]

_MODEL_CODE = Path(__file__).with_name("mlflow_model.py")


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
    image_shape: tuple[int, int, int]
    vector_dim: int
    description: str
    params: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float | None] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)
    #: artifact folder of the run ("" = its root) → files or folders logged there
    artifacts: dict[str, list[Path]] = field(default_factory=dict)
    backfill_required: bool | None = None
    backfill_reasons: list[str] = field(default_factory=list)
    extra_tags: dict[str, str] = field(default_factory=dict)
    aliases: list[str] = field(default_factory=list)
    #: the run's identity (flows/plan.py): one registered version per run key
    run_key: str = ""


@dataclass(frozen=True)
class RegistrationResult:
    model_name: str
    version: str
    run_id: str
    created_model: bool  # True when this registration created the registered model


def metric_key(name: str) -> str:
    """MLflow metric names allow [A-Za-z0-9_-. :/]; "self/cmc@1" → "self/cmc_at_1"."""
    return name.replace("@", "_at_")


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} → {"a.b": 1}; lists become their string form."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


#: MLflow warnings that do not apply: predict() is untyped on purpose (its input, a uint8 image
#: tensor, is described by the logged signature) and an input example would run the model at log time.
_IRRELEVANT_WARNINGS = ("type hint", "input example")


@contextlib.contextmanager
def _quiet_mlflow() -> Iterator[None]:
    """Silence MLflow's chatty loggers and the warnings above.

    ``log_model`` installs its own ``simplefilter("once")``, which overrides ignore filters,
    so the two irrelevant warnings are dropped where they would be shown instead.
    """
    names = ["mlflow", "alembic", "mlflow.utils.requirements_utils"]
    old = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.ERROR)
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
        if issubclass(category, UserWarning) and any(w in str(message) for w in _IRRELEVANT_WARNINGS):
            return
        shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown
        for n, lvl in old.items():
            logging.getLogger(n).setLevel(lvl)


def _finite(values: dict[str, Any]) -> dict[str, float]:
    """MLflow metric names for the finite values (None, NaN and inf are left out)."""
    return {metric_key(k): float(v) for k, v in values.items() if v is not None and math.isfinite(float(v))}


def _log_run(req: RegistrationRequest) -> str:
    """Log params, metrics, the training curves, artifacts and the pyfunc model into the active run; the model's URI."""
    import mlflow
    from mlflow.models.signature import ModelSignature
    from mlflow.types.schema import Schema, TensorSpec

    mlflow.log_params({k: (str(v)[:6000]) for k, v in flatten(req.params).items()})
    mlflow.log_metrics(_finite(req.metrics))
    for rec in req.history:
        mlflow.log_metrics(
            _finite({f"train/{k}": v for k, v in rec.items() if k != "epoch"}), step=int(rec.get("epoch", 0))
        )
    for folder, paths in req.artifacts.items():
        for path in paths:
            if path.is_dir():
                mlflow.log_artifacts(str(path), artifact_path="/".join(filter(None, (folder, path.name))))
            else:
                mlflow.log_artifact(str(path), artifact_path=folder or None)
    h, w, c = req.image_shape
    signature = ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(np.uint8), (-1, h, w, c))]),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, req.vector_dim))]),
    )
    info = mlflow.pyfunc.log_model(
        name="model",
        python_model=str(_MODEL_CODE),
        artifacts={"checkpoint": str(req.checkpoint)},
        signature=signature,
        pip_requirements=[f"bctflow=={package_version('bctflow')}"],
    )
    return info.model_uri


class MlflowStore:
    """MLflow tracking + model registry at ``tracking_uri`` (``sqlite:///…`` by default)."""

    def __init__(self, tracking_uri: str, experiment: str, model_name: str, artifact_root: Path) -> None:
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.model_name = model_name
        self.artifact_root = Path(artifact_root)
        self._located = False  # artifact URIs checked against the workspace's place (see _relocate)

    def _client(self) -> Any:
        import mlflow

        mlflow.set_tracking_uri(self.tracking_uri)
        mlflow.set_registry_uri(self.tracking_uri)
        client = mlflow.MlflowClient(self.tracking_uri, self.tracking_uri)
        if not self._located:
            self._relocate(client)
        return client

    def _relocate(self, client: Any) -> None:
        """A workspace that owns its MLflow store and was copied or moved: its artifact URIs follow it first."""
        self._located = True
        if not owns_tracking_store(self.tracking_uri, self.artifact_root):
            return
        with _quiet_mlflow():
            exp = client.get_experiment_by_name(self.experiment)
        here = self.artifact_root.resolve().as_uri()
        if exp is not None and exp.artifact_location != here:
            relocate_artifacts(self.tracking_uri, exp.artifact_location, here)

    def _experiment_id(self, client: Any) -> str:
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

    def version_of_run_key(self, run_key: str) -> tuple[str, str] | None:
        """(version, run id) of the registered version tagged with ``run_key`` (None if there is none)."""
        from mlflow.exceptions import MlflowException

        with _quiet_mlflow():
            try:
                found = self._client().search_model_versions(
                    f"name='{self.model_name}' and tags.`bctflow.run_key` = '{run_key}'"
                )
            except MlflowException:
                return None
        return (str(found[0].version), str(found[0].run_id)) if found else None

    def register(self, req: RegistrationRequest) -> RegistrationResult:
        """Create the run, log everything, register the version, tag it. All or nothing.

        Idempotent per ``req.run_key``: a version already registered for it (by an attempt that was killed before
        its lineage commit) is reused, its aliases set again, instead of registering a second one.
        """
        import mlflow

        if req.run_key and (found := self.version_of_run_key(req.run_key)) is not None:
            version, run_id = found
            self.set_tags(version, self._tags(req))  # this attempt's evaluation and gate decision
            for alias in req.aliases:
                self._set_alias(alias, version)
            return RegistrationResult(self.model_name, version, run_id, False)
        with _quiet_mlflow():
            client = self._client()
            exp_id = self._experiment_id(client)
            created_model = not self._model_exists(client)
            run_id: str | None = None
            version: str | None = None
            try:
                run_tags = self._tags(req)
                run_name = f"gen-{req.generation_id}-{req.alignment}"
                with mlflow.start_run(experiment_id=exp_id, run_name=run_name, tags=run_tags) as run:
                    run_id = run.info.run_id
                    model_uri = _log_run(req)
                if created_model:
                    client.create_registered_model(
                        self.model_name,
                        description="Embedding model generations managed by bctflow; each version is one generation, "
                        "trained to stay compatible with the gallery of its parent.",
                    )
                mv = client.create_model_version(
                    self.model_name, model_uri, run_id=run_id, tags=run_tags, description=req.description
                )
                version = str(mv.version)
                for alias in req.aliases:
                    client.set_registered_model_alias(self.model_name, alias, version)
            except BaseException:
                self._undo(client, run_id, version, created_model)
                raise
        return RegistrationResult(self.model_name, version, run_id, created_model)

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
        with _quiet_mlflow():
            self._client().set_registered_model_alias(self.model_name, alias, version)

    def _delete_alias(self, alias: str) -> None:
        from mlflow.exceptions import MlflowException

        with _quiet_mlflow(), contextlib.suppress(MlflowException):
            self._client().delete_registered_model_alias(self.model_name, alias)

    def set_tags(self, version: str, tags: dict[str, str]) -> None:
        """Update lineage tags of a registered version (e.g. promotion status)."""
        with _quiet_mlflow():
            client = self._client()
            for k, v in tags.items():
                client.set_model_version_tag(self.model_name, version, k, v[:5000])

    def alias_version(self, alias: str) -> str | None:
        from mlflow.exceptions import MlflowException

        with _quiet_mlflow():
            try:
                return str(self._client().get_model_version_by_alias(self.model_name, alias).version)
            except MlflowException:
                return None

    def generation_versions(self) -> list[tuple[str, str]]:
        """(version, its ``bctflow.generation`` tag) of every registered version bctflow created."""
        from mlflow.exceptions import MlflowException

        with _quiet_mlflow():
            try:
                found = self._client().search_model_versions(f"name='{self.model_name}'")
            except MlflowException:
                return []
        return [(str(v.version), v.tags["bctflow.generation"]) for v in found if "bctflow.generation" in v.tags]

    def delete_version(self, version: str) -> None:
        """Delete a registered version and its run (an orphan no lineage row refers to)."""
        from mlflow.exceptions import MlflowException

        with _quiet_mlflow():
            client = self._client()
            with contextlib.suppress(MlflowException):
                run_id = client.get_model_version(self.model_name, version).run_id
                client.delete_model_version(self.model_name, version)
                if run_id:
                    client.delete_run(run_id)

    def rollback(self, result: RegistrationResult) -> None:
        """Undo a registration (the lineage commit after it failed)."""
        with _quiet_mlflow():
            self._undo(self._client(), result.run_id, result.version, result.created_model)

    def _undo(self, client: Any, run_id: str | None, version: str | None, created_model: bool) -> None:
        from mlflow.exceptions import MlflowException

        with contextlib.suppress(MlflowException):
            if version is not None:
                client.delete_model_version(self.model_name, version)
        with contextlib.suppress(MlflowException):
            if created_model and self._model_exists(client):
                client.delete_registered_model(self.model_name)
        with contextlib.suppress(MlflowException):
            if run_id is not None:
                client.delete_run(run_id)

    @staticmethod
    def _tags(req: RegistrationRequest) -> dict[str, str]:
        tags = {
            "bctflow.generation": str(req.generation_id),
            "bctflow.generation_name": req.name,
            "bctflow.parent_generation": "none" if req.parent_id is None else str(req.parent_id),
            "bctflow.parent_version": req.parent_version or "none",
            "bctflow.alignment": req.alignment,
            "bctflow.geometry": req.geometry,
            "bctflow.zeta": "none" if req.zeta is None else f"{req.zeta:g}",
            "bctflow.curvature": f"{req.curvature:g}",
            "bctflow.data_hash": req.data_hash,
            "bctflow.backfill_required": "unknown"
            if req.backfill_required is None
            else str(req.backfill_required).lower(),
            "bctflow.backfill_reasons": "; ".join(req.backfill_reasons) or "none",
            "bctflow.run_key": req.run_key or "none",
        }
        tags.update(req.extra_tags)
        return {k: v[:5000] for k, v in tags.items()}
