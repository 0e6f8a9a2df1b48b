"""Evaluation: retrieval metrics (CMC@k, mAP) and compatibility metrics (docs/design.md §6)."""

from components.evaluation.compat import (
    COMPAT_METRICS,
    DENOMINATOR_EPS,
    ILL_CONDITIONED,
    REPORTED_METRICS,
    DerivedMetrics,
    compat_summary,
    is_compatible,
    p_com,
    p_up,
)
from components.evaluation.retrieval import average_precision, gallery_metrics, retrieval_metrics
from components.evaluation.topk import topk_metrics

__all__ = [
    "COMPAT_METRICS",
    "DENOMINATOR_EPS",
    "ILL_CONDITIONED",
    "REPORTED_METRICS",
    "DerivedMetrics",
    "average_precision",
    "compat_summary",
    "gallery_metrics",
    "is_compatible",
    "p_com",
    "p_up",
    "retrieval_metrics",
    "topk_metrics",
]
