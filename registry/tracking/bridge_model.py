"""MLflow registration of a bridge (docs/design.md §11): the fitted map's file logged in a run of its own and
registered as a version of the model ``<model name>-bridges``, tagged with its generations, role, kind and sha256
(and the generation's run it belongs to), so the registry shows each map beside the generations it links.

The lineage keeps the version (``bridges.mlflow_version``); the file the version points at is the one whose sha256
the lineage pinned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from registry.tracking.common import metric_key, quiet_mlflow
from registry.tracking.registered_model import MlflowRegistry

__all__ = ["BRIDGE_ARTIFACT", "BridgeRegistration", "bridge_model_name", "register_bridge"]

#: the run's artifact folder holding the bridge's file
BRIDGE_ARTIFACT = "bridge"


@dataclass(frozen=True)
class BridgeRegistration:
    """What to register: the bridge's file and what the lineage records of it; ``generation_run_id``: the MLflow
    run of the generation the bridge belongs to (the new one of an adapter or a transform), when it has one;
    ``metrics``: what it serves, logged in the bridge's run (flows/upgrade/bridge.py)."""

    path: Path
    sha256: str
    source: int
    target: int
    role: str
    kind: str
    sample: int
    fit_error: float
    generation_run_id: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)


def bridge_model_name(store: MlflowRegistry) -> str:
    """The registered model that holds every bridge of ``store``'s embedder."""
    return f"{store.model_name}-bridges"


def register_bridge(store: MlflowRegistry, req: BridgeRegistration) -> str:
    """Log ``req``'s file in a run of its own and register it as the next version of :func:`bridge_model_name`;
    returns the version (the lineage records it)."""
    from mlflow.exceptions import MlflowException

    tags = {
        "bctflow.bridge.from_generation": str(req.source),
        "bctflow.bridge.to_generation": str(req.target),
        "bctflow.bridge.role": req.role,
        "bctflow.bridge.kind": req.kind,
        "bctflow.bridge.sha256": req.sha256,
        "bctflow.bridge.sample": str(req.sample),
        "bctflow.bridge.fit_error": f"{req.fit_error:.6g}",
        **({"bctflow.generation_run_id": req.generation_run_id} if req.generation_run_id else {}),
    }
    client = store.client()
    name = bridge_model_name(store)
    with quiet_mlflow():
        run = client.create_run(
            store.experiment_id(client), run_name=f"{req.role} bridge g{req.source}→g{req.target}", tags=tags
        )
        client.log_artifact(run.info.run_id, str(req.path), artifact_path=BRIDGE_ARTIFACT)
        for key, value in req.metrics.items():
            client.log_metric(run.info.run_id, metric_key(key), float(value))
        client.set_terminated(run.info.run_id)
        try:
            client.get_registered_model(name)
        except MlflowException:
            client.create_registered_model(
                name, description=f"Maps between the spaces of {store.model_name}'s generations (bctflow bridges)."
            )
        source = f"{run.info.artifact_uri}/{BRIDGE_ARTIFACT}/{req.path.name}"
        version = client.create_model_version(name, source, run_id=run.info.run_id, tags=tags)
    return str(version.version)
