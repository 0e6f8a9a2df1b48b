"""Fetching dataset files safely: checksummed downloads, safe archive extraction, array caches.

Every file is written atomically (a temp file beside the target, renamed into
place only when complete and verified), so an interrupted or failed run never
leaves a half-written download, a half-extracted folder or a damaged cache
where a later run would take it for a good one.

- :func:`download` — urllib download verified against an MD5 / SHA-256; an
  existing file is checked, never silently overwritten.
- :func:`download_first` — the same over a list of mirrors.
- :func:`extract` — ``.tar.gz`` / ``.tgz`` / ``.tar`` / ``.zip`` into a folder,
  refusing path traversal, absolute paths, links and device files
  (defined in :mod:`components.data.archives`).
- :func:`load_or_build_cache` — a dict of arrays kept in an ``.npz``
  (no pickle), rebuilt when missing, damaged or built from other inputs.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from components.data.archives import extract
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
        _check_existing(dest, url, exp)
        return dest

    dest.parent.mkdir(parents=True, exist_ok=True)
    log.info("downloading %s -> %s", url, dest)
    h = _hasher(exp[0]) if exp else None
    with atomic_path(dest) as tmp:
        try:
            received, length = _stream_to(url, tmp, timeout, h)
            if length is not None and length.isdigit() and received != int(length):
                raise DataError(
                    f"the download of {url} was cut short ({received} of {length} bytes); "
                    f"run again, or {_manual_hint(dest, md5, sha256)}"
                )
        except DataError:
            raise
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
            raise _network_error(e, url, dest, md5, sha256) from e
        if h is not None and exp is not None:
            got = h.hexdigest()
            if got != exp[1]:
                raise ChecksumError(
                    f"the file downloaded from {url} has {exp[0]} {got}, expected {exp[1]}; it was discarded "
                    f"(nothing written to {dest}). The server sent a corrupted or different file: run again later, "
                    f"or {_manual_hint(dest, md5, sha256)}"
                )
    return dest


def _check_existing(dest: Path, url: str, exp: tuple[str, str] | None) -> None:
    """Refuse an existing ``dest`` that is not a file or does not match the expected ``(algo, digest)``."""
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


def _stream_to(url: str, tmp: Path, timeout: float, h: Any) -> tuple[int, str | None]:
    """Stream the body of ``url`` into the new file ``tmp``, feeding ``h`` (a hashlib hash, or None) as it goes.

    Returns ``(bytes received, the Content-Length header or None)``.
    """
    req = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
    with urllib.request.urlopen(req, timeout=timeout) as resp, open(tmp, "xb") as out:
        length = resp.headers.get("Content-Length")
        received = 0
        while chunk := resp.read(_CHUNK):
            out.write(chunk)
            received += len(chunk)
            if h is not None:
                h.update(chunk)
    return received, length


def _network_error(e: Exception, url: str, dest: Path, md5: str | None, sha256: str | None) -> DataError:
    """The :class:`DataError` for a download of ``url`` that failed with ``e`` (HTTP status or reason)."""
    if isinstance(e, urllib.error.HTTPError):
        reason = f"HTTP {e.code} {e.reason}"
    else:
        reason = f"{type(e).__name__}: {getattr(e, 'reason', None) or e}"
    return DataError(
        f"could not download {url} to {dest} ({reason}); check the network connection "
        f"and run again, or {_manual_hint(dest, md5, sha256)}"
    )


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
