"""Dynamic batching: concurrent queries collected (up to ``max_batch`` of them) and answered in one call — one forward
pass for image queries, one FAISS search for vectors. A query waits at most ``max_wait_ms`` from its arrival for others
to join it (default 0: no timer): the queries that arrived while the previous batch ran go at once with whatever else
is queued, so under load a batch is whatever came in during the last one.

A batch runs through one or more *stages*, each in a thread of its own (the event loop keeps accepting requests):
image queries are decoded and embedded in the first, searched in the second, so the search of one batch runs while the
next is embedded — the forward pass, the work a batch cannot share, never waits for a search. Each query is submitted
with the version it started on; a batch holds the queries of one version only, so a swap never mixes versions inside
a batch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["DynamicBatcher", "batch"]

_Entry = tuple[Any, Any, asyncio.Future, float]  # (version, item, its caller's future, arrival time)


class DynamicBatcher:
    """Answers ``submit(version, item)`` through ``stages``: the first is called as ``stage(version, items)`` on a
    batch of concurrent items, each next one on its predecessor's result, ``stage(version, result)``; the last returns
    one answer per item. An answer that is an exception is raised to that item's caller alone; a stage that raises
    fails its batch's callers."""

    def __init__(
        self,
        *stages: Callable[[Any, Any], Any],
        max_batch: int,
        max_wait_ms: float,
        on_batch: Callable[[int], None] | None = None,
        name: str = "batch",
    ) -> None:
        if not stages:
            raise ValueError("a batcher needs at least one stage")
        self._stages = stages
        self._name = name
        self._max_batch = max_batch
        self._max_wait = max_wait_ms / 1000.0
        self._on_batch = on_batch
        self._queue: asyncio.Queue[_Entry] | None = None
        self._worker: asyncio.Task | None = None
        self._pools: list[ThreadPoolExecutor] = []
        self._later: set[asyncio.Task] = set()

    def start(self) -> None:
        """Start the batching loop on the running event loop (and one thread per stage)."""
        self._queue = asyncio.Queue()
        prefix = f"bctflow-serve-{self._name}"
        self._pools = [ThreadPoolExecutor(1, thread_name_prefix=f"{prefix}-{i}") for i in range(len(self._stages))]
        self._worker = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, *self._later, return_exceptions=True)
        for pool in self._pools:
            pool.shutdown(wait=False, cancel_futures=True)

    async def submit(self, version: Any, item: Any) -> Any:
        """The answer to ``item`` on ``version`` (the exception a stage raised for its batch, if any)."""
        assert self._queue is not None, "start() the batcher first"
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((version, item, fut, time.perf_counter()))  # unbounded: put never waits
        return await fut

    __call__ = submit  # a batched function is awaited per request: ``await answer(version, item)``

    async def _collect(self) -> list[_Entry]:
        assert self._queue is not None
        batch = [await self._queue.get()]
        deadline = batch[0][3] + self._max_wait  # from the first query's arrival
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
            await self._dispatch(await self._collect())

    async def _dispatch(self, batch: list[_Entry]) -> None:
        """Each version's queries of ``batch`` through the first stage (the next batch is collected once it is free),
        then on through the others in the background. (A method of its own: between batches the loop holds no
        version, so a replaced one can be let go of.)"""
        loop = asyncio.get_running_loop()
        groups: dict[int, list[_Entry]] = {}
        for entry in batch:
            groups.setdefault(id(entry[0]), []).append(entry)
        for group in groups.values():
            version = group[0][0]
            if self._on_batch is not None:
                self._on_batch(len(group))
            try:
                state = await loop.run_in_executor(self._pools[0], self._stages[0], version, [e[1] for e in group])
            except Exception as err:
                _fail(group, err)
                continue
            if len(self._stages) == 1:
                _answer(group, state)
                continue
            task = loop.create_task(self._rest(group, version, state))
            self._later.add(task)
            task.add_done_callback(self._later.discard)

    async def _rest(self, group: list[_Entry], version: Any, state: Any) -> None:
        """The stages after the first, each in its own thread, in batch order."""
        loop = asyncio.get_running_loop()
        try:
            for stage, pool in zip(self._stages[1:], self._pools[1:]):
                state = await loop.run_in_executor(pool, stage, version, state)
        except Exception as err:
            _fail(group, err)
            return
        _answer(group, state)


def _fail(group: list[_Entry], err: Exception) -> None:
    """The batch's callers get the error; the loop keeps serving."""
    for _, _, fut, _ in group:
        if not fut.done():
            fut.set_exception(err)


def _answer(group: list[_Entry], answers: list[Any]) -> None:
    for (_, _, fut, _), answer in zip(group, answers):
        if fut.done():
            continue
        if isinstance(answer, Exception):
            fut.set_exception(answer)
        else:
            fut.set_result(answer)


def batch(
    *,
    max_batch: int,
    max_wait_ms: float = 0.0,
    then: Sequence[Callable[[Any, Any], Any]] = (),
    on_batch: Callable[[int], None] | None = None,
    name: str = "batch",
) -> Callable[[Callable[[Any, Any], Any]], DynamicBatcher]:
    """Ray Serve's ``@serve.batch`` shape: a per-batch function ``f(version, items) -> answers`` (one per item)
    decorated into a per-request awaitable, ``await f(version, item)`` — concurrent calls batched as
    :class:`DynamicBatcher` batches them, ``then`` its later stages (each in a thread of its own). The result is the
    batcher: ``start()`` it on the serving event loop, ``await stop()`` it at shutdown."""

    def wrap(first: Callable[[Any, Any], Any]) -> DynamicBatcher:
        return DynamicBatcher(first, *then, max_batch=max_batch, max_wait_ms=max_wait_ms, on_batch=on_batch, name=name)

    return wrap
