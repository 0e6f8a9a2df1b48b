"""Alignment losses behind one catalog (one small module per method in ``methods/``)."""

from components.losses.base import AlignmentContext, AlignmentLoss, EmbeddedGallery, LossOutput, MethodDiagnostics
from components.losses.catalog import (
    AlignmentChoice,
    check_alignment_options,
    choose_alignment,
    create_alignment,
    list_alignments,
    register_alignment,
)

__all__ = [
    "AlignmentChoice",
    "AlignmentContext",
    "AlignmentLoss",
    "EmbeddedGallery",
    "LossOutput",
    "MethodDiagnostics",
    "check_alignment_options",
    "choose_alignment",
    "create_alignment",
    "list_alignments",
    "register_alignment",
]
