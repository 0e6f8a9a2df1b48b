"""The service's request and response bodies as pydantic models: the OpenAPI document's schemas (docs/openapi.json)
and the typed answers of the routes off the query path (``/health``, ``/generations``, ``/admin/reload``).

The query routes (``POST /search``, ``POST /search/batch``) read and write these shapes by hand (orjson and the checks
of flows/serving/queries.py, which give every refusal its own status and one line: docs/bad-inputs.md): validating a
vector query with :class:`VectorSearch` on top of them, and its answer with :class:`Hits`, cost about 6 µs each — 3%
each of the service's CPU per vector query (benchmarks/results/serve/README.md).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "BatchHits",
    "BatchSearch",
    "Bridge",
    "Error",
    "Generations",
    "Health",
    "Hits",
    "ImageSearch",
    "LiveGallery",
    "Reload",
    "Route",
    "VectorSearch",
    "Version",
]

_K = Field(10, ge=1, description="how many neighbours: 1 to serve.max_k")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class VectorSearch(_Body):
    """A query vector, as generation ``generation``'s model embedded it."""

    vector: list[float] = Field(description="the query's embedding: the live gallery's width, finite, not all zeros")
    generation: int = Field(description="the generation whose model embedded the vector")
    k: int = _K


class ImageSearch(_Body):
    """A query image in JSON: its file's bytes (PNG, JPEG, BMP, WebP or a uint8 .npy) as base64."""

    image: str = Field(description="the image file's bytes, base64")
    k: int = _K


class BatchSearch(_Body):
    """Up to serve.max_queries queries answered together; an entry's own ``k`` wins over the batch's."""

    queries: list[VectorSearch | ImageSearch] = Field(min_length=1)
    k: int = _K


class Version(_Body):
    """The served version that answered: live/CURRENT's version, the gallery's generation, its index."""

    version: int
    gallery_generation: int
    index: str = Field(description="the serving index, relative to the workspace")
    compatible_generations: list[int] = Field(description="the generations whose queries the gallery serves")


class Bridge(_Body):
    """One fitted map between two generations' spaces (a query adapter, or a gallery transform)."""

    from_: int = Field(alias="from")
    to: int
    kind: str
    version: int
    sha256: str


class Route(_Body):
    """How a generation's queries reach the gallery: the generations its adapter chain passes through, each map."""

    generations: list[int]
    maps: list[Bridge]


class Hits(_Body):
    """One query's ranked hits, best first (fewer than ``k`` when the gallery holds fewer)."""

    ids: list[int]
    scores: list[float | None] = Field(description="each hit's score; null where it is not finite")
    generations: list[int] = Field(description="the generation stamp of each hit's gallery vector")
    query_generation: int | list[int] = Field(
        description="the generation that embedded the query; with serve.merge: rank over a mixed gallery, each one"
    )
    answered_by: Version
    carried_by: list[Bridge | None] | None = Field(
        None, description="only when a gallery transform carried rows: each hit's map (null: embedded by its model)"
    )
    query_route: Route | None = Field(None, description="only when query adapters carried the query")


class BatchHits(_Body):
    """Each query's hits, in the order asked, all from one version."""

    results: list[Hits]
    answered_by: Version


class Error(_Body):
    """A refused request (4xx) or a fault of the service (500): one line naming the problem and the fix."""

    error: str


class Health(_Body):
    """Liveness and readiness (503 until a version is loaded)."""

    live: bool
    ready: bool
    version: Version | None
    lineage_reachable: bool
    last_reload_error: str | None = Field(description="why the last reload failed (the old version keeps serving)")
    switch_pending: str | None = Field(
        None,
        description="live/CURRENT lags the lineage's newest pointer row (a switch between its commit and its "
        "roll-forward) for less than serve.switch_grace_s: what the service waits for (the old version keeps serving)",
    )


class LiveGallery(Version):
    generation_mix: dict[str, int] = Field(description="gallery items per generation stamp")


class Generations(_Body):
    """What the live gallery is and which queries it serves."""

    live_gallery: LiveGallery
    production_generation: int | None
    image_queries_embedded_by: int
    compatible_generations: list[int]
    adapted_generations: dict[str, Route] = Field(description="generations served through query adapters")
    lineage_generations: list[int]
    merge: Literal["none", "rank"]


class Reload(_Body):
    """A reload's outcome: 200 swapped or unchanged; 409 the new version failed and the old one keeps serving."""

    swapped: bool
    version: Version | None
    error: str | None
