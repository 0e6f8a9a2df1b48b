"""Model checkpoints: a state dict plus a metadata record, loaded with weights_only=True.

A checkpoint file is ``{"format": ..., "metadata": ModelSpec.to_dict(),
"state_dict": ...}`` (training checkpoints add optimiser state and progress).
Files are written to a temp file and renamed into place. Loading never
unpickles arbitrary objects, and a checkpoint whose metadata does not fit the
requested model is refused with the list of differences.

Older files: :data:`LATE_FIELDS` is the one table of the metadata fields a file that predates them lacks, and the
value each reads as; :func:`read_spec` consults it (and logs its one-line notice at debug level).
"""

from __future__ import annotations

import hashlib
import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from components.errors import CheckpointMismatchError, refusal_reason
from components.io import atomic_write_bytes
from components.models.encoder import EmbeddingModel, build_meta_model, build_model
from components.models.spec import IDENTITY_FIELDS, ModelSpec

__all__ = [
    "LATE_FIELDS",
    "MODEL_FORMAT",
    "Checkpoint",
    "LateField",
    "check_spec",
    "load_model",
    "load_torch_safe",
    "read_checkpoint",
    "read_spec",
    "save_model",
    "save_torch_atomic",
]

MODEL_FORMAT = "bctflow-model/1"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LateField:
    """A :class:`ModelSpec` field added after checkpoints were written: the ``value`` a file without it reads as (the
    model it was trained as), and the one line that says so."""

    value: Any
    notice: str


#: ModelSpec field → what a checkpoint written before the field existed reads as
LATE_FIELDS: dict[str, LateField] = {
    "mlr_scale": LateField(1.0, "no mlr_scale (the file predates the Lorentz MLR's logit scale): s = 1, HBCT Eq. (9)"),
}


def save_torch_atomic(obj: dict[str, Any], path: Path) -> None:
    """torch.save to a temp file in the same folder, fsync, rename into place."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(Path(path), buf.getvalue())


def _read_bytes(path: Path) -> bytes:
    """The file's bytes: every checkpoint read goes through here (one read per load)."""
    if not path.is_file():
        raise CheckpointMismatchError(f"checkpoint {path} does not exist; check the path or retrain the generation")
    return path.read_bytes()


def _load_bytes(data: bytes, p: Path) -> dict[str, Any]:
    """torch.load of a checkpoint's bytes with weights_only=True; unreadable content gives one clear error."""
    try:
        obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as err:
        raise CheckpointMismatchError(
            f"checkpoint {p} cannot be read safely ({refusal_reason(err)}); it is damaged or not a bctflow "
            "checkpoint: restore it or retrain"
        ) from None
    if not isinstance(obj, dict) or "metadata" not in obj:
        raise CheckpointMismatchError(
            f"{p} is not a bctflow checkpoint (no metadata record); point to a file written by bctflow"
        )
    return obj


def load_torch_safe(path: Path) -> dict[str, Any]:
    """torch.load with weights_only=True; a missing or unreadable file gives one clear error."""
    p = Path(path)
    return _load_bytes(_read_bytes(p), p)


@dataclass(frozen=True, eq=False)
class Checkpoint:
    """A model file read once: the sha256 of its bytes and its record (metadata, state dict, extras)."""

    path: Path
    sha256: str
    record: dict[str, Any]

    @property
    def spec(self) -> ModelSpec:
        return read_spec(self.record, self.path)

    def model(self, expected: ModelSpec | None = None, device: torch.device | str = "cpu") -> EmbeddingModel:
        """A new model with the file's weights (refusing it if it does not fit ``expected``), in eval mode."""
        return _model_from(self.record, self.path, expected, device)


def read_checkpoint(path: Path) -> Checkpoint:
    """Read a model file once: its sha256 and its record (CheckpointMismatchError when missing or unreadable)."""
    p = Path(path)
    data = _read_bytes(p)
    return Checkpoint(p, hashlib.sha256(data).hexdigest(), _load_bytes(data, p))


def read_spec(obj: dict[str, Any], path: Path | str = "checkpoint") -> ModelSpec:
    """The spec a checkpoint record's metadata describes; a field it lacks because the file predates the field reads
    as :data:`LATE_FIELDS` says (CheckpointMismatchError for metadata that is not a spec)."""
    meta = obj["metadata"]
    late = {k: f.value for k, f in LATE_FIELDS.items() if isinstance(meta, dict) and k not in meta}
    for k in late:
        log.debug("checkpoint %s: %s", path, LATE_FIELDS[k].notice)
    try:
        return ModelSpec.from_dict({**late, **meta})
    except (TypeError, ValueError) as err:
        raise CheckpointMismatchError(
            f"{path} has invalid metadata ({err}); it was written by another version or edited"
        ) from None


def check_spec(
    found: ModelSpec, expected: ModelSpec, path: Path | str, names: tuple[str, ...] = IDENTITY_FIELDS
) -> None:
    """Raise CheckpointMismatchError listing every identity field that differs."""
    diffs = found.mismatches(expected, names)
    if diffs:
        raise CheckpointMismatchError(
            f"checkpoint {path} does not match the requested model ({'; '.join(diffs)}); "
            "use the checkpoint of the right generation or change the parameters to match it"
        )


def save_model(model: EmbeddingModel, path: Path, extra: dict[str, Any] | None = None) -> None:
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    save_torch_atomic(
        {"format": MODEL_FORMAT, "metadata": model.spec.to_dict(), "state_dict": state, **(extra or {})}, path
    )


def load_model(path: Path, expected: ModelSpec | None = None, device: torch.device | str = "cpu") -> EmbeddingModel:
    """Rebuild the model stored at ``path`` (refusing it if it does not fit ``expected``)."""
    return _model_from(load_torch_safe(path), Path(path), expected, device)


def _model_from(
    obj: dict[str, Any], path: Path, expected: ModelSpec | None, device: torch.device | str
) -> EmbeddingModel:
    """The model a checkpoint record describes, with its weights, on ``device`` in eval mode."""
    if obj.get("format") != MODEL_FORMAT:
        raise CheckpointMismatchError(
            f"{path} has format {obj.get('format')!r}, expected {MODEL_FORMAT!r}; export the model with bctflow"
        )
    spec = read_spec(obj, path)
    if expected is not None:
        check_spec(spec, expected, path)
    model = build_meta_model(spec)  # the checkpoint's weights are about to replace any initialisation
    try:
        # the file's tensors become the parameters (assign): none is allocated and initialised only to be overwritten
        model.load_state_dict(obj["state_dict"], assign=True)
    except RuntimeError as err:
        raise CheckpointMismatchError(
            f"weights in {path} do not fit its own metadata ({str(err).splitlines()[0]}); the file is damaged"
        ) from None
    if any(t.is_meta for t in (*model.parameters(), *model.buffers())):  # a tensor the file does not hold
        model = build_model(spec)
        model.load_state_dict(obj["state_dict"])
    return model.to(device).eval()
