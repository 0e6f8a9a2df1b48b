"""Error types. Every error says what is wrong and how to fix it, in one message."""

from __future__ import annotations


class BctflowError(Exception):
    """Base class: a problem a user can act on (bad input, bad file, bad state)."""


class ConfigError(BctflowError, ValueError):
    """A parameter in params.yaml / on the command line is invalid."""


class DataError(BctflowError):
    """A dataset is unknown, missing, corrupted, or a selection is invalid."""


class CheckpointMismatchError(BctflowError):
    """A checkpoint's metadata does not fit the model that was asked for."""


class IndexIntegrityError(BctflowError):
    """An index file or its manifest is missing, truncated, tampered or inconsistent."""


class IncompatibleQueryError(BctflowError):
    """Query embeddings do not fit an index (dimension, geometry or generation)."""


class LineageError(BctflowError):
    """The lineage database is in a state that does not allow the operation."""
