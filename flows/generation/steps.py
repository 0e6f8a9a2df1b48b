"""The steps of a generation, in order. flows/ wraps each in a Prefect task; tests call them too.

Every step writes only under the generation's *staging* folder (or, for the
data snapshot, a new DVC-tracked manifest), so nothing that serves users
changes until :func:`commit`, which moves staging into place inside the
lineage transaction.

0. :func:`open_run`       the generation's MLflow run, before anything trains (params, params.yaml, links)
1. :func:`snapshot_data`  select the training data, snapshot its manifest with DVC (:func:`log_snapshot`: the
                          run's dataset inputs)
2. :func:`train_role`     train the reference φ* (when planned, in a child run), then the model; resumes from
                          what an earlier attempt staged (:func:`staged_epochs`)
3. :func:`embed_and_index` embed the evaluation gallery (and generation 0's serving corpus), build the FAISS index
4. :func:`evaluate`       metrics, compatibility, diagnostics, backfill decision
5. :func:`register`       into the run: metrics, artifacts, lineage picture, model; the model version
6. :func:`commit`         lineage transaction (or :func:`undo_registration`)
"""

from flows.generation.commit import PRODUCTION_ALIAS, commit, undo_registration
from flows.generation.embed_gallery import embed_and_index
from flows.generation.evaluation import evaluate
from flows.generation.mlflow_run import log_snapshot, log_training, open_reference_run, open_run, run_url
from flows.generation.registration import register
from flows.generation.results import Evaluation, EvaluationGallery, Snapshot, Trained
from flows.generation.snapshot import snapshot_data
from flows.generation.training import staged_epochs, train_role

__all__ = [
    "PRODUCTION_ALIAS",
    "Evaluation",
    "EvaluationGallery",
    "Snapshot",
    "Trained",
    "commit",
    "embed_and_index",
    "evaluate",
    "log_snapshot",
    "log_training",
    "open_reference_run",
    "open_run",
    "register",
    "run_url",
    "snapshot_data",
    "staged_epochs",
    "train_role",
    "undo_registration",
]
