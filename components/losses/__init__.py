"""Alignment losses behind one catalog (one small module per method in ``methods/``)."""

from components.losses.base import AlignmentContext, AlignmentLoss, EmbeddedGallery, LossOutput, MethodDiagnostics
from components.losses.catalog import (
    AlignmentChoice,
    available_alignments,
    choose_alignment,
    create_alignment,
    get_alignment,
    register_alignment,
)

__all__ = [
    "AlignmentChoice",
    "AlignmentContext",
    "AlignmentLoss",
    "EmbeddedGallery",
    "LossOutput",
    "MethodDiagnostics",
    "available_alignments",
    "choose_alignment",
    "create_alignment",
    "get_alignment",
    "register_alignment",
]
