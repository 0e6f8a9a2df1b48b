"""Zero-downtime swaps: a new live version is loaded beside the serving one and switched in by one reference
assignment.

The manager notices a new version by polling ``live/CURRENT`` and the lineage (the live pointer row, the production
generation) every ``serve.watch_interval_s`` (:meth:`SwapManager.watch`), or on ``POST /admin/reload``. Loading runs
in a low-priority thread of its own (SCHED_IDLE on Linux); a request holds the version it started on until it answers
(counted: :meth:`SwapManager.acquire`), so in-flight requests finish on it, and the old version's index and models are
let go of in the loader (logged) once they have answered. A load that fails (a corrupt index, a checksum that is not the
lineage's pin, a missing model) leaves the old version serving; the error is kept for ``/health`` and logged, and
the same pointer is not retried until it changes or a reload is asked for.

A switch commits the lineage's pointer row first and rewrites ``live/CURRENT`` from it after (docs/commit-protocol.md).
A service that reads between the two finds CURRENT lagging the lineage
(:class:`~flows.serving.version.LiveSwitchPending`): that is a switch in progress, not a failure — the old version
keeps serving, ``/health`` says ``switch_pending`` and every watch looks again — until it has lasted
``serve.switch_grace_s``; then it is reported as a failed reload. So any number of services (replicas) over one
workspace each swap on every switch, each on its own watch, sharing nothing but read-only files and lineage reads
(docs/serving.md, "Replicas").
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from components.errors import BctflowError
from flows.params import Params
from flows.runtime.workspace import Workspace
from flows.serving.metrics import ServeMetrics
from flows.serving.version import LiveSwitchPending, ServedVersion, load_version, pointer_fingerprint

__all__ = ["SwapManager"]

log = logging.getLogger("bctflow.serve")

#: seconds the loader waits for in-flight requests to let go of a replaced version before dropping it anyway
RETIRE_WAIT_S = 10.0
#: the interpreter's thread switch interval while a version loads (seconds; Python's default is 0.005): the loader's
#: Python work (unpickling the models, reading the stamps, the lineage's queries) hands the GIL back to a waiting
#: request thread within this time instead of 5 ms
LOAD_SWITCH_INTERVAL_S = 0.0005


@contextlib.contextmanager
def _short_gil_turns() -> Iterator[None]:
    """Shorter turns of the GIL while the block runs (:data:`LOAD_SWITCH_INTERVAL_S`; the setting is the process's)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, LOAD_SWITCH_INTERVAL_S))
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _low_priority() -> None:
    """The loader thread yields the CPU to the request threads: Linux's SCHED_IDLE (it runs on a core nothing else
    wants), else nice 10 (a thread's nice value is its own), else the default priority. At nice 10 the loader's FAISS
    read and model unpickling still took the forward's core for 75–80 ms a batch in a swap (20–29 involuntary switches
    of the forward thread, swap ÷ steady p99 up to 1.50); under SCHED_IDLE none did
    (benchmarks/results/serve/README.md)."""
    tid = threading.get_native_id()
    try:
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    except (OSError, AttributeError):  # not Linux, or not allowed
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, tid, 10)


class SwapManager:
    """Holds the serving version and swaps in new ones."""

    def __init__(self, ws: Workspace, params: Params, metrics: ServeMetrics, *, device: str) -> None:
        self.ws, self.params, self.metrics, self.device = ws, params, metrics, device
        self.current: ServedVersion | None = None
        self.last_error: str | None = None
        self.lineage_reachable = True
        self._lock = threading.Lock()  # one reload at a time
        self._count_lock = threading.Lock()  # the versions' in-flight counts
        self._loaded_key: str | None = None
        self._failed_key: str | None = None
        #: the key whose CURRENT lags the lineage, and since when (time.monotonic())
        self._lagging: tuple[str, float] | None = None
        self._store: Any = None
        self.loader = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="bctflow-serve-load", initializer=_low_priority
        )

    def key(self) -> str:
        """What identifies the live version: CURRENT's bytes and the lineage's pointer row, production generation
        and newest bridge."""
        try:
            if self._store is None:
                self._store = self.ws.lineage(self.params, readonly=True)
            ptr, prod = self._store.live_pointer(), self._store.production_generation_id()
            bridge = self._store.newest_bridge_id()  # a new adapter serves on reload
            self.lineage_reachable = True
        except Exception as err:  # an unreachable lineage is reported in /health, not raised
            self.lineage_reachable = False
            self._store = None
            log.warning("the lineage is not reachable: %s", err)
            return self._loaded_key or ""
        return f"{pointer_fingerprint(self.ws)}:{ptr.id if ptr else None}:{prod}:{bridge}"

    def reload(self, *, force: bool = False) -> dict[str, Any]:
        """Load the live version if it changed (or ``force``) and swap it in; a failure keeps the old one. The old
        version is let go of here, once no request holds it (see :func:`retire`)."""
        retiring: list[ServedVersion] = []
        with _short_gil_turns():  # the requests keep their latency while the loader works
            result = self._swap(force, retiring)
            for old in retiring:
                self.retire(old)
        # The long-lived objects (modules, models, indexes: millions) move to the collector's permanent generation:
        # a full collection walking them held the GIL for 769 ms in the middle of a reload, every request stalled
        # (measured by a gc callback during `bench serve`'s swap). Freed versions go by reference counting.
        gc.freeze()
        return result

    def acquire(self) -> ServedVersion:
        """The serving version, counted as in use by one more request until :meth:`release`."""
        with self._count_lock:
            v = self.current
            assert v is not None, "no version loaded"
            v.in_flight += 1
            return v

    def release(self, v: ServedVersion) -> None:
        with self._count_lock:
            v.in_flight -= 1

    def retire(self, old: ServedVersion) -> None:
        """Release a replaced version here, in the low-priority loader, once the requests that started on it have
        answered (it is no longer current, so none starts on it). After ``RETIRE_WAIT_S`` it is left to the garbage
        collector and a warning logged."""
        deadline = time.monotonic() + RETIRE_WAIT_S
        while time.monotonic() < deadline:
            with self._count_lock:
                if old.in_flight == 0:
                    old.release()
                    log.info("version %d released: no request holds it", old.number)
                    return
            time.sleep(0.01)
        log.warning("version %d still answers %d requests after %g s", old.number, old.in_flight, RETIRE_WAIT_S)

    def _swap(self, force: bool, retiring: list[ServedVersion]) -> dict[str, Any]:
        with self._lock:
            key = self.key()
            if not force and key in (self._loaded_key, self._failed_key):
                return {"swapped": False, "version": self.describe(), "error": self.last_error}
            t0 = time.perf_counter()
            try:
                merge = self.params.serve.merge
                new = load_version(self.ws, self.params, device=self.device, merge=merge, store=self._store)
            except LiveSwitchPending as err:
                if self.current is None:  # nothing serves yet: nothing to wait with
                    return self._failed(key, err, str(err))
                if self._within_grace(key):
                    return {"swapped": False, "version": self.describe(), "error": None}
                grace = self.params.serve.switch_grace_s
                return self._failed(key, err, f"{err} (still after serve.switch_grace_s, {grace:g} s)")
            except (BctflowError, OSError, ValueError, RuntimeError) as err:
                return self._failed(key, err, str(err))
            old, self.current = self.current, new  # the swap: one reference assignment
            self._loaded_key, self._failed_key, self.last_error, self._lagging = key, None, None, None
            self.metrics.swaps.inc()
            self.metrics.version.set(new.number)
            log.info(
                "serving version %d (gallery generation %d, queries of %s) loaded in %.2f s",
                new.number,
                new.facts.generation,
                list(new.facts.compatible),
                time.perf_counter() - t0,
            )
            if old is not None:
                retiring.append(old)
            return {"swapped": True, "version": self.describe(), "error": None}

    def _failed(self, key: str, err: Exception, why: str) -> dict[str, Any]:
        """Record a failed load of ``key`` (``why``: kept for ``/health``, counted, logged; not retried until the key
        changes); ``err`` raised when no version serves yet (the service does not start)."""
        self._failed_key, self._lagging = key, None
        self.last_error = f"the new live version was not loaded, version {self._number()} keeps serving: {why}"
        self.metrics.swap_failures.inc()
        log.error("%s", self.last_error)
        if self.current is None:
            raise err
        return {"swapped": False, "version": self.describe(), "error": self.last_error}

    def _within_grace(self, key: str) -> bool:
        """Whether CURRENT has lagged the lineage (for ``key``) for less than ``serve.switch_grace_s`` (logged once,
        when first seen: the old version keeps serving and every watch looks again)."""
        now = time.monotonic()
        if self._lagging is None or self._lagging[0] != key:
            self._lagging = (key, now)
            log.info(
                "live/CURRENT does not name the lineage's new live index yet (a switch between its commit and its "
                "roll-forward): version %s keeps serving and looks again every %g s, for up to %g s",
                self._number(),
                self.params.serve.watch_interval_s,
                self.params.serve.switch_grace_s,
            )
        return now - self._lagging[1] < self.params.serve.switch_grace_s

    def switch_pending(self) -> str | None:
        """While CURRENT lags the lineage within the grace: what the service waits for, in one line (else None)."""
        lagging = self._lagging  # None again once the version loaded or the lag was reported as a failure
        if lagging is None:
            return None
        waited = time.monotonic() - lagging[1]
        return (
            f"live/CURRENT does not name the live index the lineage's newest pointer row records yet ({waited:.1f} s "
            f"of serve.switch_grace_s {self.params.serve.switch_grace_s:g} s): a switch between its commit and its "
            f"roll-forward; version {self._number()} keeps serving"
        )

    def _number(self) -> int | None:
        return None if self.current is None else self.current.number

    def describe(self) -> dict[str, Any] | None:
        return None if self.current is None else self.current.describe()

    def changed(self) -> bool:
        """True when the live version differs from the served one (and did not already fail to load)."""
        key = self.key()
        return key not in (self._loaded_key, self._failed_key)

    async def watch(self) -> None:
        """Every ``serve.watch_interval_s``, swap in the live version if it changed, in the loader thread (runs until
        cancelled; a failed load is reported by :meth:`reload`, never fatal)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.params.serve.watch_interval_s)
            with contextlib.suppress(Exception):
                if await loop.run_in_executor(self.loader, self.changed):
                    await loop.run_in_executor(self.loader, self.reload)

    def close(self) -> None:
        self.loader.shutdown(wait=False, cancel_futures=True)
        if self._store is not None:
            self._store.close()
