"""The steps of a generation, in order. flows/ wraps each in a Prefect task; tests call them too.

Every step writes only under the generation's *staging* folder (or, for the
data snapshot, a new DVC-tracked manifest), so nothing that serves users
changes until :func:`commit`, which moves staging into place inside the
lineage transaction.
"""

from flows.steps.commit import PRODUCTION_ALIAS, commit, rollback
from flows.steps.context import load_splits, registry_for, store_for
from flows.steps.evaluation import evaluate
from flows.steps.embed_gallery import build_gallery
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
    "load_splits",
    "register",
    "registry_for",
    "rollback",
    "snapshot_data",
    "store_for",
    "train_role",
]
