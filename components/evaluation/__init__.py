"""Evaluation: retrieval metrics (CMC@k, mAP) and compatibility metrics (docs/design.md §6)."""

from components.evaluation import compat
from components.evaluation.compat import *  # noqa: F403 — the compatibility metrics' public names, compat.__all__
from components.evaluation.retrieval import average_precision, gallery_metrics, retrieval_metrics
from components.evaluation.topk import topk_metrics

__all__ = [*compat.__all__, "average_precision", "gallery_metrics", "retrieval_metrics", "topk_metrics"]
