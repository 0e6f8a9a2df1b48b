"""The steps of a generation, in order. flows/ wraps each in a Prefect task; tests call them too.

Every step writes only under the generation's *staging* folder (or, for the
data snapshot, a new DVC-tracked manifest), so nothing that serves users
changes until :func:`commit`, which moves staging into place inside the
lineage transaction.
"""

from bctflow.pipeline.commit import PRODUCTION_ALIAS, commit, rollback
from bctflow.pipeline.context import load_splits, registry_for, store_for
from bctflow.pipeline.evaluation import evaluate
from bctflow.pipeline.gallery import build_gallery
from bctflow.pipeline.registration import register
from bctflow.pipeline.results import Evaluation, Gallery, Snapshot, Trained
from bctflow.pipeline.snapshot import snapshot_data
from bctflow.pipeline.training import train_role

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
