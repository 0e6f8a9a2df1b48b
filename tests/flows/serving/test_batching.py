"""Dynamic batching: concurrent queries answered in one call, a failed item failing alone, versions never mixed."""

from __future__ import annotations

import asyncio

from flows.serving.batching import DynamicBatcher, batch


def _double(version: str, items: list[int]) -> list[int | Exception]:
    return [ValueError(f"{x} is negative") if x < 0 else 2 * x for x in items]


def _gather(*submits: tuple[str, int]) -> tuple[list[int | BaseException], list[int]]:
    """Submit concurrently to a batcher (50 ms window); (each item's answer or exception, the batch sizes)."""
    sizes: list[int] = []

    async def go() -> list[int | BaseException]:
        batcher = DynamicBatcher(_double, max_batch=8, max_wait_ms=50, on_batch=sizes.append)
        batcher.start()
        try:
            return await asyncio.gather(*(batcher.submit(v, x) for v, x in submits), return_exceptions=True)
        finally:
            await batcher.stop()

    return asyncio.run(go()), sizes


def test_a_bad_item_fails_alone_and_its_batch_answers_the_rest():
    answers, sizes = _gather(("v1", 1), ("v1", -1), ("v1", 3))
    assert sizes == [3]  # one call for the three concurrent items
    assert answers[0] == 2 and answers[2] == 6
    assert isinstance(answers[1], ValueError) and "-1 is negative" in str(answers[1])


def test_a_batch_never_mixes_versions():
    answers, sizes = _gather(("v1", 1), ("v2", 2), ("v1", 3))
    assert answers == [2, 4, 6]
    assert sorted(sizes) == [1, 2]  # v1's two items together, v2's alone


def test_max_batch_bounds_a_batch():
    max_batch = 2
    sizes: list[int] = []

    async def go() -> list[int]:
        batcher = DynamicBatcher(_double, max_batch=max_batch, max_wait_ms=50, on_batch=sizes.append)
        batcher.start()
        try:
            return await asyncio.gather(*(batcher.submit("v", x) for x in range(5)))
        finally:
            await batcher.stop()

    assert asyncio.run(go()) == [0, 2, 4, 6, 8]
    assert max(sizes) <= max_batch and sum(sizes) == 5


def test_stages_run_in_order_and_the_next_batch_is_embedded_while_the_last_is_searched():
    """Two stages in threads of their own: every answer passes through both; a failing second stage fails its batch
    alone."""
    import threading

    seen: dict[str, set[str]] = {"first": set(), "second": set()}

    def first(version: str, items: list[int]) -> list[int]:
        seen["first"].add(threading.current_thread().name)
        return [x + 1 for x in items]

    def second(version: str, state: list[int]) -> list[int]:
        seen["second"].add(threading.current_thread().name)
        if version == "bad":
            raise RuntimeError("search failed")
        return [10 * x for x in state]

    async def go() -> list[int | BaseException]:
        batcher = DynamicBatcher(first, second, max_batch=4, max_wait_ms=20, name="t")
        batcher.start()
        try:
            subs = [batcher.submit("v", x) for x in range(6)] + [batcher.submit("bad", 7)]
            return await asyncio.gather(*subs, return_exceptions=True)
        finally:
            await batcher.stop()

    answers = asyncio.run(go())
    assert answers[:6] == [10 * (x + 1) for x in range(6)]
    assert isinstance(answers[6], RuntimeError)
    assert seen["first"].isdisjoint(seen["second"]) and all(len(v) == 1 for v in seen.values())


def test_a_batched_function_is_awaited_per_request_and_called_once_per_batch():
    """`@batch` (Ray Serve's `@serve.batch` shape): the per-batch function, decorated, is awaited with one item and
    answers that item; concurrent awaits share one call, its later stages (`then`) in order."""
    calls: list[list[int]] = []

    @batch(max_batch=8, max_wait_ms=50, then=(lambda version, state: [f"{version}:{x}" for x in state],))
    def double(version: str, items: list[int]) -> list[int]:
        calls.append(list(items))
        return [2 * x for x in items]

    async def go() -> list[str]:
        double.start()
        try:
            return await asyncio.gather(*(double("v", x) for x in (1, 2, 3)))
        finally:
            await double.stop()

    assert asyncio.run(go()) == ["v:2", "v:4", "v:6"]
    assert calls == [[1, 2, 3]]
