"""Dynamic batching: concurrent queries collected for up to ``max_wait_ms`` (or ``max_batch`` of them) and answered
in one call — one forward pass for image queries, one FAISS search for vectors.

Each query is submitted with the version it started on; a batch holds the queries of one version only, so a swap
never mixes versions inside a batch. The batch runs in a worker thread (the event loop keeps accepting requests);
while it runs the next batch fills up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

__all__ = ["DynamicBatcher"]


class DynamicBatcher:
    """Answers ``submit(version, item)`` by calling ``run(version, items)`` on batches of concurrent items; an
    answer that is an exception is raised to that item's caller alone."""

    def __init__(
        self,
        run: Callable[[Any, list[Any]], list[Any]],
        *,
        max_batch: int,
        max_wait_ms: float,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        self._run = run
        self._max_batch = max_batch
        self._max_wait = max_wait_ms / 1000.0
        self._on_batch = on_batch
        self._queue: asyncio.Queue[tuple[Any, Any, asyncio.Future]] | None = None
        self._worker: asyncio.Task | None = None

    def start(self) -> None:
        """Start the batching loop on the running event loop."""
        self._queue = asyncio.Queue()
        self._worker = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)

    async def submit(self, version: Any, item: Any) -> Any:
        """The answer to ``item`` on ``version`` (the exception ``run`` raised for its batch, if any)."""
        assert self._queue is not None, "start() the batcher first"
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        await self._queue.put((version, item, fut))
        return await fut

    async def _collect(self) -> list[tuple[Any, Any, asyncio.Future]]:
        assert self._queue is not None
        batch = [await self._queue.get()]
        deadline = time.perf_counter() + self._max_wait
        while len(batch) < self._max_batch:
            try:
                batch.append(self._queue.get_nowait())
                continue
            except asyncio.QueueEmpty:
                pass
            left = deadline - time.perf_counter()
            if left <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(self._queue.get(), left))
            except TimeoutError:
                break
        return batch

    async def _loop(self) -> None:
        while True:
            batch = await self._collect()
            groups: dict[int, list[tuple[Any, Any, asyncio.Future]]] = {}
            for entry in batch:
                groups.setdefault(id(entry[0]), []).append(entry)
            for group in groups.values():
                version = group[0][0]
                if self._on_batch is not None:
                    self._on_batch(len(group))
                try:
                    answers = await asyncio.to_thread(self._run, version, [item for _, item, _ in group])
                except Exception as err:  # the batch's callers get the error; the loop keeps serving
                    for _, _, fut in group:
                        if not fut.done():
                            fut.set_exception(err)
                    continue
                for (_, _, fut), answer in zip(group, answers):
                    if fut.done():
                        continue
                    if isinstance(answer, Exception):
                        fut.set_exception(answer)
                    else:
                        fut.set_result(answer)
