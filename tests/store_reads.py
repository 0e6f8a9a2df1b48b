"""A spy on the read paths of the real gallery stores, for the tests that a switch (alias move, rollback) reads no
row: every file opened in this process (a part, an index file), every FAISS index read, every call of the Milvus
client and of a LanceDB table that reads, counts or loads a collection's rows — each recorded, then passed on to the
real method unchanged."""

from __future__ import annotations

import builtins
import contextlib
import functools
import io
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

#: MilvusClient calls that read, count or load a collection's rows (Milvus Lite's statistics and index description
#: walk every primary key)
MILVUS_ROW_CALLS = ("get_collection_stats", "query", "query_iterator", "search", "get", "load_collection")
MILVUS_ROW_CALLS += ("describe_index", "list_indexes")
#: LanceDB table calls that read or count its rows
LANCE_ROW_CALLS = ("count_rows", "search", "to_arrow", "to_pandas", "to_lance", "head", "take_offsets")
#: a gallery version's holder: ``<gallery.name>_g<N>_v<k>[_corpus]`` (not the alias, ``<name>_live``)
_HOLDER = re.compile(r"_g\d+_v\d+(_corpus)?$")


@dataclass
class Reads:
    """What was read while the spy was on: ``opened`` file paths, ``faiss`` index files read, ``milvus`` / ``lance``
    (call, collection or table name)."""

    opened: list[Path] = field(default_factory=list)
    faiss: list[str] = field(default_factory=list)
    milvus: list[tuple[str, str]] = field(default_factory=list)
    lance: list[tuple[str, str]] = field(default_factory=list)

    def gallery_files(self) -> list[Path]:
        """The opened files that hold a gallery's rows: parts (``parts/*.npz``, a legacy ``gallery.npz``) and FAISS
        index files (``*.faiss``)."""
        return [p for p in self.opened if p.suffix == ".faiss" or p.name == "gallery.npz" or p.parent.name == "parts"]

    def rows_read(self) -> list[str]:
        """Every read of a gallery's rows, one line each (the alias's own one-row table is not a gallery's)."""
        return (
            [f"opened {p}" for p in self.gallery_files()]
            + [f"faiss.read_index {p}" for p in self.faiss]
            + [f"milvus {call} {name}" for call, name in self.milvus if _HOLDER.search(name)]
            + [f"lancedb {call} {name}" for call, name in self.lance if _HOLDER.search(name)]
        )


def _recording(real: Callable[..., Any], record: Callable[..., None]) -> Callable[..., Any]:
    @functools.wraps(real)
    def spy(*args: Any, **kwargs: Any) -> Any:
        record(*args, **kwargs)
        return real(*args, **kwargs)

    return spy


@contextlib.contextmanager
def store_reads() -> Iterator[Reads]:
    """Record reads of gallery rows while the block runs (:class:`Reads`); every real method still runs."""
    import faiss
    import lancedb.table
    import pymilvus

    reads = Reads()

    def opened(file: Any, *_: Any, **__: Any) -> None:
        if isinstance(file, str | Path):
            reads.opened.append(Path(file))

    def milvus(call: str) -> Callable[..., None]:
        def record(_self: Any, name: Any = "", *_: Any, **kw: Any) -> None:
            reads.milvus.append((call, str(kw.get("collection_name", name))))

        return record

    def lance(call: str) -> Callable[..., None]:
        def record(table: Any, *_: Any, **__: Any) -> None:
            reads.lance.append((call, str(table.name)))

        return record

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(builtins, "open", _recording(builtins.open, opened))
        mp.setattr(io, "open", _recording(io.open, opened))
        mp.setattr(faiss, "read_index", _recording(faiss.read_index, lambda path, *_: reads.faiss.append(str(path))))
        for call in MILVUS_ROW_CALLS:
            real = getattr(pymilvus.MilvusClient, call)
            mp.setattr(pymilvus.MilvusClient, call, _recording(real, milvus(call)))
        for call in LANCE_ROW_CALLS:
            real = getattr(lancedb.table.LanceTable, call)
            mp.setattr(lancedb.table.LanceTable, call, _recording(real, lance(call)))
        yield reads
