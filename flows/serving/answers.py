"""A served version's answers, batched: each query kind's per-batch function (flows/serving/queries.py) behind
:func:`~flows.serving.batching.batch`, so a request awaits its own answer and concurrent ones share a call.

Image queries wait up to ``serve.max_wait_ms`` for others, then are decoded and embedded in one thread and searched in
a second (the next batch is embedded while the last is searched). Vector queries wait on no timer: a batch is whatever
arrived while the last search ran (a FAISS call shares too little across queries to pay for a wait).
"""

from __future__ import annotations

from typing import Any

from flows.params.serve import ServeParams
from flows.serving.batching import batch
from flows.serving.metrics import ServeMetrics
from flows.serving.queries import ImageQuery, answer_vectors, embed_images, search_images
from flows.serving.version import ServedVersion

__all__ = ["Answers"]


class Answers:
    """``await answers.image(version, query)`` and ``await answers.vector(version, query)``: one query's hits (a dict)
    or the QueryError it deserves, raised; :meth:`start` on the serving event loop, :meth:`stop` at shutdown."""

    def __init__(self, params: ServeParams, metrics: ServeMetrics) -> None:
        merge, max_pixels = params.merge, params.max_pixels

        @batch(
            max_batch=params.max_batch,
            max_wait_ms=params.max_wait_ms,
            then=(search_images,),
            on_batch=metrics.batch.labels("image").observe,
            name="image",
        )
        def image(version: ServedVersion, queries: list[ImageQuery]) -> Any:
            return embed_images(version, queries, merge, max_pixels)

        self.image = image
        self.vector = batch(max_batch=params.max_batch, on_batch=metrics.batch.labels("vector").observe, name="vector")(
            answer_vectors
        )

    def start(self) -> None:
        self.image.start()
        self.vector.start()

    async def stop(self) -> None:
        await self.image.stop()
        await self.vector.stop()
