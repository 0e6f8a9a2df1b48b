"""``gallery.store: lancedb`` — each gallery version a LanceDB table, the live gallery a versioned alias table.

``gallery.uri``: a folder (relative: in the workspace) or an object-store URI (``s3://bucket/path``) that
``lancedb.connect`` opens. A gallery version's vectors are the table ``<gallery.name>_g<N>_v<k>`` (``_corpus`` for a
serving corpus): one row per item — ``id``, ``generation`` (the stamp), ``model`` and ``vector`` (unit rows for
cosine; for Lorentz the proxy rows [2⁻⁸·g_t, g_s], searched by L2 and re-ranked by the exact Lorentz product,
docs/design.md §8.4). The table's schema metadata ``bctflow.facts`` records its generation, geometry, curvature,
width and accepted stamps, so a write is checked without bctflow's files.

:meth:`LanceStore.build` writes every part by ``merge_insert`` on ``id`` (an upsert: a rerun after a kill ends with
one row per id), builds the index of ``gallery.index_options`` (``index_type`` IVF_HNSW_SQ (default) | IVF_FLAT |
IVF_PQ | FLAT; ``num_partitions``, ``nprobes``, ``refine_factor``, ``rerank``), measures recall@10 against exact
search and writes the attachment ``manifest.json``. The live alias is the one-row table ``<gallery.name>_live``
(collection, generation), rewritten by :meth:`LanceStore.point_alias` — each move a new version of that table, its
history the alias's — and the live table's version is tagged ``live``. Refused with one line, nothing written: a
write of another width or geometry, of an unaccepted stamp, into the live table or a table that does not exist.
"""

from __future__ import annotations

import json
import math
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

__all__ = ["LanceStore"]

_DEFAULTS: dict[str, Any] = {"index_type": "IVF_HNSW_SQ", "num_partitions": None, "nprobes": 16}
_DEFAULTS |= {"refine_factor": 4, "rerank": 4}
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


@register_store("lancedb")
class LanceStore(DatabaseStore):
    """A LanceDB database (a folder or object-store URI) holding one table per gallery version."""

    name = "lancedb"
    holder = "LanceDB table"

    def check(self) -> None:
        try:
            import lancedb  # noqa: F401
        except ImportError:
            raise ConfigError(f"gallery.store lancedb needs the lancedb package: {_INSTALL}") from None
        if not self.uri:
            raise ConfigError("gallery.store lancedb needs gallery.uri: a folder (e.g. lance) or s3://bucket/path")
        try:
            self._tables()
        except Exception as err:  # any failure to open is one line
            first = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
            raise ConfigError(f"LanceDB cannot open gallery.uri {self.uri} ({first}); fix gallery.uri") from None

    def _db(self) -> Any:
        import lancedb

        if not self.uri:
            raise ConfigError("gallery.store lancedb needs gallery.uri (a folder or s3://bucket/path)")
        return lancedb.connect(str(self.uri))

    def _tables(self) -> list[str]:
        listed = self._db().list_tables()
        return list(getattr(listed, "tables", listed))

    def _opt(self, key: str) -> Any:
        return self.options.get(key, _DEFAULTS[key])

    def _facts(self, table: str) -> dict[str, Any]:
        if table not in self._tables():
            raise IndexIntegrityError(
                f"the LanceDB table {table} does not exist at {self.uri}; build the gallery version first "
                "(bctflow run / backfill), or restore the LanceDB data"
            )
        return json.loads(self._db().open_table(table).schema.metadata[_FACTS.encode()])

    def live_collection(self, like: str) -> str | None:
        """The table the live alias of ``like``'s tables names (None: no alias yet)."""
        alias = alias_name(like)
        if alias not in self._tables():
            return None
        rows = self._db().open_table(alias).to_arrow()
        return str(rows["collection"][0].as_py()) if rows.num_rows else None

    def write(self, table: str, part: StoredPart, model: str = "") -> None:
        """Upsert the stamped rows of ``part`` into ``table`` by id; refused with one line, nothing written, as
        :func:`~components.indexing.db_index.stored_rows` says, or when the table does not exist."""
        import pyarrow as pa

        facts = self._facts(table)
        rows = stored_rows(f"LanceDB table {table}", facts, part, live=self.live_collection(table) == table)
        stamps = part.stamps.astype(np.int64)
        marks = [model if s == facts["generation"] else f"g{s}" for s in stamps.tolist()]
        data = pa.table(
            {
                "id": part.gallery.ids.astype(np.int64),
                "generation": stamps,
                "model": marks,
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(rows.ravel()), int(facts["dim"])),
            },
            schema=self._schema(facts),
        )
        t = self._db().open_table(table)
        t.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(data)

    @staticmethod
    def _schema(facts: dict[str, Any]) -> Any:
        import pyarrow as pa

        fields = [pa.field("id", pa.int64()), pa.field("generation", pa.int64()), pa.field("model", pa.string())]
        fields.append(pa.field("vector", pa.list_(pa.float32(), int(facts["dim"]))))
        return pa.schema(fields, metadata={_FACTS: json.dumps(facts)})

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
        facts = facts_of(parts, generation)
        if collection in self._tables():
            if self.live_collection(collection) == collection:
                raise IndexIntegrityError(
                    f"the LanceDB table {collection} is the live gallery and is never rebuilt; delete the folder "
                    f"{out.parent} that names it only after the live alias has moved on"
                )
            if self._facts(collection) != facts:  # a leftover of an unfinished build for other rows: start over
                self._db().drop_table(collection)
        if collection not in self._tables():
            self._db().create_table(collection, schema=self._schema(facts))
        written = self._write_parts(parts, collection)
        if self._db().open_table(collection).count_rows() != len(parts):  # rows a killed build of others left
            self._db().drop_table(collection)
            return self.build(parts, out, collection=collection, generation=generation, config=config,
                              compatible=compatible)  # fmt: skip
        kind = self._index(collection, space_of(facts), len(parts))
        stamps = parts.column("stamps")
        gens, n = np.unique(stamps, return_counts=True)
        manifest = StoreManifest(
            store=self.name, uri=str(self.uri), collection=collection, generation=int(generation),
            geometry=facts["geometry"], curvature=facts["curvature"], dim=facts["dim"], count=len(parts),
            counts_by_generation={int(g): int(c) for g, c in zip(gens, n)}, index_type=kind,
            params={k: self._opt(k) for k in _DEFAULTS} | {"index_type": kind},
            compatible_generations=tuple(int(g) for g in (compatible or [generation])),
            extra={"options": self.options, "alias": alias_name(collection), **written},
        )  # fmt: skip
        measured = measure_recall(self._searchable(manifest), parts, config.recall_queries)
        replace(measured, build_seconds=time.perf_counter() - t0).save(Path(out))
        return self.open(out)

    def _index(self, table: str, space: Space, n: int) -> str:
        """Build the vector index (none below ``_MIN_INDEXED`` rows: exhaustive search); the type built."""
        from lancedb.index import IvfFlat, IvfHnswSq, IvfPq

        kind = str(self._opt("index_type")).upper()
        if kind == "FLAT" or n < _MIN_INDEXED:
            return "FLAT"
        parts = int(self._opt("num_partitions") or max(1, round(math.sqrt(n) / 4)))
        make = {"IVF_HNSW_SQ": IvfHnswSq, "IVF_FLAT": IvfFlat, "IVF_PQ": IvfPq}[kind]
        t = self._db().open_table(table)
        t.create_index("vector", config=make(distance_type=_distance(space), num_partitions=parts), replace=True)
        return kind

    def _total(self, table: str, expect: int | None = None) -> int:
        return int(self._db().open_table(table).count_rows())

    def _columns(self, table: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
        rows = self._db().open_table(table).search().select(["id", "generation", "model"]).limit(None).to_arrow()
        ids, stamps = rows["id"].to_numpy(), rows["generation"].to_numpy()
        return ids.astype(np.int64), stamps.astype(np.int64), rows["model"].to_pylist()

    def _count(self, table: str, generation: int) -> int:
        return int(self._db().open_table(table).count_rows(f"generation = {generation}"))

    def _stamps_outside(self, table: str, generations: list[int]) -> list[int]:
        t = self._db().open_table(table)
        others = t.search().where(f"generation NOT IN ({', '.join(map(str, generations))})").select(["generation"])
        return [int(g) for g in others.limit(None).to_arrow()["generation"].to_pylist()]

    def _searchable(self, manifest: StoreManifest) -> DatabaseIndex:
        t = self._db().open_table(manifest.collection)
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

    def point_alias(self, out: Path, known_generations: tuple[int, ...] | list[int]) -> None:
        import pyarrow as pa

        m = self._alias_target(out, known_generations)
        db, alias = self._db(), alias_name(m.collection)
        row = pa.table({"collection": [m.collection], "generation": [int(m.generation)]})
        if alias in self._tables():
            db.open_table(alias).add(row, mode="overwrite")
        else:
            db.create_table(alias, data=row)
        table = db.open_table(m.collection)
        tags = table.tags.list()
        (table.tags.update if "live" in tags else table.tags.create)("live", table.version)

    def drop(self, out: Path) -> None:
        try:
            m = StoreManifest.load(Path(out))
        except IndexIntegrityError:
            return  # nothing attached: nothing to drop
        if m.collection in self._tables() and not self.aliased(out):
            self._db().drop_table(m.collection)
