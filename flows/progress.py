"""Progress bars for long operations (training epochs, embedding, backfill chunks).

Shown on an interactive terminal only; in CI logs and tests the log lines carry
the same information and the bar is a no-op.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

__all__ = ["progress_bar"]


@contextlib.contextmanager
def progress_bar(description: str, total: int, enabled: bool | None = None) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n=1)``; draws a rich progress bar on stderr when it is a terminal."""
    show = sys.stderr.isatty() if enabled is None else enabled
    if not show or total <= 0:
        yield lambda n=1: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class _ItemsPerSecond(ProgressColumn):
        def render(self, task) -> Text:  # type: ignore[no-untyped-def]
            speed = task.finished_speed or task.speed
            return Text("" if speed is None else f"{speed:,.0f}/s")

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _ItemsPerSecond(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=False,
    ) as prog:
        task = prog.add_task(description, total=total)
        yield lambda n=1: prog.advance(task, n)
