"""Atomic file replacement: write beside the target, fsync, ``os.replace``.

Generic helpers (used by the index and by checkpoints). A reader of ``path``
sees either the old complete file or the new complete file, never a partial
one; a failed write leaves the old file untouched and no temp file behind.
Temp files are named ``.<name>.<random>.tmp`` in the target's directory
(same file system, so ``os.replace`` is an atomic rename).
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_text", "file_sha256"]


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable; a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")


def _remove_quietly(path: Path) -> None:
    with suppress(FileNotFoundError):
        path.unlink()


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a fresh temp path beside ``path``; on success move it into place.

    The caller creates and fills the file at the yielded path (e.g.
    ``torch.save(obj, tmp)``). When the ``with`` block exits normally the temp
    file is fsynced and atomically renamed onto ``path`` (then the directory is
    fsynced). If the block raises, the temp file is removed, ``path`` is left
    as it was, and the exception propagates. The parent directory must exist.
    """
    target = Path(path)
    if not target.parent.is_dir():
        raise FileNotFoundError(f"cannot write {target}: directory {target.parent} does not exist; create it first")
    tmp = _temp_name(target)
    try:
        yield tmp
        if not tmp.is_file():
            raise FileNotFoundError(
                f"nothing was written to the temp file {tmp} for {target}; "
                "write the file at the path yielded by atomic_path()"
            )
        _fsync_file(tmp)
        os.replace(tmp, target)
    except BaseException:
        _remove_quietly(tmp)
        raise
    _fsync_dir(target.parent)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Atomically replace ``path`` with ``data`` (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp, open(tmp, "xb") as f:
        f.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Atomically replace ``path`` with UTF-8 ``text``."""
    atomic_write_bytes(path, text.encode("utf-8"))


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()
