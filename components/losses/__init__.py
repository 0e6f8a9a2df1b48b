"""Alignment losses behind one catalog (one small module per method in ``methods/``)."""

from components.losses.base import AlignmentContext, AlignmentLoss, LossOutput
from components.losses.catalog import (
    available_alignments,
    create_alignment,
    get_alignment,
    register_alignment,
)

__all__ = [
    "AlignmentContext",
    "AlignmentLoss",
    "LossOutput",
    "available_alignments",
    "create_alignment",
    "get_alignment",
    "register_alignment",
]
