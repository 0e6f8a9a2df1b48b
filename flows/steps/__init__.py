"""The steps of a generation, in order. flows/ wraps each in a Prefect task; tests call them too.

Every step writes only under the generation's *staging* folder (or, for the
data snapshot, a new DVC-tracked manifest), so nothing that serves users
changes until :func:`commit`, which moves staging into place inside the
lineage transaction.

0. :func:`open_run`       the generation's MLflow run, before anything trains (params, params.yaml, links)
1. :func:`snapshot_data`  select the training data, snapshot its manifest with DVC (:func:`log_snapshot`: the
                          run's dataset inputs)
2. :func:`train_role`     train the reference φ* (when planned, in a child run), then the model
3. :func:`build_gallery`  embed the gallery, build the FAISS index
4. :func:`evaluate`       metrics, compatibility, diagnostics, backfill decision
5. :func:`register`       into the run: metrics, artifacts, lineage picture, model; the model version
6. :func:`commit`         lineage transaction (or :func:`rollback` of the registration)
"""

from flows.steps.commit import PRODUCTION_ALIAS, commit, rollback
from flows.steps.embed_gallery import build_gallery
from flows.steps.evaluation import evaluate
from flows.steps.mlflow_run import log_snapshot, log_training, open_reference_run, open_run, run_url
from flows.steps.registration import register
from flows.steps.results import Evaluation, Gallery, Snapshot, Trained
from flows.steps.snapshot import snapshot_data
from flows.steps.training import train_role

__all__ = [
    "PRODUCTION_ALIAS",
    "Evaluation",
    "Gallery",
    "Snapshot",
    "Trained",
    "build_gallery",
    "commit",
    "evaluate",
    "log_snapshot",
    "log_training",
    "open_reference_run",
    "open_run",
    "register",
    "rollback",
    "run_url",
    "snapshot_data",
    "train_role",
]
