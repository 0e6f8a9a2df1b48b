"""The live pointer: which gallery version serves queries, switched atomically.

``<root>/CURRENT`` is a small JSON pointer ``{"index": <dir>, "serving_index": <dir>, "generation": g,
"version": n, "compatible_generations": [...], ...}`` replaced with an atomic rename, so a reader sees either the
old or the new gallery, never a mixture. ``index`` is the live version's evaluation index (the one the lineage's
pointer row names and pins); ``serving_index`` the index that answers queries — the same one, or the version's
serving corpus index — as the version recorded it when it was built
(:meth:`components.indexing.version.GalleryVersion.serving`). A CURRENT written before ``serving_index`` existed
is read through that record; the next command (or ``bctflow doctor --repair``) rewrites it with the key.

The old version keeps serving readers that already opened it and is only deleted by retention after the switch.
Its paths (``index``, ``serving_index``, ``model_checkpoint``) are written relative to the pointer's folder when
they lie in the workspace around it (``../generations/gen_000/index``), so a copied workspace points at its own
files; :meth:`LivePointer.pointer` returns them absolute.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from components.errors import IncompatibleQueryError, IndexIntegrityError
from components.indexing.backend import ATTACHMENT, SearchIndex, collection_at, open_index
from components.indexing.version import GalleryVersion
from components.io import atomic_write_text

__all__ = ["POINTER", "LivePointer"]

#: the pointer's keys that hold paths
PATH_KEYS = ("index", "serving_index", "model_checkpoint")

POINTER = "CURRENT"


def _same(key: str, a: Any, b: Any) -> bool:
    """Pointer values equal; paths compared resolved."""
    if key in PATH_KEYS and a is not None and b is not None:
        return Path(str(a)).resolve() == Path(str(b)).resolve()
    return a == b


class LivePointer:
    """Reads and switches the live pointer under ``root`` and answers queries through the index it names."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._cache: tuple[str, SearchIndex] | None = None

    @property
    def pointer_path(self) -> Path:
        return self.root / POINTER

    def pointer(self) -> dict[str, Any] | None:
        if not self.pointer_path.exists():
            return None
        try:
            body = json.loads(self.pointer_path.read_text())
        except json.JSONDecodeError as err:
            raise IndexIntegrityError(
                f"live pointer {self.pointer_path} is not valid JSON ({err}); "
                "restore it from the lineage (bctflow lineage)"
            ) from None
        if not isinstance(body, dict):
            raise IndexIntegrityError(
                f"live pointer {self.pointer_path} is not a JSON object; `bctflow doctor --repair` rewrites it"
            )
        for k in PATH_KEYS:
            if isinstance(body.get(k), str) and body[k] and not Path(body[k]).is_absolute():
                body[k] = str((self.root / body[k]).resolve())
        return body

    def _write(self, body: dict[str, Any]) -> None:
        """Write ``body`` to CURRENT (atomic), its paths inside the workspace made relative to the pointer."""
        workspace = self.root.resolve().parent
        on_disk = dict(body)
        for k in PATH_KEYS:
            if on_disk.get(k) and Path(str(on_disk[k])).resolve().is_relative_to(workspace):
                on_disk[k] = os.path.relpath(Path(str(on_disk[k])).resolve(), self.root.resolve())
        atomic_write_text(self.pointer_path, json.dumps(on_disk, indent=1, default=str) + "\n")

    def switch(self, index_dir: Path, **meta: Any) -> dict[str, Any]:
        """Point the live gallery at ``index_dir`` (atomic). Returns the new pointer."""
        self.root.mkdir(parents=True, exist_ok=True)
        prev = self.pointer()
        body = {"index": str(Path(index_dir).resolve()), "version": (prev or {}).get("version", -1) + 1, **meta}
        self._write(body)
        return body

    def matches(self, index_dir: str | Path, **meta: Any) -> bool:
        """True when CURRENT exists, names ``index_dir`` and holds every ``meta`` value as given (paths resolved)."""
        cur = self.pointer()
        if cur is None or not _same("index", cur.get("index", ""), index_dir):
            return False
        return all(_same(k, cur.get(k), v) for k, v in meta.items())

    def restore(self, pointer: dict[str, Any] | None) -> None:
        """Put a previous pointer back (undo of a switch whose lineage commit failed)."""
        if pointer is None:
            self.pointer_path.unlink(missing_ok=True)
        else:
            self._write(pointer)

    def _current(self) -> dict[str, Any]:
        p = self.pointer()
        if p is None:
            raise IndexIntegrityError(
                f"there is no live gallery under {self.root}; create generation 0 first (bctflow run)"
            )
        return p

    @staticmethod
    def _serving(p: dict[str, Any]) -> Path:
        if p.get("serving_index"):
            return Path(p["serving_index"])
        return GalleryVersion.serving_index_of(p["index"])  # a CURRENT written before the key

    def serving_index(self) -> Path:
        """The index that answers queries: CURRENT's ``serving_index``, or (a CURRENT written before that key) the
        one the live version recorded."""
        return self._serving(self._current())

    def index(self) -> SearchIndex:
        """The serving index, with the query generations the pointer allows."""
        p = self._current()
        key = json.dumps(p, sort_keys=True, default=str)
        if self._cache is None or self._cache[0] != key:
            idx = open_index(self._serving(p))
            gens = tuple(int(g) for g in p.get("compatible_generations", [idx.manifest.generation]))
            self._cache = (key, idx.with_compatible_generations(gens))
        return self._cache[1]

    def search(self, queries: np.ndarray, k: int, *, query_generation: int) -> tuple[np.ndarray, np.ndarray]:
        """Search the live gallery with vectors of ``query_generation`` (refused unless the pointer allows it)."""
        idx = self.index()
        if query_generation not in idx.manifest.compatible_generations:
            p = self.pointer() or {}
            raise IncompatibleQueryError(
                f"generation {query_generation} is not compatible with the live gallery "
                f"(embedded by generation {p.get('generation')}; "
                f"it accepts queries of generations {list(idx.manifest.compatible_generations)}); "
                "backfill the gallery with it or query with a compatible generation"
            )
        return idx.search(queries, k, query_generation=query_generation)

    def versions(self) -> list[Path]:
        return sorted(p for p in self.root.glob("index-v*") if p.is_dir())

    def next_version_dir(self) -> Path:
        nums = [
            int(p.name.removeprefix("index-v")) for p in self.versions() if p.name.removeprefix("index-v").isdigit()
        ]
        return self.root / f"index-v{(max(nums) + 1) if nums else 1:03d}"

    def prune(self, keep: int) -> list[Path]:
        """Delete backfill index versions beyond the newest ``keep``, never the live one (the version holding the
        live index): their vectors in the store that holds them first, then the folder."""
        live = Path((self.pointer() or {}).get("index", "")).resolve()
        victims = [p for p in self.versions()[:-keep] if p.resolve() not in (live, live.parent)] if keep > 0 else []
        for p in victims:
            for attached in sorted(p.glob(f"**/{ATTACHMENT}")):
                collection_at(attached.parent).drop()
            shutil.rmtree(p, ignore_errors=True)
        return victims
