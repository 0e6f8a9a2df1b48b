"""``gallery.store: milvus`` — each gallery version a Milvus collection, the live gallery a Milvus alias.

One code path for Milvus Lite (``gallery.uri``: a local file, the embedded file-backed Milvus of the
``milvus-lite`` package) and a Milvus server or cluster (``http://host:19530``). A gallery version's vectors are the
collection ``<gallery.name>_g<N>_v<k>`` (``_corpus`` for a serving corpus): one row per item — ``id`` (primary
key), ``generation`` (the stamp), ``model`` (the model that embedded it) and ``vector`` (unit rows for cosine; the
proxy rows [2⁻⁸·g_t, g_s] of Lorentz points, searched by L2 and re-ranked by the exact Lorentz product). The
collection's property ``bctflow.facts`` records its generation, geometry, curvature, width and the stamps it accepts,
so a write checks them without bctflow's files.

:meth:`MilvusStore.build` upserts every part (a rerun after a kill ends with one row per id), flushes, builds the
index of ``gallery.index_options`` (``index_type`` HNSW (default) | IVF_FLAT | FLAT; ``M``, ``efConstruction``,
``ef``; ``nlist``, ``nprobe``; ``rerank``: candidates per neighbour re-scored in float64), loads it, measures recall@10
against exact search and writes the attachment ``manifest.json`` (:class:`~components.indexing.backend.
StoreManifest`). The live alias ``<gallery.name>_live`` is moved by :meth:`MilvusStore.point_alias` (Milvus
``alter_alias``), only to a collection of a generation the lineage knows. Refused with one line, nothing changed:
a write of another width or geometry, of an unaccepted generation, into the live collection, or into a collection
that does not exist.

The connection — one client per URI, a Milvus Lite file's server log, an index build waited for — is
:mod:`components.indexing.stores.milvus_client`.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from components.errors import ConfigError, IndexIntegrityError
from components.geometry import Space
from components.indexing.backend import StoreManifest, register_store
from components.indexing.db_index import (
    DatabaseIndex,
    DatabaseStore,
    alias_name,
    facts_of,
    gallery_rows,
    l2_metric,
    measure_recall,
    query_rows,
    space_of,
    stored_rows,
)
from components.indexing.index_config import IndexConfig
from components.indexing.parts import GalleryParts, StoredPart
from components.indexing.stores.milvus_client import client, create_index, forget, may_miss, release, server_log

__all__ = ["MilvusStore", "queries_per_call"]

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


def queries_per_call(limit: int, dim: int) -> int:
    """Queries per search call: at most ``_BATCH``, and few enough that the reply's ``limit`` stored vectors of
    width ``dim`` per query stay under ``_REPLY_BYTES`` (a corpus's top-101 metrics, re-ranked 4×, asked 2048
    queries for 430 MB)."""
    return max(1, min(_BATCH, _REPLY_BYTES // (max(1, limit) * (4 * dim + 64))))


def _metric(space: Space) -> str:
    return "L2" if l2_metric(space) else "IP"


@register_store("milvus")
class MilvusStore(DatabaseStore):
    """A Milvus (Lite file or server) holding one collection per gallery version."""

    name = "milvus"
    holder = "Milvus collection"

    # ------------------------------------------------------------- connection
    def check(self) -> None:
        try:
            import pymilvus  # noqa: F401
        except ImportError:
            raise ConfigError(f"gallery.store milvus needs the pymilvus package: {_INSTALL}") from None
        if not self.uri:
            raise ConfigError(
                "gallery.store milvus needs gallery.uri: a Milvus Lite file (e.g. milvus.db) or http://host:19530"
            )
        if "://" not in self.uri:
            try:
                import milvus_lite  # noqa: F401
            except ImportError:
                raise ConfigError(f"gallery.uri {self.uri} is a Milvus Lite file, which needs: {_INSTALL}") from None
        try:
            self._db().list_collections()
        except Exception as err:  # any failure to answer is one line
            forget(str(self.uri))
            first = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
            log = "" if "://" in str(self.uri) else f" (its server's log: {server_log(self.uri)})"
            raise ConfigError(
                f"the Milvus at gallery.uri {self.uri} does not answer ({first}); start it or fix gallery.uri{log}"
            ) from None

    def _db(self) -> Any:
        if not self.uri:
            raise ConfigError("gallery.store milvus needs gallery.uri (a Milvus Lite file or http://host:19530)")
        return client(str(self.uri), float(self._opt("timeout")))

    def close(self) -> None:
        release(str(self.uri))

    def _opt(self, key: str) -> Any:
        return self.options.get(key, _DEFAULTS[key])

    # ---------------------------------------------------------------- writes
    def _facts(self, collection: str) -> dict[str, Any]:
        """What the collection's description records; IndexIntegrityError for a collection that does not exist."""
        db = self._db()
        try:  # one call where the collection exists: asked whether only after
            with may_miss():
                described = db.describe_collection(collection)
        except Exception:
            if db.has_collection(collection):
                raise
            raise IndexIntegrityError(
                f"the Milvus collection {collection} does not exist at {self.uri}; build the gallery version first "
                "(bctflow run / backfill), or restore the Milvus data"
            ) from None
        return json.loads(described["properties"][_FACTS])

    def _create(self, collection: str, facts: dict[str, Any]) -> None:
        from pymilvus import DataType, MilvusClient

        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("generation", DataType.INT64)
        schema.add_field("model", DataType.VARCHAR, max_length=64)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=int(facts["dim"]))
        self._db().create_collection(collection, schema=schema, properties={_FACTS: json.dumps(facts)})

    def live_collection(self, prefix_of: str) -> str | None:
        """The collection the live alias of ``prefix_of``'s collections names (None: no alias yet)."""
        alias, db = alias_name(prefix_of), self._db()
        try:  # one call where the alias exists; its absence confirmed only after
            with may_miss():
                return str(db.describe_alias(alias)["collection_name"])
        except Exception:
            if alias in db.list_aliases().get("aliases", []):
                raise
            return None

    def write(self, collection: str, part: StoredPart, model: str = "") -> None:
        """Upsert the stamped rows of ``part`` into ``collection`` by id. Refused with one line, nothing written:
        the collection does not exist, is the live one, or the rows are of another width or geometry, or stamped
        with a generation it does not accept (:func:`~components.indexing.db_index.stored_rows`)."""
        facts = self._facts(collection)
        live = self.live_collection(collection) == collection
        rows = stored_rows(f"Milvus collection {collection}", facts, part, live=live)
        g = part.gallery
        db = self._db()
        for start in range(0, len(rows), _BATCH):
            sl = slice(start, start + _BATCH)
            gens, ids = part.stamps[sl].tolist(), g.ids[sl].tolist()
            mark = [model if s == facts["generation"] else f"g{s}" for s in gens]
            db.upsert(
                collection,
                [{"id": i, "generation": s, "model": m, "vector": v} for i, s, m, v in zip(ids, gens, mark, rows[sl])],
            )

    def build(
        self,
        parts: GalleryParts,
        out: Path,
        *,
        collection: str,
        generation: int,
        config: IndexConfig,
        compatible: list[int] | None = None,
    ) -> DatabaseIndex:
        t0 = time.perf_counter()
        db = self._db()
        stamps = parts.column("stamps")
        facts = facts_of(parts, generation)
        if db.has_collection(collection):
            if self.live_collection(collection) == collection:
                raise IndexIntegrityError(
                    f"the Milvus collection {collection} is the live gallery and is never rebuilt; delete the folder "
                    f"{out.parent} that names it only after the live alias has moved on"
                )
            if self._facts(collection) != facts:  # a leftover of an unfinished build for other rows: start over
                db.drop_collection(collection)
        if not db.has_collection(collection):
            self._create(collection, facts)
        written = self._write_parts(parts, collection)
        db.flush(collection)
        counts = self._counts(collection, facts["accepts"])
        if sum(counts.values()) != len(parts):  # rows of another gallery a killed build left: write it again
            db.drop_collection(collection)
            return self.build(parts, out, collection=collection, generation=generation, config=config,
                              compatible=compatible)  # fmt: skip
        self._index(collection)
        gens, n = np.unique(stamps, return_counts=True)
        manifest = StoreManifest(
            store=self.name, uri=str(self.uri), collection=collection, generation=int(generation),
            geometry=facts["geometry"], curvature=facts["curvature"], dim=facts["dim"], count=len(parts),
            counts_by_generation={int(g): int(c) for g, c in zip(gens, n)}, index_type=self._opt("index_type"),
            params={k: self._opt(k) for k in _DEFAULTS},
            compatible_generations=tuple(int(g) for g in (compatible or [generation])),
            extra={"options": self.options, "alias": alias_name(collection), **written},
        )  # fmt: skip
        index = self._searchable(manifest)
        measured = measure_recall(index, parts, config.recall_queries)
        replace(measured, build_seconds=time.perf_counter() - t0).save(Path(out))
        return self.open(out)

    def _index(self, collection: str) -> None:
        db = self._db()
        kind = str(self._opt("index_type")).upper()
        params = {"HNSW": {"M": self._opt("M"), "efConstruction": self._opt("efConstruction")},
                  "IVF_FLAT": {"nlist": self._opt("nlist")}}.get(kind, {})  # fmt: skip
        if db.list_indexes(collection):
            db.release_collection(collection)
            db.drop_index(collection, "vector")
        spec = db.prepare_index_params()
        metric = _metric(space_of(self._facts(collection)))
        spec.add_index("vector", index_type=kind, metric_type=metric, params=params)
        create_index(db, collection, spec, kind, metric)
        db.load_collection(collection)

    # ---------------------------------------------------------------- reads
    def _loaded(self, collection: str) -> Any:
        db = self._db()
        if db.list_indexes(collection):  # an indexed collection is released in a new process: load it to query
            db.load_collection(collection)
        return db

    def _total(self, collection: str, expect: int | None = None) -> int:
        """The collection's rows: confirmed from its statistics when they say ``expect`` (``get_collection_stats``:
        0.07-0.11 s at 100k rows, no load; exact after upserts and flushed deletes in Milvus Lite), else counted
        exactly (``count(*)``, which needs the collection loaded: its first touch in a new process took 0.5-1.0 s at
        100k rows in Milvus Lite). A Milvus server's statistics may still count deleted rows until compaction, so a
        deletion can pass this check there; ``bctflow doctor``'s exact counts per generation find it."""
        db = self._db()
        if expect is not None and int(db.get_collection_stats(collection)["row_count"]) == expect:
            return expect
        return int(self._loaded(collection).query(collection, filter="", output_fields=["count(*)"])[0]["count(*)"])

    def _columns(self, collection: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
        it = self._loaded(collection).query_iterator(collection, batch_size=_MAX_LIMIT, filter="",
                                                    output_fields=["id", "generation", "model"])  # fmt: skip
        ids, stamps, models = [], [], []
        while batch := it.next():
            ids += [r["id"] for r in batch]
            stamps += [r["generation"] for r in batch]
            models += [r["model"] for r in batch]
        it.close()
        return np.asarray(ids, dtype=np.int64), np.asarray(stamps, dtype=np.int64), models

    def _count(self, collection: str, generation: int) -> int:
        where = f"generation == {generation}"
        return int(self._loaded(collection).query(collection, filter=where, output_fields=["count(*)"])[0]["count(*)"])

    def _stamps_outside(self, collection: str, generations: list[int]) -> list[int]:
        rows = self._loaded(collection).query(collection, filter=f"generation not in {generations}",
                                              output_fields=["generation"], limit=_MAX_LIMIT)  # fmt: skip
        return [int(row["generation"]) for row in rows]

    def _searchable(self, manifest: StoreManifest) -> DatabaseIndex:
        kind = str(manifest.params.get("index_type", "HNSW")).upper()
        ef, nprobe = int(manifest.params.get("ef", 128)), int(manifest.params.get("nprobe", 16))
        rerank = int(manifest.params.get("rerank", 1))
        db = self._loaded(manifest.collection)  # a new process finds it released (Milvus Lite: "call load()")

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
    def point_alias(self, out: Path, known_generations: tuple[int, ...] | list[int]) -> None:
        m = self._alias_target(out, known_generations)
        alias, db = alias_name(m.collection), self._db()
        try:  # one call where the alias exists (every move but the first)
            with may_miss():
                db.alter_alias(m.collection, alias)
        except Exception:
            if alias in db.list_aliases().get("aliases", []):
                raise
            db.create_alias(m.collection, alias)

    def drop(self, out: Path) -> None:
        try:
            m = StoreManifest.load(Path(out))
        except IndexIntegrityError:
            return  # nothing attached: nothing to drop
        if self._db().has_collection(m.collection) and not self.aliased(out):
            self._db().drop_collection(m.collection)
