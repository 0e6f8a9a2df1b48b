"""``gallery.store: lancedb`` — each gallery version a LanceDB table, the live gallery a versioned alias table.

``gallery.uri``: a folder (relative: in the workspace) or an object-store URI (``s3://bucket/path``) that
``lancedb.connect`` opens. A gallery version's vectors are the table ``<gallery.name>_g<N>_v<k>`` (``_corpus`` for a
serving corpus): one row per item — ``id``, ``generation`` (the stamp), ``model`` and ``vector`` (unit rows for
cosine; for Lorentz the proxy rows [2⁻⁸·g_t, g_s], searched by L2 and re-ranked by the exact Lorentz product,
docs/design.md §8.4). The table's schema metadata ``bctflow.facts`` records its generation, geometry, curvature,
width and accepted stamps, so a write is checked without bctflow's files.

A table (:class:`LanceTable`) is built by writing every part by ``merge_insert`` on ``id`` (an upsert: a rerun after a
kill ends with one row per id) and building the index of ``gallery.index_options`` (``index_type`` IVF_HNSW_SQ
(default) | IVF_FLAT | IVF_PQ | FLAT; ``num_partitions``, ``nprobes``, ``refine_factor``, ``rerank``); the recall@10
against exact search is measured and the attachment ``manifest.json`` written — the build, checks and alias rules
every database store shares (:mod:`components.indexing.stores.database`). The live alias is the one-row table
``<gallery.name>_live`` (collection, generation), rewritten at each move — each move a new version of that table, its
history the alias's — and the live table's version is tagged ``live``. The table's version when its build ends is
recorded in the attachment: a switch to it compares that number, and counts the rows only where it moved. Refused
with one line, nothing written: a write of another width or geometry, of an unaccepted stamp, into the live table or
a table that does not exist.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from components.errors import IndexIntegrityError
from components.geometry import Space
from components.indexing.backend import register_store
from components.indexing.stores.database import DatabaseCollection, DatabaseStore
from components.indexing.stores.db_index import DatabaseIndex, StoreManifest
from components.indexing.stores.db_rows import GALLERY_ROW, alias_name, gallery_rows, l2_metric, query_rows
from components.indexing.vectors import pq_subvectors

__all__ = ["LanceStore", "LanceTable"]

_DEFAULTS: dict[str, Any] = {"index_type": "IVF_HNSW_SQ", "num_partitions": None, "nprobes": 16}
_DEFAULTS |= {"refine_factor": 4, "rerank": 4, "num_sub_vectors": None}
_FACTS = "bctflow.facts"
#: a vector index needs this many rows to train; smaller tables are searched exhaustively (exact)
_MIN_INDEXED = 512
_BATCH = 1024
_INSTALL = "pip install lancedb (or bctflow[stores])"


def _ranks(rows: np.ndarray) -> np.ndarray:
    """Each hit's rank within its query's hits: ``rows`` (n,) the query of each hit, each query's hits contiguous."""
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]]) if len(rows) else np.zeros(0, dtype=np.int64)
    return np.arange(len(rows)) - np.repeat(starts, np.diff(np.r_[starts, len(rows)]))


def _distance(space: Space) -> str:
    return "l2" if l2_metric(space) else "dot"


def _arrow_type(kind: str, dim: int) -> Any:
    """The Arrow type of a gallery row's column of ``kind`` (vectors of width ``dim``)."""
    import pyarrow as pa

    return {"int64": pa.int64(), "string": pa.string(), "vector": pa.list_(pa.float32(), dim)}[kind]


def _kind(t: Any) -> str:
    """The gallery row's kind of the Arrow type ``t`` (its own name where it is none of them)."""
    import pyarrow as pa

    if pa.types.is_fixed_size_list(t) and pa.types.is_float32(t.value_type):
        return "vector"
    return {pa.int64(): "int64", pa.string(): "string"}.get(t, str(t))


def _schema(facts: dict[str, Any]) -> Any:
    """The table's Arrow schema: :data:`~components.indexing.stores.db_rows.GALLERY_ROW`, its facts as metadata."""
    import pyarrow as pa

    fields = [pa.field(f.name, _arrow_type(f.kind, int(facts["dim"]))) for f in GALLERY_ROW]
    return pa.schema(fields, metadata={_FACTS: json.dumps(facts)})


class LanceTable(DatabaseCollection):
    """One gallery version's LanceDB table."""

    store: LanceStore

    def _table(self) -> Any:
        return self.store._db().open_table(self.name)

    def _exists(self) -> bool:
        return self.name in self.store._tables()

    def _described(self) -> tuple[dict[str, Any], dict[str, str]]:
        if not self._exists():
            raise IndexIntegrityError(
                f"the LanceDB table {self.name} does not exist at {self.store.uri}; build the gallery version first "
                "(bctflow run / backfill), or restore the LanceDB data"
            )
        schema = self._table().schema
        return json.loads(schema.metadata[_FACTS.encode()]), {f.name: _kind(f.type) for f in schema}

    def _create(self, facts: dict[str, Any]) -> None:
        self.store._db().create_table(self.name, schema=_schema(facts))

    def _remove(self) -> None:
        self.store._db().drop_table(self.name)

    def _arrow(self, ids: np.ndarray, stamps: np.ndarray, marks: list[str], rows: np.ndarray, schema: Any) -> Any:
        """Prepared rows as a pyarrow table of the holder's ``schema``."""
        import pyarrow as pa

        vectors = pa.FixedSizeListArray.from_arrays(pa.array(rows.ravel()), rows.shape[1])
        return pa.table({"id": ids, "generation": stamps, "model": marks, "vector": vectors}, schema=schema)

    def _upsert(self, ids: np.ndarray, stamps: np.ndarray, marks: list[str], rows: np.ndarray) -> None:
        t = self._table()
        data = self._arrow(ids, stamps, marks, rows, t.schema)
        t.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(data)

    def _append(self, rows: list[tuple[np.ndarray, np.ndarray, list[str], np.ndarray]]) -> None:
        """One ``add`` of every prepared part as a stream of Arrow record batches: Lance writes the data files, then
        commits one table version (a SIGKILL before the commit leaves the table as it was)."""
        import pyarrow as pa

        t = self._table()
        schema = t.schema
        batches = (b for r in rows for b in self._arrow(*r, schema).to_batches())
        t.add(pa.RecordBatchReader.from_batches(schema, batches))

    def _marks(self, ids: list[int]) -> dict[int, str]:
        got = self._table().search().where(f"id IN ({', '.join(map(str, ids))})").select(["id", "model"])
        res = got.limit(None).to_arrow()
        return dict(zip(res["id"].to_pylist(), res["model"].to_pylist()))

    def _index(self, space: Space, n: int) -> tuple[str, dict[str, Any]]:
        """Build the vector index (none below ``_MIN_INDEXED`` rows: exhaustive search); the type built."""
        from lancedb.index import IvfFlat, IvfHnswSq, IvfPq

        opt = self.store._opt
        kind = str(opt("index_type")).upper()
        if kind != "FLAT" and n >= _MIN_INDEXED:
            parts = int(opt("num_partitions") or max(1, round(math.sqrt(n) / 4)))
            make = {"IVF_HNSW_SQ": IvfHnswSq, "IVF_FLAT": IvfFlat, "IVF_PQ": IvfPq}[kind]
            config = {"distance_type": _distance(space), "num_partitions": parts}
            if kind == "IVF_PQ":  # LanceDB's own default is one sub-vector where the width is not a multiple of 8
                config["num_sub_vectors"] = int(opt("num_sub_vectors") or pq_subvectors(int(self._facts()["dim"])))
            self._table().create_index("vector", config=make(**config), replace=True)
        else:
            kind = "FLAT"
        return kind, {k: opt(k) for k in _DEFAULTS} | {"index_type": kind}

    def _total(self, expect: int | None = None) -> int:
        return int(self._table().count_rows())

    def _columns(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        rows = self._table().search().select(["id", "generation", "model"]).limit(None).to_arrow()
        ids, stamps = rows["id"].to_numpy(), rows["generation"].to_numpy()
        return ids.astype(np.int64), stamps.astype(np.int64), rows["model"].to_pylist()

    def _count(self, generation: int) -> int:
        return int(self._table().count_rows(f"generation = {generation}"))

    def _stamps_outside(self, generations: list[int]) -> list[int]:
        others = self._table().search().where(f"generation NOT IN ({', '.join(map(str, generations))})")
        return [int(g) for g in others.select(["generation"]).limit(None).to_arrow()["generation"].to_pylist()]

    def _searchable(self, manifest: StoreManifest) -> DatabaseIndex:
        t = self._table()
        nprobes, refine = int(manifest.params.get("nprobes", 16)), int(manifest.params.get("refine_factor", 4))
        distance, indexed = _distance(manifest.space), manifest.index_type != "FLAT"

        def fetch(q: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
            ids = np.full((len(q), limit), -1, dtype=np.int64)
            vecs = np.zeros((len(q), limit, manifest.dim), dtype=np.float32)
            for start in range(0, len(q), _BATCH):
                search = t.search(query_rows(q[start : start + _BATCH], manifest.space)).distance_type(distance)
                if indexed:
                    search = search.nprobes(nprobes).refine_factor(refine)
                res = search.limit(limit).select(["id", "vector", "_distance"]).to_arrow()  # _distance: LanceDB's own
                rows = res["query_index"].to_numpy() + start if "query_index" in res.column_names else None
                rows = np.full(res.num_rows, start) if rows is None else rows
                found, stored = res["id"].to_numpy(), np.stack(res["vector"].to_numpy(zero_copy_only=False))
                rank = _ranks(rows)
                ids[rows, rank], vecs[rows, rank] = found, stored
            return ids, gallery_rows(vecs, manifest.space)

        return DatabaseIndex(manifest, fetch, int(manifest.params.get("rerank", 1)))

    def _holder_state(self) -> dict[str, Any]:
        """The table's version: every write (add, merge_insert, delete, update, index, compaction) makes a new one,
        and opening the table reads its latest manifest, not its rows; tags (the ``live`` tag of an alias move) are
        not versions."""
        return {"version": int(self._table().version)}

    def _move_alias(self) -> None:
        import pyarrow as pa

        db, alias = self.store._db(), alias_name(self.name)
        row = pa.table({"collection": [self.name], "generation": [int(self.manifest.generation)]})
        if alias in self.store._tables():
            db.open_table(alias).add(row, mode="overwrite")
        else:
            db.create_table(alias, data=row)
        table = self._table()
        tags = table.tags.list()
        (table.tags.update if "live" in tags else table.tags.create)("live", table.version)


@register_store("lancedb")
class LanceStore(DatabaseStore):
    """A LanceDB database (a folder or object-store URI) holding one table per gallery version; connected once."""

    name = "lancedb"
    holder = "LanceDB table"
    package = "lancedb"
    install = _INSTALL
    uri_forms = "a folder (e.g. lance) or s3://bucket/path"
    collection_type = LanceTable

    def __init__(self, uri: str | None = None, options: dict[str, Any] | None = None) -> None:
        super().__init__(uri, options)
        self._connection: Any = None

    def _answer(self) -> None:
        self._tables()

    def _unanswered(self, first: str) -> str:
        return f"LanceDB cannot open gallery.uri {self.uri} ({first}); fix gallery.uri"

    def _db(self) -> Any:
        if self._connection is None:
            import lancedb

            self._connection = lancedb.connect(self._uri())
        return self._connection

    def _tables(self) -> list[str]:
        listed = self._db().list_tables()
        return list(getattr(listed, "tables", listed))

    def _opt(self, key: str) -> Any:
        return self.options.get(key, _DEFAULTS[key])

    def live_collection(self, like: str) -> str | None:
        """The table the live alias of ``like``'s tables names (None: no alias yet)."""
        alias = alias_name(like)
        if alias not in self._tables():
            return None
        rows = self._db().open_table(alias).to_arrow()
        return str(rows["collection"][0].as_py()) if rows.num_rows else None
