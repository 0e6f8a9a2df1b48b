"""Fetching dataset files safely: checksummed downloads, safe archive extraction, array caches.

Every file is written atomically (a temp file beside the target, renamed into
place only when complete and verified), so an interrupted or failed run never
leaves a half-written download, a half-extracted folder or a damaged cache
where a later run would take it for a good one.

- :func:`download` — urllib download verified against an MD5 / SHA-256; an
  existing file is checked, never silently overwritten.
- :func:`download_first` — the same over a list of mirrors.
- :func:`extract` — ``.tar.gz`` / ``.tgz`` / ``.tar`` / ``.zip`` into a folder,
  refusing path traversal, absolute paths, links and device files.
- :func:`load_or_build_cache` — a dict of arrays kept in an ``.npz``
  (no pickle), rebuilt when missing, damaged or built from other inputs.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import logging
import os
import shutil
import stat
import tarfile
import urllib.error
import urllib.request
import uuid
import zipfile
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath

import numpy as np

from components.errors import DataError
from components.io import atomic_path

__all__ = [
    "ChecksumError",
    "download",
    "download_first",
    "extract",
    "fetch_archive",
    "file_digest",
    "load_or_build_cache",
    "verify_file",
]

log = logging.getLogger(__name__)

_CHUNK = 1 << 20
_USER_AGENT = "bctflow-dataset-loader (python urllib)"
_ALGOS = ("md5", "sha256")


class ChecksumError(DataError):
    """A file's content does not match its published checksum."""


def _hasher(algo: str):
    if algo not in _ALGOS:
        raise ValueError(f"unsupported checksum algorithm {algo!r}; use one of {', '.join(_ALGOS)}")
    return hashlib.new(algo)


def file_digest(path: str | os.PathLike[str], algo: str = "md5") -> str:
    """Hex digest (``"md5"`` or ``"sha256"``) of a file, read in 1 MiB chunks."""
    h = _hasher(algo)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _expected(md5: str | None, sha256: str | None) -> tuple[str, str] | None:
    if sha256:
        return "sha256", sha256.lower()
    if md5:
        return "md5", md5.lower()
    return None


def verify_file(path: str | os.PathLike[str], *, md5: str | None = None, sha256: str | None = None) -> None:
    """Raise :class:`ChecksumError` unless ``path`` matches the given checksum (sha256 preferred)."""
    exp = _expected(md5, sha256)
    if exp is None:
        return
    algo, want = exp
    got = file_digest(path, algo)
    if got != want:
        raise ChecksumError(
            f"{path} has {algo} {got}, expected {want}: the file is corrupted, incomplete or a different "
            f"version; delete it and run again to download it afresh (or replace it with the correct file)"
        )


def _manual_hint(dest: Path, md5: str | None, sha256: str | None) -> str:
    exp = _expected(md5, sha256)
    check = f" ({exp[0]} {exp[1]})" if exp else ""
    return (
        f"if this machine has no network access, download the file elsewhere, place it at {dest}{check} and run again"
    )


def download(
    url: str,
    dest: str | os.PathLike[str],
    *,
    md5: str | None = None,
    sha256: str | None = None,
    timeout: float = 60,
) -> Path:
    """Download ``url`` to ``dest`` and verify its checksum; returns ``dest``.

    - ``dest`` already there with the right checksum (or no checksum given):
      nothing is downloaded.
    - ``dest`` already there with a wrong checksum: :class:`ChecksumError`; the
      file is left untouched (it may be the user's), the message says to delete it.
    - Otherwise the body is streamed to a temp file beside ``dest``, hashed
      while written, and renamed onto ``dest`` only when complete and verified.
      On any failure the temp file is removed: a network problem raises
      :class:`DataError` (saying where to put the file by hand), a checksum
      mismatch :class:`ChecksumError` (expected vs actual).
    """
    dest = Path(dest)
    exp = _expected(md5, sha256)
    if dest.exists():
        if not dest.is_file():
            raise DataError(f"{dest} exists but is not a file; remove it so that {url} can be downloaded there")
        if exp is not None:
            got = file_digest(dest, exp[0])
            if got != exp[1]:
                raise ChecksumError(
                    f"{dest} already exists but its {exp[0]} is {got}, expected {exp[1]}; it was NOT overwritten. "
                    f"It is corrupted, incomplete or a different version: delete it to download it again from {url}, "
                    f"or replace it with the correct file"
                )
        return dest

    dest.parent.mkdir(parents=True, exist_ok=True)
    log.info("downloading %s -> %s", url, dest)
    h = _hasher(exp[0]) if exp else None
    with atomic_path(dest) as tmp:
        try:
            req = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
            with urllib.request.urlopen(req, timeout=timeout) as resp, open(tmp, "xb") as out:
                length = resp.headers.get("Content-Length")
                received = 0
                while chunk := resp.read(_CHUNK):
                    out.write(chunk)
                    received += len(chunk)
                    if h is not None:
                        h.update(chunk)
            if length is not None and length.isdigit() and received != int(length):
                raise DataError(
                    f"the download of {url} was cut short ({received} of {length} bytes); "
                    f"run again, or {_manual_hint(dest, md5, sha256)}"
                )
        except DataError:
            raise
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
            if isinstance(e, urllib.error.HTTPError):
                reason = f"HTTP {e.code} {e.reason}"
            else:
                reason = f"{type(e).__name__}: {getattr(e, 'reason', None) or e}"
            raise DataError(
                f"could not download {url} to {dest} ({reason}); check the network connection "
                f"and run again, or {_manual_hint(dest, md5, sha256)}"
            ) from e
        if h is not None and exp is not None:
            got = h.hexdigest()
            if got != exp[1]:
                raise ChecksumError(
                    f"the file downloaded from {url} has {exp[0]} {got}, expected {exp[1]}; it was discarded "
                    f"(nothing written to {dest}). The server sent a corrupted or different file: run again later, "
                    f"or {_manual_hint(dest, md5, sha256)}"
                )
    return dest


def fetch_archive(archive: Path, url: str, md5: str, *, allowed: bool, what: str) -> str:
    """The verified archive at ``archive``, downloaded from ``url`` when it is missing and ``allowed``.

    Returns where it came from (the local path, or ``url``). DataError when it is missing and downloads are off.
    """
    if not archive.exists() and not allowed:
        raise DataError(
            f"{what} archive not found at {archive} and downloading is off; set data.download=true, or download "
            f"{url} elsewhere and place it at {archive} (md5 {md5})"
        )
    source = str(archive) if archive.exists() else url
    download(url, archive, md5=md5)  # verifies an existing file, downloads a missing one
    return source


def download_first(
    urls: Sequence[str],
    dest: str | os.PathLike[str],
    *,
    md5: str | None = None,
    sha256: str | None = None,
    timeout: float = 60,
) -> tuple[Path, str | None]:
    """:func:`download` from the first of ``urls`` (mirrors) that works; same guarantees.

    Returns ``(dest, url)``: the URL the file came from, or ``None`` when ``dest``
    was already there (it is then checked once; no mirror is tried if it is
    wrong). When every mirror fails, the :class:`DataError` lists each failure.
    """
    dest = Path(dest)
    if not urls:
        raise ValueError("download_first needs at least one URL")
    if dest.exists():
        return download(urls[0], dest, md5=md5, sha256=sha256, timeout=timeout), None
    errors: list[DataError] = []
    for url in urls:
        try:
            return download(url, dest, md5=md5, sha256=sha256, timeout=timeout), url
        except DataError as e:
            log.warning("%s", e)
            errors.append(e)
    kind = ChecksumError if all(isinstance(e, ChecksumError) for e in errors) else DataError
    details = "; ".join(f"[{i + 1}] {e}" for i, e in enumerate(errors))
    raise kind(f"could not download {dest.name} from any of {len(urls)} mirrors: {details}")


# --------------------------------------------------------------------------- extraction


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


# --------------------------------------------------------------------------- array cache

_KEY = "__cache_key__"


def load_or_build_cache(
    cache: str | os.PathLike[str],
    build: Callable[[], dict[str, np.ndarray]],
    *,
    key: str | None = None,
) -> dict[str, np.ndarray]:
    """Arrays from the ``.npz`` at ``cache``, or ``build()``'s arrays, saved there atomically.

    The file is written with ``np.savez`` (uncompressed: fast to load) and read
    with ``allow_pickle=False``. A missing, unreadable or damaged cache — or
    one stored under another ``key`` (e.g. the checksum of the source it was
    built from) — is rebuilt. Array names must not start with ``__``.
    """
    cache = Path(cache)
    if cache.exists():
        try:
            with np.load(cache, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            stored = arrays.pop(_KEY, None)
            stored_key = None if stored is None else str(stored)
            if stored_key == key:
                return arrays
            log.info("cache %s was built from other inputs; rebuilding it", cache)
        except Exception as e:
            log.warning("cache %s is damaged (%s: %s); rebuilding it", cache, type(e).__name__, e)
    arrays = build()
    bad = [k for k in arrays if k.startswith("__")]
    if bad:
        raise ValueError(f"cache array names must not start with '__': {bad}")
    cache.parent.mkdir(parents=True, exist_ok=True)
    to_save = dict(arrays)
    if key is not None:
        to_save[_KEY] = np.array(key)
    with atomic_path(cache) as tmp, open(tmp, "xb") as f:
        np.savez(f, **to_save)
    return arrays
