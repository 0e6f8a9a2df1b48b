"""A gallery version's seal: what its switches check, recorded once when the version is published (docs/design.md
§8.4).

Publishing a version — a backfill's publish step, generation 0's commit — reads every row of it anyway; a switch to
it later — ``bctflow rollback``, the store's alias move, the backfill's own switch — must not: at 10⁹ rows a read of
the rows takes minutes to hours. :func:`seal_version` writes ``seal.json`` (:data:`SEAL`) in the version's folder,
and the lineage's pointer rows pin its sha256 (``seal_sha256``, lineage revision 0011). It records

* ``files``: what the version serves from — its index folders' files (FAISS: the index files and ``manifest.json``;
  a database store: its attachment), its part stores' top (``store.json``, which lists every part with its sha256,
  and the ``parts/`` folder as one entry) and ``serving.json`` — by path relative to the version, with its size in
  bytes and its modification time in ns (a folder's: the last time a file was created, removed or renamed in it);
* ``manifests``: each index folder's ``manifest.json`` sha256 (a database store's attachment records its holder's
  state as the build left it: :meth:`~components.indexing.backend.Collection.unchanged_since_built`);
* ``facts``: the serving index's :class:`~components.indexing.backend.GalleryFacts` — store, collection, rows per
  generation stamp (FAISS files: counted from the part store's stamps, here, once), index — what the lineage's
  pointer row records of a live gallery.

:func:`unsealed` is a switch's check: the seal is the file the lineage pinned; each sealed file has its size and
modification time, each sealed folder its modification time; each manifest its sha256; each index's store vouches for
its vectors in calls that do not grow with them. Its cost does not grow with the gallery: a dozen ``stat`` calls
(whatever the number of parts: 123 at 1M rows, 1221 at 10M), a few small files read and hashed, O(1) store calls; no
row, index file or part is read or listed. What it cannot see — a part rewritten in place (its folder's entries
unchanged), a file rewritten to the same size with its modification time set back, rows of a Milvus collection
deleted or rewritten in place — the full verify sees (each file against its sha256 pin, the store's row counts):
``bctflow doctor`` on the live version, the query service's load of a version before it serves it, and a rollback
whose seal does not prove its version unchanged (a version published before seals, a copy that did not keep
modification times, a sealed file changed, a part added, removed or replaced).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from components.errors import IndexIntegrityError
from components.indexing.backend import ATTACHMENT, GalleryFacts, collection_at
from components.indexing.version import SERVING_FILE, GalleryVersion
from components.io import atomic_write_bytes, file_sha256

__all__ = ["SEAL", "VersionSeal", "read_seal", "seal_version", "unsealed"]

#: the seal's file in a gallery version's folder
SEAL = "seal.json"
_FORMAT = 1


@dataclass(frozen=True)
class VersionSeal:
    """A version's seal (module docstring): ``files`` path relative to the version → (size in bytes, modification
    time in ns); ``manifests`` index folder relative to the version → sha256 of its ``manifest.json``; ``facts`` of
    the serving index."""

    files: dict[str, tuple[int, int]]
    manifests: dict[str, str]
    facts: GalleryFacts

    def to_json(self) -> bytes:
        rows = {str(g): n for g, n in self.facts.rows_by_generation.items()}
        facts = asdict(self.facts) | {"rows_by_generation": rows}
        body = {"format": _FORMAT, "files": self.files, "manifests": self.manifests, "facts": facts}
        return (json.dumps(body, indent=1, sort_keys=True) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, raw: bytes) -> VersionSeal:
        """The seal in ``raw``; ValueError / KeyError / TypeError where it is not one."""
        body = json.loads(raw)
        f = body["facts"]
        facts = GalleryFacts(
            str(f["store"]),
            f["collection"],
            {int(g): int(n) for g, n in f["rows_by_generation"].items()},
            dict(f["index_params"]),
        )
        files = {str(p): (int(size), int(mtime)) for p, (size, mtime) in body["files"].items()}
        return cls(files, {str(p): str(d) for p, d in body["manifests"].items()}, facts)


def _served(version: GalleryVersion) -> tuple[list[Path], list[Path]]:
    """(the version's index folders, its part stores and ``serving.json``): what it serves from."""
    serving = version.serving()
    indexes = list(dict.fromkeys((version.evaluation_index, serving.index)))
    rest = [version.evaluation_gallery(), serving.gallery, version.root / SERVING_FILE]
    return indexes, [p for p in dict.fromkeys(rest) if p.exists()]


def _files(path: Path) -> list[Path]:
    """What the seal records of ``path``: the file itself; of a folder, each entry at its top but the hidden ones (an
    atomic write's leftover temp files) — its files, and its sub-folders as folders (a part store's ``parts/``: one
    entry however many parts it holds; a file created, removed or renamed in it moves the folder's modification
    time)."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.iterdir() if not p.name.startswith("."))


def seal_version(version: GalleryVersion) -> tuple[VersionSeal, str]:
    """Seal the finished gallery version ``version`` (its galleries built, indexed and ``serving.json`` written):
    ``seal.json`` written (atomic) in its folder; returns (the seal, its sha256, which the lineage pins). Reads the
    serving part store's stamps once where its store does not record them (FAISS files)."""
    indexes, rest = _served(version)
    files = {}
    for f in (f for p in (*indexes, *rest) for f in _files(p)):
        st = f.stat()
        files[f.relative_to(version.root).as_posix()] = (st.st_size, st.st_mtime_ns)
    manifests = {out.relative_to(version.root).as_posix(): file_sha256(out / ATTACHMENT) for out in indexes}
    seal = VersionSeal(files, manifests, collection_at(version.serving().index).facts())
    raw = seal.to_json()
    atomic_write_bytes(version.root / SEAL, raw)
    return seal, hashlib.sha256(raw).hexdigest()


def read_seal(version: GalleryVersion) -> tuple[VersionSeal, str]:
    """The seal :func:`seal_version` wrote and its sha256; IndexIntegrityError in one line where it is missing or
    damaged."""
    path = version.root / SEAL
    try:
        raw = path.read_bytes()
        return VersionSeal.from_json(raw), hashlib.sha256(raw).hexdigest()
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise IndexIntegrityError(
            f"{path} cannot be read ({type(err).__name__}); run the same backfill again: it verifies the published "
            "version and seals it anew"
        ) from None


def _when(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="microseconds")


def unsealed(version: GalleryVersion, pinned: str | None) -> str | None:
    """None when ``version``'s seal proves it unchanged since it was published (the module docstring says what that
    checks and what it cannot see); else one line saying why it does not — the caller then verifies the version in
    full. IndexIntegrityError where a store says its vectors certainly changed (the holder is gone or holds another
    generation or width). ``pinned``: the seal's sha256 as the lineage recorded it (None: recorded before seals)."""
    path = version.root / SEAL
    if not pinned:
        return "the lineage pinned no seal of it (it went live before bctflow sealed versions)"
    try:
        raw = path.read_bytes()
    except OSError:
        return f"its seal {path} is missing"
    if hashlib.sha256(raw).hexdigest() != pinned:
        return f"{path} is not the seal the lineage pinned"
    seal = VersionSeal.from_json(raw)  # the pinned bytes: the seal this code wrote
    for rel, (size, mtime) in seal.files.items():
        f = version.root / rel
        try:
            st = f.stat()
        except OSError:
            return f"{f} is missing"
        if f.is_dir() and st.st_mtime_ns != mtime:
            return (
                f"{f} holds other files than when the version was sealed (its entries changed at "
                f"{_when(st.st_mtime_ns)}, sealed at {_when(mtime)})"
            )
        if not f.is_dir() and (st.st_size, st.st_mtime_ns) != (size, mtime):
            return (
                f"{f} changed since the version was sealed ({size} bytes modified {_when(mtime)}, now "
                f"{st.st_size} bytes modified {_when(st.st_mtime_ns)})"
            )
    for rel, digest in seal.manifests.items():
        out = version.root / rel
        if file_sha256(out / ATTACHMENT) != digest:
            return f"{out / ATTACHMENT} is not the manifest the version was sealed with"
        why = collection_at(out).unchanged_since_built()
        if why is not None:
            return why
    return None
