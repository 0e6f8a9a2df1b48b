"""The rows a database store holds (docs/design.md §8.4): one declared gallery-row schema, and the rows written,
searched and given back in it.

Every database store (``milvus``, ``lancedb``) holds a gallery version as one collection / table of
:data:`GALLERY_ROW` rows: ``id`` (the item's id; a write is an upsert by it), ``generation`` (the stamp: the
generation whose space the row is in), ``model`` (the model that embedded it, ``g<N>`` for a row of another
generation a partial backfill kept, '' in an assembled version) and ``vector`` (unit rows for cosine; for Lorentz the
proxy rows [2⁻⁸·g_t, g_s], searched by L2 and re-ranked by the exact Lorentz product, as the approximate indexes of
§8.3 do). Each store makes its schema from :data:`GALLERY_ROW` and checks a holder's columns against it when the
collection is opened (:func:`check_row_schema`). The holder also records its facts (:func:`facts_of`: generation,
geometry, curvature, width, accepted stamps), so a write is checked without bctflow's files (:func:`stored_rows`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from components.errors import IndexIntegrityError
from components.geometry import Space, create_space
from components.indexing.parts import GalleryParts, StoredPart
from components.indexing.vectors import LORENTZ_TIME_SCALE, lorentz_proxy_rows

__all__ = [
    "GALLERY_ROW",
    "MODEL_CHARS",
    "RowField",
    "alias_name",
    "check_row_schema",
    "facts_of",
    "gallery_rows",
    "l2_metric",
    "model_of",
    "query_rows",
    "row_kinds",
    "space_of",
    "stored_rows",
]


@dataclass(frozen=True)
class RowField:
    """One column of a gallery row: its ``name`` and ``kind`` — ``int64``, ``string`` (at most :data:`MODEL_CHARS`
    characters) or ``vector`` (float32, the version's width)."""

    name: str
    kind: str


#: the gallery row every database store holds, in this order; ``id`` is the primary key
GALLERY_ROW: tuple[RowField, ...] = (
    RowField("id", "int64"),
    RowField("generation", "int64"),
    RowField("model", "string"),
    RowField("vector", "vector"),
)
#: the longest ``model`` mark a row holds (``sha256:`` and 16 hex digits, or ``g<N>``)
MODEL_CHARS = 64


def row_kinds() -> dict[str, str]:
    """The declared row's columns: name → kind."""
    return {f.name: f.kind for f in GALLERY_ROW}


def check_row_schema(what: str, columns: dict[str, str]) -> None:
    """The holder ``what`` (its ``columns``: name → kind, as its database describes them) holds gallery rows;
    IndexIntegrityError in one line otherwise."""
    if columns != row_kinds():
        raise IndexIntegrityError(
            f"the {what} holds the columns {columns}, not bctflow's gallery rows {row_kinds()}; rebuild that gallery "
            "version (bctflow backfill), or point gallery.uri at bctflow's own store"
        )


_NAME = re.compile(r"^(?P<prefix>[A-Za-z_][A-Za-z0-9_]*?)_g\d+_v\d+(_corpus)?$")


def alias_name(collection: str) -> str:
    """The live alias of the versions named like ``collection`` (``<name>_g<N>_v<k>``): ``<name>_live``."""
    match = _NAME.match(collection)
    return f"{match.group('prefix') if match else collection}_live"


def facts_of(parts: GalleryParts, generation: int) -> dict:
    """What a database records with a version's table or collection: its generation, geometry, curvature, width and
    the stamps it accepts (the generation and every stamp ``parts`` holds: a partial backfill's mix)."""
    first = next(parts.parts()).gallery
    space = first.retrieval_space
    return {
        "generation": int(generation),
        "geometry": space.name,
        "curvature": space.curvature,
        "dim": int(first.vectors().shape[1]),
        "accepts": sorted({int(generation), *np.unique(parts.column("stamps")).tolist()}),
    }


def space_of(facts: dict) -> Space:
    """The space of a table or collection, from its :func:`facts_of` (its stored geometry and curvature)."""
    return create_space(facts["geometry"], facts["curvature"])


def model_of(parts: GalleryParts) -> str:
    """The model that embedded the store's own rows, from its ``producer.txt`` (``model sha256 <hex>; …``); ''
    when the store was assembled rather than embedded (a partial backfill's mix, a linked full backfill)."""
    mark = parts.path / "producer.txt"
    text = mark.read_text() if mark.is_file() else ""
    return f"sha256:{text.split()[2][:16]}" if text.startswith("model sha256 ") else ""


def l2_metric(space: Space) -> bool:
    """Whether the database ranks by L2: galleries whose similarity is indefinite (Lorentz), over the proxy rows
    [2⁻⁸·g_t, g_s] whose candidates are re-ranked by the exact Lorentz product (docs/design.md §8.3); cosine
    galleries rank by the inner product of unit rows."""
    return space.indefinite


def stored_rows(what: str, facts: dict, part: StoredPart, *, live: bool) -> np.ndarray:
    """The float32 rows a database stores for ``part`` in the table or collection ``what`` (whose ``facts`` are
    :func:`facts_of`'s). Refused with one line before anything is written: ``what`` is the live one, or the rows are
    of another width or geometry, or stamped with a generation it does not accept, or off its space."""
    if live:
        raise IndexIntegrityError(
            f"the {what} is the live gallery; a new gallery version is written to a new one (bctflow backfill), never "
            "into the live one"
        )
    g = part.gallery
    vectors = g.vectors()
    if vectors.shape[1] != facts["dim"] or g.retrieval_space.name != facts["geometry"]:
        raise IndexIntegrityError(
            f"rows of width {vectors.shape[1]} ({g.retrieval_space.name}) cannot be written into the {what} of width "
            f"{facts['dim']} ({facts['geometry']}); embed them with a model of its generation, or write them into a "
            "new gallery version"
        )
    stray = sorted(set(np.unique(part.stamps).tolist()) - set(facts["accepts"]))
    if stray:
        raise IndexIntegrityError(
            f"rows stamped with generation {stray[0]} cannot be written into the {what}, which holds generation "
            f"{facts['generation']}'s gallery (it accepts stamps {facts['accepts']}); backfill into a new gallery "
            "version instead"
        )
    space = space_of(facts)
    fix = "re-embed them with a model of its geometry"
    rows = space.checked(vectors, error=IndexIntegrityError, what="rows", fix=fix)
    return lorentz_proxy_rows(rows) if l2_metric(space) else rows.astype(np.float32)


def query_rows(q: np.ndarray, space: Space) -> np.ndarray:
    """What the database searches for checked float32 queries (in the space's query form: time negated for lorentz):
    unit rows, or the proxy of the query point itself (time sign restored)."""
    if not l2_metric(space):
        return q
    rows = lorentz_proxy_rows(q)
    rows[:, 0] = -rows[:, 0]
    return rows


def gallery_rows(stored: np.ndarray, space: Space) -> np.ndarray:
    """The gallery rows (…, D) back from the stored ones: exact, the proxy's time scale is a power of two."""
    if l2_metric(space):
        stored[..., 0] /= np.float32(LORENTZ_TIME_SCALE)
    return stored
