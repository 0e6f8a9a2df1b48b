"""Ctrl-C and SIGTERM end a command at once, with one line, and take its child processes with them.

Without this, a SIGINT to the process group also killed Prefect's temporary API server, and the
flow then retried the dead API for over a minute, printing hundreds of traceback lines; a SIGTERM
to the command alone left that server running as an orphan. Here the first SIGINT / SIGTERM:

1. ignores further signals (a second Ctrl-C cannot interrupt the cleanup);
2. prints one line saying what happens to the work (staged training resumes on the same command);
3. terminates every descendant process (Prefect's server, DataLoader workers), waits up to 3 s,
   kills what is left;
4. exits with 128 + the signal number, skipping Python's shutdown (whose atexit hooks would talk
   to the dead server).

Prefect's flow engine swaps in its own SIGTERM bridge while a flow runs (it turns SIGTERM into a
crash report sent to the API — which a group signal has just killed, hence the hang); that bridge
serves runner-driven cancellation of deployed runs, which a `bctflow` command is not, so the
console script disables it (``prefect.flow_engine.capture_sigterm``; a test catches a Prefect
release that moves it). It does so the moment Prefect's flow engine is imported, not before: a
command that runs no flow (``--version``, ``--help``, ``lineage``) never imports Prefect.

A kill at any moment is what the lifecycle is built to survive (training and backfills resume,
commits are transactional), so stopping mid-step loses at most that step's progress.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from importlib.machinery import ModuleSpec
from types import FrameType, ModuleType

from components.processes import stop_descendants

__all__ = ["install_interrupt_handlers"]

_FLOW_ENGINE = "prefect.flow_engine"


def _handler(signum: int, _frame: FrameType | None) -> None:
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)
    name = signal.Signals(signum).name
    sys.stderr.write(f"bctflow: stopped by {name}; staged work is kept — run the same command again to resume it\n")
    sys.stderr.flush()
    stop_descendants()
    os._exit(128 + signum)


@contextlib.contextmanager
def _keep_our_sigterm() -> Iterator[None]:
    yield


class _AfterImport:
    """A one-shot finder at the head of ``sys.meta_path``: the module ``name``, executed by its own loader, then
    handed to ``then``."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.name, self.then = name, then

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)  # the module as the other finders find it
        if spec is None or spec.loader is None:
            return None
        execute = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            self.then(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]  (this spec's own loader)
        return spec


def _after_import(name: str, then: Callable[[ModuleType], None]) -> None:
    """``then(module)`` once the module ``name`` is imported: now if it already is, else right after its import."""
    if name in sys.modules:
        then(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, then))


def _keep_our_signals(flow_engine: ModuleType) -> None:
    flow_engine.capture_sigterm = _keep_our_sigterm  # type: ignore[attr-defined]  (see the module docstring)


def install_interrupt_handlers() -> None:
    """Route SIGINT and SIGTERM of this (main) process to the handler above, for the whole command (Prefect's flow
    engine keeps them when a flow runs)."""
    _after_import(_FLOW_ENGINE, _keep_our_signals)
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _handler)
