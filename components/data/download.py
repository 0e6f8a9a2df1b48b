"""Fetching dataset files safely: checksummed downloads (pooch), safe archive extraction, array caches.

- :func:`download` — pooch fetches ``url`` into ``dest``'s folder: requests streams it into a temp file
  there, pooch checks it against the MD5 / SHA-256 and moves it onto ``dest`` only when it matches
  (retried ``retries`` times, a tqdm progress bar on a terminal). Around pooch: an existing ``dest``
  is verified and never overwritten (pooch would download over it), and pooch's / requests' errors
  become one :class:`ChecksumError` / :class:`DataError` naming the file, the URL and the fix.
- :func:`download_first` — the same over a list of mirrors.
- :func:`extract` — ``.tar.gz`` / ``.tgz`` / ``.tar`` / ``.zip`` into a folder, refusing path traversal,
  absolute paths, links and device files, placed atomically (:mod:`components.data.archives`; pooch's
  ``Untar`` / ``Unzip`` processors extract in place and, on Python < 3.12, without tarfile's ``data`` filter).
- :func:`load_or_build_cache` — a dict of arrays kept in an ``.npz`` (no pickle), rebuilt when missing,
  damaged or built from other inputs; written atomically.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pooch
import requests

from components.data.archives import extract
from components.errors import DataError
from components.io import atomic_path

__all__ = [
    "RETRIES",
    "ChecksumError",
    "download",
    "download_first",
    "extract",
    "fetch_archive",
    "load_or_build_cache",
]

log = logging.getLogger(__name__)

#: Further attempts after a failed download of one URL (pooch waits 1 s, 2 s, … between them).
RETRIES = 2
_CHUNK = 1 << 20
#: ``identity``: the bytes as stored (a server must not gzip a ``.gz`` again on the way, the checksum is of the file).
_HEADERS = {"User-Agent": "bctflow-dataset-loader (pooch)", "Accept-Encoding": "identity"}


class ChecksumError(DataError):
    """A file's content does not match its published checksum."""


def _expected(md5: str | None, sha256: str | None) -> tuple[str, str] | None:
    if sha256:
        return "sha256", sha256.lower()
    if md5:
        return "md5", md5.lower()
    return None


def _manual_hint(dest: Path, md5: str | None, sha256: str | None) -> str:
    exp = _expected(md5, sha256)
    check = f" ({exp[0]} {exp[1]})" if exp else ""
    return (
        f"if this machine has no network access, download the file elsewhere, place it at {dest}{check} and run again"
    )


class _Forward(logging.Handler):
    """Re-emits pooch's records (its own stand-alone logger) on this module's logger, so they reach our handlers."""

    def emit(self, record: logging.LogRecord) -> None:
        log.log(record.levelno, "pooch: %s", record.getMessage())


@contextmanager
def _pooch_logs_here() -> Iterator[None]:
    logger = pooch.get_logger()
    handlers = logger.handlers[:]
    logger.handlers = [_Forward()]
    try:
        yield
    finally:
        logger.handlers = handlers


def download(
    url: str,
    dest: str | os.PathLike[str],
    *,
    md5: str | None = None,
    sha256: str | None = None,
    timeout: float = 60,
    retries: int = RETRIES,
) -> Path:
    """Download ``url`` to ``dest`` and verify its checksum (sha256 preferred); returns ``dest``.

    - ``dest`` already there with the right checksum (or no checksum given): nothing is downloaded.
    - ``dest`` already there with a wrong checksum: :class:`ChecksumError`; the file is left
      untouched (it may be the user's), the message says to delete it.
    - Otherwise pooch streams the body to a temp file beside ``dest`` and moves it onto ``dest`` only
      when complete and verified, trying ``1 + retries`` times; the temp file is removed on failure.
      A network problem raises :class:`DataError` (saying where to put the file by hand), a checksum
      mismatch :class:`ChecksumError` (expected vs actual).
    """
    dest = Path(dest)
    exp = _expected(md5, sha256)
    if dest.exists():
        _check_existing(dest, url, exp)
        return dest
    got: list[str] = []  # the digest of each attempt's temp file, for the error message

    def fetch(url: str, output_file: str, pup: pooch.Pooch) -> None:
        bar = sys.stderr.isatty()
        http = pooch.HTTPDownloader(progressbar=bar, chunk_size=_CHUNK, timeout=timeout, headers=_HEADERS)
        http(url, output_file, pup)
        if exp is not None:
            got.append(pooch.file_hash(output_file, alg=exp[0]))

    known = f"{exp[0]}:{exp[1]}" if exp else None
    pup = pooch.create(
        dest.parent, base_url="", registry={dest.name: known}, urls={dest.name: url}, retry_if_failed=retries
    )
    try:
        with _pooch_logs_here():  # pooch logs "Downloading file ... from ... to ..." and each retry
            pup.fetch(dest.name, downloader=fetch)
    except (requests.RequestException, OSError) as e:
        raise _network_error(e, url, dest, md5, sha256) from e
    except ValueError as e:  # pooch's hash mismatch (the temp file is already deleted)
        if exp is None or not got:
            raise
        raise ChecksumError(
            f"the file downloaded from {url} has {exp[0]} {got[-1]}, expected {exp[1]}; it was discarded "
            f"(nothing written to {dest}). The server sent a corrupted or different file: run again later, "
            f"or {_manual_hint(dest, md5, sha256)}"
        ) from e
    return dest


def _check_existing(dest: Path, url: str, exp: tuple[str, str] | None) -> None:
    """Refuse an existing ``dest`` that is not a file or does not match the expected ``(algo, digest)``."""
    if not dest.is_file():
        raise DataError(f"{dest} exists but is not a file; remove it so that {url} can be downloaded there")
    if exp is not None:
        got = pooch.file_hash(str(dest), alg=exp[0])
        if got != exp[1]:
            raise ChecksumError(
                f"{dest} already exists but its {exp[0]} is {got}, expected {exp[1]}; it was NOT overwritten. "
                f"It is corrupted, incomplete or a different version: delete it to download it again from {url}, "
                f"or replace it with the correct file"
            )


def _network_error(e: Exception, url: str, dest: Path, md5: str | None, sha256: str | None) -> DataError:
    """The :class:`DataError` for a download of ``url`` that failed with ``e`` (HTTP status or reason)."""
    response = getattr(e, "response", None)
    if isinstance(e, requests.HTTPError) and response is not None:
        reason = f"HTTP {response.status_code} {response.reason}"
    else:
        reason = f"{type(e).__name__}: {e}"
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
    retries: int = 0,
) -> tuple[Path, str | None]:
    """:func:`download` from the first of ``urls`` (mirrors) that works; same guarantees.

    Returns ``(dest, url)``: the URL the file came from, or ``None`` when ``dest``
    was already there (it is then checked once; no mirror is tried if it is
    wrong). When every mirror fails, the :class:`DataError` lists each failure.
    The next mirror is the retry: each is tried ``1 + retries`` times (once by default).
    """
    dest = Path(dest)
    if not urls:
        raise ValueError("download_first needs at least one URL")
    if dest.exists():
        return download(urls[0], dest, md5=md5, sha256=sha256, timeout=timeout), None
    errors: list[DataError] = []
    for url in urls:
        try:
            return download(url, dest, md5=md5, sha256=sha256, timeout=timeout, retries=retries), url
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
