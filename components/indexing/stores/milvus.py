"""``gallery.store: milvus`` — each gallery version a Milvus collection, the live gallery a Milvus alias.

One code path for Milvus Lite (``gallery.uri``: a local file, the embedded file-backed Milvus of the
``milvus-lite`` package) and a Milvus server or cluster (``http://host:19530``). A gallery version's vectors are the
collection ``<gallery.name>_g<N>_v<k>`` (``_corpus`` for a serving corpus): one row per item — ``id`` (primary
key), ``generation`` (the stamp), ``model`` (the model that embedded it) and ``vector`` (unit rows for cosine; the
proxy rows [2⁻⁸·g_t, g_s] of Lorentz points, searched by L2 and re-ranked by the exact Lorentz product). The
collection's property ``bctflow.facts`` records its generation, geometry, curvature, width and the stamps it accepts,
so a write checks them without bctflow's files.

A collection (:class:`MilvusCollection`) is built by upserting every part (a rerun after a kill ends with one row per
id), flushing, building the index of ``gallery.index_options`` (``index_type`` HNSW (default) | IVF_FLAT | FLAT;
``M``, ``efConstruction``, ``ef``; ``nlist``, ``nprobe``; ``rerank``: candidates per neighbour re-scored in float64)
and loading it; the recall@10 against exact search is measured and the attachment ``manifest.json`` written — the
build, checks and alias rules every database store shares (:mod:`components.indexing.stores.database`). The live
alias ``<gallery.name>_live`` is moved by Milvus's ``alter_alias``, only to a collection of a generation the lineage
knows, after one description of it (its existence, facts and columns: no row count,
:meth:`MilvusCollection._holder_state`). Refused with one line, nothing changed: a write of another width or
geometry, of an unaccepted generation, into the live collection, or into a collection that does not exist.

The connection — one client per URI, a Milvus Lite file's server log, an index build waited for — is
:mod:`components.indexing.stores.milvus_client`.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from components.errors import IndexIntegrityError
from components.geometry import Space
from components.indexing.backend import register_store
from components.indexing.stores.database import DatabaseCollection, DatabaseStore
from components.indexing.stores.db_index import DatabaseIndex, StoreManifest
from components.indexing.stores.db_rows import GALLERY_ROW, MODEL_CHARS, alias_name, gallery_rows, l2_metric, query_rows
from components.indexing.stores.milvus_client import client, create_index, forget, may_miss, release, server_log

__all__ = ["MilvusCollection", "MilvusStore", "queries_per_call"]

_DEFAULTS: dict[str, Any] = {"index_type": "HNSW", "M": 16, "efConstruction": 200, "ef": 128, "nlist": 128}
_DEFAULTS |= {"nprobe": 16, "rerank": 4, "timeout": 10.0}
#: rows per upsert call and queries per search call
_BATCH = 2048
#: Milvus's largest top-k
_MAX_LIMIT = 16384
#: bytes of stored vectors one search reply may carry (gRPC refuses a message over 256 MiB)
_REPLY_BYTES = 64 << 20
_INSTALL = "pip install pymilvus milvus-lite (or bctflow[stores])"
#: the collection property that records its generation, geometry, curvature, width and accepted stamps
_FACTS = "bctflow.facts"
#: the gallery row's kinds as Milvus types (by name: pymilvus is imported only when a collection is made or read)
_TYPES = {"int64": "INT64", "string": "VARCHAR", "vector": "FLOAT_VECTOR"}


def queries_per_call(limit: int, dim: int) -> int:
    """Queries per search call: at most ``_BATCH``, and few enough that the reply's ``limit`` stored vectors of
    width ``dim`` per query stay under ``_REPLY_BYTES`` (a corpus's top-101 metrics, re-ranked 4×, asked 2048
    queries for 430 MB)."""
    return max(1, min(_BATCH, _REPLY_BYTES // (max(1, limit) * (4 * dim + 64))))


def _metric(space: Space) -> str:
    return "L2" if l2_metric(space) else "IP"


class MilvusCollection(DatabaseCollection):
    """One gallery version's Milvus collection."""

    store: MilvusStore

    def _exists(self) -> bool:
        return bool(self.store._db().has_collection(self.name))

    def _described(self) -> tuple[dict[str, Any], dict[str, str]]:
        """What the collection's description records, and its fields; one call where the collection exists."""
        db = self.store._db()
        try:  # asked whether it exists only after
            with may_miss():
                described = db.describe_collection(self.name)
        except Exception:
            if db.has_collection(self.name):
                raise
            raise IndexIntegrityError(
                f"the Milvus collection {self.name} does not exist at {self.store.uri}; build the gallery version "
                "first (bctflow run / backfill), or restore the Milvus data"
            ) from None
        kinds = {milvus: kind for kind, milvus in _TYPES.items()}
        columns = {
            f["name"]: kinds.get(getattr(f["type"], "name", str(f["type"])), str(f["type"]))
            for f in described["fields"]
        }
        return json.loads(described["properties"][_FACTS]), columns

    def _create(self, facts: dict[str, Any]) -> None:
        from pymilvus import DataType, MilvusClient

        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        for i, f in enumerate(GALLERY_ROW):
            width = {"string": {"max_length": MODEL_CHARS}, "vector": {"dim": int(facts["dim"])}}.get(f.kind, {})
            schema.add_field(f.name, getattr(DataType, _TYPES[f.kind]), is_primary=i == 0, **width)
        self.store._db().create_collection(self.name, schema=schema, properties={_FACTS: json.dumps(facts)})

    def _remove(self) -> None:
        self.store._db().drop_collection(self.name)

    def _upsert(self, ids: np.ndarray, stamps: np.ndarray, marks: list[str], rows: np.ndarray) -> None:
        db = self.store._db()
        for start in range(0, len(rows), _BATCH):
            sl = slice(start, start + _BATCH)
            batch = zip(ids[sl].tolist(), stamps[sl].tolist(), marks[sl], rows[sl])
            db.upsert(self.name, [{"id": i, "generation": s, "model": m, "vector": v} for i, s, m, v in batch])

    def _written(self, facts: dict[str, Any]) -> int:
        self.store._db().flush(self.name)
        return sum(self._counts(facts["accepts"]).values())

    def _index(self, space: Space, n: int) -> tuple[str, dict[str, Any]]:
        db, opt = self.store._db(), self.store._opt
        kind = str(opt("index_type")).upper()
        params = {"HNSW": {"M": opt("M"), "efConstruction": opt("efConstruction")},
                  "IVF_FLAT": {"nlist": opt("nlist")}}.get(kind, {})  # fmt: skip
        if db.list_indexes(self.name):
            db.release_collection(self.name)
            db.drop_index(self.name, "vector")
        spec = db.prepare_index_params()
        metric = _metric(space)
        spec.add_index("vector", index_type=kind, metric_type=metric, params=params)
        create_index(db, self.name, spec, kind, metric)
        db.load_collection(self.name)
        return opt("index_type"), {k: opt(k) for k in _DEFAULTS}

    # ---------------------------------------------------------------- reads
    def _loaded(self) -> Any:
        db = self.store._db()
        if db.list_indexes(self.name):  # an indexed collection is released in a new process: load it to query
            db.load_collection(self.name)
        return db

    def _total(self, expect: int | None = None) -> int:
        """The collection's rows: confirmed from its statistics when they say ``expect`` (``get_collection_stats``;
        exact after upserts and flushed deletes in Milvus Lite, where it walks every primary key, O(rows)), else
        counted exactly (``count(*)``, which needs the collection loaded). A Milvus
        server's statistics may still count deleted rows until compaction, so a deletion can pass this check there;
        ``bctflow doctor``'s exact counts per generation find it. Not asked at a switch
        (:meth:`_holder_state`)."""
        db = self.store._db()
        if expect is not None and int(db.get_collection_stats(self.name)["row_count"]) == expect:
            return expect
        return int(self._loaded().query(self.name, filter="", output_fields=["count(*)"])[0]["count(*)"])

    def _columns(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        it = self._loaded().query_iterator(self.name, batch_size=_MAX_LIMIT, filter="",
                                           output_fields=["id", "generation", "model"])  # fmt: skip
        ids, stamps, models = [], [], []
        while batch := it.next():
            ids += [r["id"] for r in batch]
            stamps += [r["generation"] for r in batch]
            models += [r["model"] for r in batch]
        it.close()
        return np.asarray(ids, dtype=np.int64), np.asarray(stamps, dtype=np.int64), models

    def _count(self, generation: int) -> int:
        where = f"generation == {generation}"
        return int(self._loaded().query(self.name, filter=where, output_fields=["count(*)"])[0]["count(*)"])

    def _stamps_outside(self, generations: list[int]) -> list[int]:
        rows = self._loaded().query(self.name, filter=f"generation not in {generations}",
                                    output_fields=["generation"], limit=_MAX_LIMIT)  # fmt: skip
        return [int(row["generation"]) for row in rows]

    def _searchable(self, manifest: StoreManifest) -> DatabaseIndex:
        kind = str(manifest.params.get("index_type", "HNSW")).upper()
        ef, nprobe = int(manifest.params.get("ef", 128)), int(manifest.params.get("nprobe", 16))
        rerank = int(manifest.params.get("rerank", 1))
        db = self._loaded()  # a new process finds it released (Milvus Lite: "call load()")

        metric = _metric(manifest.space)

        def fetch(q: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
            limit = min(limit, _MAX_LIMIT)
            search = {"HNSW": {"ef": max(ef, limit)}, "IVF_FLAT": {"nprobe": nprobe}}.get(kind, {})
            ids = np.full((len(q), limit), -1, dtype=np.int64)
            vecs = np.zeros((len(q), limit, manifest.dim), dtype=np.float32)
            step = queries_per_call(limit, manifest.dim)
            for start in range(0, len(q), step):
                hits = db.search(
                    manifest.collection,
                    data=query_rows(q[start : start + step], manifest.space).tolist(),
                    limit=limit,
                    search_params={"metric_type": metric, "params": search},
                    output_fields=["vector"],
                )
                for row, found in enumerate(hits, start):
                    for j, hit in enumerate(found):
                        ids[row, j] = hit["id"]
                        vecs[row, j] = hit["entity"]["vector"]
            return ids, gallery_rows(vecs, manifest.space)

        return DatabaseIndex(manifest, fetch, rerank)

    # ---------------------------------------------------------------- alias
    def _holder_state(self) -> dict[str, Any]:
        """Nothing: Milvus tells no state of a collection's rows in a call whose cost does not grow with them. Milvus
        Lite's statistics and index description count the rows by walking every primary key (milvus-lite's
        ``num_entities``, O(rows): the one statistics call per move made the alias move grow from 0.10 s at 100k
        rows to 0.95 s at 1M), and a server's statistics count deleted rows until compaction. A switch therefore
        checks the collection's existence, its ``bctflow.facts`` and its columns (``describe_collection``); rows
        deleted or rewritten since the build are found by the next open (the query service's load: the row total)
        and by ``bctflow doctor`` (rows per generation)."""
        return {}

    def _move_alias(self) -> None:
        alias, db = alias_name(self.name), self.store._db()
        try:  # one call where the alias exists (every move but the first)
            with may_miss():
                db.alter_alias(self.name, alias)
        except Exception:
            if alias in db.list_aliases().get("aliases", []):
                raise
            db.create_alias(self.name, alias)


@register_store("milvus")
class MilvusStore(DatabaseStore):
    """A Milvus (Lite file or server) holding one collection per gallery version: one client per URI and process."""

    name = "milvus"
    holder = "Milvus collection"
    package = "pymilvus"
    install = _INSTALL
    uri_forms = "a Milvus Lite file (e.g. milvus.db) or http://host:19530"
    collection_type = MilvusCollection

    def _check_local(self) -> None:
        if "://" not in str(self.uri):
            self._require("milvus_lite", f"gallery.uri {self.uri} is a Milvus Lite file, which needs")

    def _answer(self) -> None:
        self._db().list_collections()

    def _unanswered(self, first: str) -> str:
        forget(str(self.uri))
        log = "" if "://" in str(self.uri) else f" (its server's log: {server_log(self.uri)})"
        return f"the Milvus at gallery.uri {self.uri} does not answer ({first}); start it or fix gallery.uri{log}"

    def _db(self) -> Any:
        return client(self._uri(), float(self._opt("timeout")))

    def close(self) -> None:
        release(str(self.uri))

    def _opt(self, key: str) -> Any:
        return self.options.get(key, _DEFAULTS[key])

    def live_collection(self, like: str) -> str | None:
        """The collection the live alias of ``like``'s collections names (None: no alias yet)."""
        alias, db = alias_name(like), self._db()
        try:  # one call where the alias exists; its absence confirmed only after
            with may_miss():
                return str(db.describe_alias(alias)["collection_name"])
        except Exception:
            if alias in db.list_aliases().get("aliases", []):
                raise
            return None
