"""Progress bars for long operations (training batches, embedding, backfill chunks), and the console's log lines.

Bars and log lines share one rich :data:`CONSOLE` (stderr): a log line printed while a bar is drawn goes above the
bar, which is drawn again below it, instead of over it. On a terminal, :func:`use_rich_logging` routes the console
log lines (Prefect's and bctflow's loggers, all of which reach the root logger) through rich's ``RichHandler`` on
that console. In CI logs and tests the bars are no-ops and the log lines carry the same information.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

from rich.console import Console
from rich.logging import RichHandler
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

__all__ = ["CONSOLE", "Bar", "progress_bar", "use_rich_logging"]

#: the one console of the progress bars and of the console log lines (stderr)
CONSOLE = Console(stderr=True)


class Bar:
    """What a :func:`progress_bar` block gets: ``bar(n)`` advances by n; ``bar.update(done, total)`` sets both
    (the training loop's ``on_step``). Without a drawn bar both do nothing."""

    def __init__(self, progress: Progress | None = None, task: int | None = None) -> None:
        self._progress, self._task = progress, task

    def __call__(self, n: int = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)  # type: ignore[arg-type]

    def update(self, done: int, total: int | None = None) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=done, total=total)  # type: ignore[arg-type]


class _ItemsPerSecond(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:,.0f}/s")


@contextlib.contextmanager
def progress_bar(
    description: str, total: int | None, enabled: bool | None = None, console: Console | None = None
) -> Iterator[Bar]:
    """A rich progress bar on ``console`` (default :data:`CONSOLE`) while the block runs, when stderr is a terminal.

    ``total`` None: not known yet (the bar pulses until a :meth:`Bar.update` gives it); 0: nothing to do, no bar.
    """
    show = sys.stderr.isatty() if enabled is None else enabled
    if not show or total == 0:
        yield Bar()
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _ItemsPerSecond(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console or CONSOLE,
        transient=False,
    ) as prog:
        yield Bar(prog, prog.add_task(description, total=total))


class _RunFormatter(logging.Formatter):
    """The message after the task or flow run it comes from (or the logger's name), as Prefect's console shows it;
    the time and level are RichHandler's columns."""

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        if getattr(record, "task_run_name", None):
            return f"Task run {record.task_run_name!r} - {message}"
        if getattr(record, "flow_run_name", None):
            return f"Flow run {record.flow_run_name!r} - {message}"
        return f"{record.name} - {message}"


def use_rich_logging(enabled: bool | None = None, console: Console | None = None) -> RichHandler | None:
    """On a terminal (or ``enabled``): the root logger prints through a ``RichHandler`` on ``console`` (default
    :data:`CONSOLE`), in place of Prefect's console handler; the handler, or None when not enabled.

    Installed before Prefect is imported, Prefect's logging setup keeps it (a root handler of the user's);
    installed after, it replaces Prefect's. Levels stay as Prefect sets them.
    """
    if not (sys.stderr.isatty() if enabled is None else enabled):
        return None
    target = console or CONSOLE
    root = logging.getLogger()
    for handler in list(root.handlers):
        if type(handler).__name__ == "PrefectConsoleHandler":  # (not imported: Prefect may not be loaded yet)
            root.removeHandler(handler)
        elif isinstance(handler, RichHandler) and handler.console is target:
            return handler
    handler = RichHandler(console=target, show_path=False, markup=False, log_time_format="%H:%M:%S")
    handler.setFormatter(_RunFormatter())
    root.addHandler(handler)
    return handler
