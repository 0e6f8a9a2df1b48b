"""The MLflow run of a generation, from before it trains to its registration (docs/design.md §7.17).

:meth:`RunTracker.open` finds or creates the run of a run key: an attempt that was killed or failed left its run
behind, and the next attempt with the same run key and the same parameters resumes it (its epochs, system metrics
and inputs continue) instead of starting a second one. A run of the same key whose parameters differ (a setting
that does not shape the model, say ``evaluation.ks``) cannot take the new values — MLflow params never change — so a
new run starts and a stale one still marked RUNNING is ended KILLED (its process is gone: the caller holds the
workspace lock). While the flow runs, :meth:`RunTracker.active` keeps the run active with MLflow's system metrics
(CPU, memory, disk, network; GPU where ``pynvml`` finds one) and ends it FINISHED or FAILED.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from registry.tracking.common import TAG_MAX, finite_metrics, log_batch, param_values, quiet_mlflow

__all__ = ["PARAMS_TAG", "RUN_KEY_TAG", "DatasetInput", "RunSpec", "RunTracker"]

RUN_KEY_TAG = "bctflow.run_key"
#: sha256 of the run's params: a run is resumed only by an attempt with the very same params
PARAMS_TAG = "bctflow.params_sha256"
#: MLflow's tag that makes a run the child of another (the UI nests it under its parent)
PARENT_TAG = "mlflow.parentRunId"


@dataclass(frozen=True)
class RunSpec:
    """What a run records from its start: its identity, its params (nested; logged flattened), its tags, and files
    logged as artifacts (folder → files)."""

    run_key: str
    name: str
    params: dict[str, Any]
    tags: dict[str, str] = field(default_factory=dict)
    files: dict[str, list[Path]] = field(default_factory=dict)
    parent_run_id: str | None = None
    description: str | None = None


@dataclass(frozen=True)
class DatasetInput:
    """A dataset the run used, as MLflow's dataset inputs record it (the run page's "Datasets used").

    ``digest``: at most 36 characters (MLflow's column); ``source``: where it lives (a path or URI);
    ``profile``: a few numbers shown beside it; ``context``: training, evaluation …; ``image_shape``: (H, W, C)
    of its uint8 images (the schema: images (N, H, W, C) uint8, labels (N,) int64)."""

    name: str
    digest: str
    source: str
    context: str
    profile: dict[str, Any] = field(default_factory=dict)
    image_shape: tuple[int, int, int] | None = None


def _schema(image_shape: tuple[int, int, int] | None) -> str | None:
    """MLflow's tensor dataset schema (what ``mlflow.data.from_numpy`` records) for images and labels."""
    if image_shape is None:
        return None
    import numpy as np
    from mlflow.data.schema import TensorDatasetSchema
    from mlflow.types.schema import Schema, TensorSpec

    images = Schema([TensorSpec(np.dtype(np.uint8), (-1, *image_shape), "images")])
    labels = Schema([TensorSpec(np.dtype(np.int64), (-1,), "labels")])
    return json.dumps(TensorDatasetSchema(features=images, targets=labels).to_dict())


def _digest(params: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()


class RunTracker:
    """Runs of one MLflow store (a :class:`registry.tracking.MlflowRegistry`)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def open(self, spec: RunSpec) -> str:
        """The run of ``spec.run_key`` with these params, resumed or created; its tags (re)set. Returns its id."""
        from mlflow.entities import Param, RunStatus

        params = param_values(spec.params)
        digest = _digest(params)
        tags = {**spec.tags, RUN_KEY_TAG: spec.run_key, PARAMS_TAG: digest}
        if spec.parent_run_id:
            tags[PARENT_TAG] = spec.parent_run_id
        if spec.description:
            tags["mlflow.note.content"] = spec.description
        with quiet_mlflow():
            client = self.store.client()
            exp_id = self.store.experiment_id(client)
            found = client.search_runs([exp_id], f"tags.`{RUN_KEY_TAG}` = '{spec.run_key}'")
            run = next((r for r in found if r.data.tags.get(PARAMS_TAG) == digest), None)
            for stale in found:
                if stale is not run and stale.info.status == "RUNNING":
                    client.set_terminated(stale.info.run_id, "KILLED")
            if run is None:
                run_id = client.create_run(exp_id, tags=tags, run_name=spec.name).info.run_id
                log_batch(client, run_id, params=[Param(k, v) for k, v in params.items()])
            else:
                run_id = run.info.run_id
                client.update_run(run_id, RunStatus.to_string(RunStatus.RUNNING))
                for k, v in tags.items():
                    client.set_tag(run_id, k, v[:TAG_MAX])
            for folder, paths in spec.files.items():
                for path in paths:
                    client.log_artifact(run_id, str(path), artifact_path=folder or None)
        return run_id

    def find(self, run_key: str) -> str | None:
        """The id of the newest run of ``run_key`` (None: there is none)."""
        with quiet_mlflow():
            client = self.store.client()
            found = client.search_runs(
                [self.store.experiment_id(client)],
                f"tags.`{RUN_KEY_TAG}` = '{run_key}'",
                order_by=["attributes.start_time DESC"],
                max_results=1,
            )
        return found[0].info.run_id if found else None

    def unfinished(self) -> dict[str, str]:
        """The experiment's runs not marked FINISHED, id → status (a run whose process was killed stays RUNNING;
        one whose process was stopped after its generation's commit, KILLED)."""
        with quiet_mlflow():
            client = self.store.client()
            exp = client.get_experiment_by_name(self.store.experiment)
            if exp is None:
                return {}
            found = client.search_runs([exp.experiment_id], "attributes.status != 'FINISHED'", max_results=50_000)
        return {r.info.run_id: r.info.status for r in found}

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        with quiet_mlflow():
            client = self.store.client()
            for k, v in tags.items():
                client.set_tag(run_id, k, v[:TAG_MAX])

    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        """Params learnt after the run opened (the data snapshot's); the same value again is accepted."""
        from mlflow.entities import Param

        with quiet_mlflow():
            log_batch(self.store.client(), run_id, params=[Param(k, v) for k, v in param_values(params).items()])

    def log_metrics(self, run_id: str, metrics: dict[str, float | None], step: int = 0) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        with quiet_mlflow():
            log_batch(
                self.store.client(), run_id, [Metric(k, v, now, step) for k, v in finite_metrics(metrics).items()]
            )

    def log_epochs(self, run_id: str, history: list[dict[str, float]], prefix: str = "train/") -> int:
        """Per-epoch training records as ``train/<term>`` at step = epoch, skipping epochs the run already holds (an
        attempt that resumed from a checkpoint, or the live log of the same training). Returns how many it logged."""
        from mlflow.entities import Metric

        if not history:
            return 0
        first = next((k for k in history[0] if k != "epoch"), None)
        if first is None:
            return 0
        with quiet_mlflow():
            client = self.store.client()
            logged = {m.step for m in client.get_metric_history(run_id, prefix + first)}
            now = int(time.time() * 1000)
            new = [r for r in history if int(r.get("epoch", 0)) not in logged]
            metrics = [
                Metric(k, v, now, int(r.get("epoch", 0)))
                for r in new
                for k, v in finite_metrics({prefix + k: v for k, v in r.items() if k != "epoch"}).items()
            ]
            log_batch(client, run_id, metrics)
        return len(new)

    def log_datasets(self, run_id: str, datasets: list[DatasetInput]) -> None:
        """Record the datasets the run used (MLflow's dataset inputs; what ``mlflow.log_input`` records)."""
        from mlflow.entities import Dataset, InputTag
        from mlflow.entities import DatasetInput as MlflowDatasetInput

        inputs = [
            MlflowDatasetInput(
                Dataset(
                    name=d.name,
                    digest=d.digest[:36],
                    source_type="local",
                    source=json.dumps({"uri": d.source}),
                    schema=_schema(d.image_shape),
                    profile=json.dumps(d.profile),
                ),
                [InputTag("mlflow.data.context", d.context)],
            )
            for d in datasets
        ]
        with quiet_mlflow():
            self.store.client().log_inputs(run_id, datasets=inputs)

    def log_files(self, run_id: str, folder: str, paths: list[Path]) -> None:
        with quiet_mlflow():
            client = self.store.client()
            for path in paths:
                client.log_artifact(run_id, str(path), artifact_path=folder or None)

    def end(self, run_id: str, status: str = "FINISHED") -> None:
        with quiet_mlflow():
            self.store.client().set_terminated(run_id, status)

    @contextlib.contextmanager
    def active(self, run_id: str) -> Iterator[None]:
        """The run active in this thread, with system metrics, until the block ends: FINISHED when it returns,
        KILLED on Ctrl-C / SIGTERM, FAILED on any other exception (which propagates)."""
        import mlflow

        with quiet_mlflow():
            self.store.client()  # the fluent API pointed at this store
            mlflow.start_run(run_id=run_id, log_system_metrics=True)
        status = "FAILED"
        try:
            yield
            status = "FINISHED"
        except (KeyboardInterrupt, SystemExit):
            status = "KILLED"
            raise
        finally:
            with quiet_mlflow():
                mlflow.end_run(status)
