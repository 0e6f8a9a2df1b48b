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


def refusal_reason(err: Exception) -> str:
    """Why ``torch.load(weights_only=True)`` refused a file, in words that never suggest loading it unsafely (torch's
    own message recommends ``weights_only=False``, which would run whatever code the file carries)."""
    text = str(err)
    if "Weights only load failed" not in text:
        return f"{type(err).__name__}: {text.splitlines()[0][:200] if text else 'unreadable'}"
    if "GLOBAL" in text:
        return (
            "it holds Python objects other than tensors and plain values and was refused unread: unpickling them "
            "could run code from the file"
        )
    return "its bytes are not a file of tensors and plain values (damaged, or another format)"
