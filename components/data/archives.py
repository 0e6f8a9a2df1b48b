"""Safe archive extraction: ``.tar.gz`` / ``.tgz`` / ``.tar`` / ``.zip`` into a folder.

Path traversal, absolute paths, links and device files are refused, and a
folder appears at its target only as a complete extraction (a temp folder
beside it is renamed into place). Re-exported by :mod:`components.data.download`.
"""

from __future__ import annotations

import gzip
import os
import shutil
import stat
import tarfile
import uuid
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from components.errors import DataError

__all__ = ["extract"]


def _archive_kind(archive: Path) -> str:
    name = archive.name.lower()
    if name.endswith((".tar.gz", ".tgz")):
        return "r:gz"
    if name.endswith(".tar"):
        return "r:"
    if name.endswith(".zip"):
        return "zip"
    raise DataError(f"cannot extract {archive}: unknown archive type (expected .tar.gz, .tgz, .tar or .zip)")


def _check_member_name(archive: Path, name: str) -> None:
    norm = name.replace("\\", "/")
    parts = PurePosixPath(norm).parts
    unsafe = (
        not norm
        or norm.startswith("/")
        or (len(norm) > 1 and norm[1] == ":")  # C:\..., C:foo
        or ".." in parts
        or "\x00" in norm
    )
    if unsafe:
        raise DataError(
            f"refusing to extract {archive}: member {name!r} has an absolute path or '..' (it would be written "
            f"outside the target folder); the archive is not the expected dataset file, delete it and download "
            f"it again from the official source"
        )


def _refuse_type(archive: Path, name: str, what: str) -> DataError:
    return DataError(
        f"refusing to extract {archive}: member {name!r} is a {what}, which a dataset archive never contains; "
        f"the archive is not the expected dataset file, delete it and download it again from the official source"
    )


def _extract_tar(archive: Path, mode: str, into: Path) -> None:
    with tarfile.open(archive, mode) as tar:
        for m in tar:  # streaming: each member is checked before it is written
            _check_member_name(archive, m.name)
            if m.issym() or m.islnk():
                raise _refuse_type(archive, m.name, "symbolic or hard link")
            if not (m.isfile() or m.isdir()):
                raise _refuse_type(archive, m.name, "device, FIFO or other special file")
            if hasattr(tarfile, "data_filter"):
                tar.extract(m, into, set_attrs=False, filter="data")
            else:  # pragma: no cover - Python < 3.11.4
                tar.extract(m, into, set_attrs=False)


def _extract_zip(archive: Path, into: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        for info in infos:
            _check_member_name(archive, info.filename)
            mode = info.external_attr >> 16
            if mode and stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
                what = "symbolic link" if stat.S_ISLNK(mode) else "device, FIFO or other special file"
                raise _refuse_type(archive, info.filename, what)
        for info in infos:
            zf.extract(info, into)


_CORRUPT = (tarfile.TarError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error, gzip.BadGzipFile)


def extract(archive: str | os.PathLike[str], dest_dir: str | os.PathLike[str]) -> Path:
    """Extract ``archive`` (.tar.gz/.tgz/.tar/.zip) so that its members lie under ``dest_dir``.

    Members are extracted into a temp folder beside ``dest_dir`` that is renamed
    onto ``dest_dir`` only once everything was extracted, so ``dest_dir`` exists
    only as a complete extraction: if it already exists it is returned as is.
    Absolute paths, ``..`` members, links and device files are refused
    (:class:`DataError`); a damaged archive (truncated gzip, bad zip, CRC
    error) raises :class:`DataError` saying to delete and download it again.
    On any failure nothing is left at ``dest_dir`` and the temp folder is removed.
    """
    archive, dest_dir = Path(archive), Path(dest_dir)
    if dest_dir.exists():
        return dest_dir
    if not archive.is_file():
        raise DataError(f"cannot extract {archive}: file not found; download it first (or place it there)")
    kind = _archive_kind(archive)
    dest_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest_dir.with_name(f".{dest_dir.name}.{uuid.uuid4().hex}.tmp")
    tmp.mkdir()
    try:
        try:
            if kind == "zip":
                _extract_zip(archive, tmp)
            else:
                _extract_tar(archive, kind, tmp)
        except DataError:
            raise
        except _CORRUPT as e:
            raise DataError(
                f"archive {archive} is corrupted or truncated ({type(e).__name__}: {e}); "
                f"delete it and download it again"
            ) from e
        try:
            os.replace(tmp, dest_dir)
        except OSError:
            if dest_dir.is_dir():  # another process finished the same extraction first
                return dest_dir
            raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest_dir
