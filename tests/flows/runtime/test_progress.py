"""Progress bars and log lines on one rich console (flows/runtime/progress.py): on a terminal a log line prints above a
drawn
bar, whole, instead of over it; Prefect's console handler is replaced by rich's RichHandler on that console."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator

import pytest
from rich.console import Console
from rich.logging import RichHandler

from flows.runtime.progress import CONSOLE, progress_bar, use_rich_logging

_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _screen(stream: str) -> list[str]:
    """The terminal's lines after ``stream``: a carriage return starts its line again (the bar redraws itself so)."""
    lines = [_CONTROL.sub("", line.split("\r")[-1]).rstrip() for line in stream.split("\n")]
    return [line for line in lines if line]


def _terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=100, color_system=None), out


@pytest.fixture
def root_handlers() -> Iterator[logging.Logger]:
    """The root logger, its handlers restored after the test."""
    root = logging.getLogger()
    saved = root.handlers[:]
    yield root
    root.handlers[:] = saved


def _log_during_a_bar(console: Console) -> None:
    log = logging.getLogger("bctflow.test_progress")
    log.setLevel(logging.INFO)
    with progress_bar("g1 model: training", 4, enabled=True, console=console) as bar:
        bar.update(1, 4)
        log.warning("a log line while the bar is drawn")
        bar(1)


def test_a_log_line_prints_above_the_bar_not_over_it(root_handlers):
    console, out = _terminal()
    handler = use_rich_logging(enabled=True, console=console)
    assert isinstance(handler, RichHandler) and handler.console is console
    _log_during_a_bar(console)
    screen = _screen(out.getvalue())
    (line,) = [s for s in screen if "a log line while the bar is drawn" in s]
    assert "WARNING" in line and "bctflow.test_progress - a log line" in line and "g1 model" not in line
    assert screen[-1].startswith("g1 model: training") and "2/4" in screen[-1]  # the bar, drawn again below


def test_a_bar_of_unknown_length_takes_its_total_later_and_nothing_to_do_draws_none():
    console, out = _terminal()
    with progress_bar("backfill chunks", None, enabled=True, console=console) as bar:
        bar.update(3, 5)  # the total, once known
    last = _screen(out.getvalue())[-1]
    assert last.startswith("backfill chunks") and "3/5" in last
    console, out = _terminal()
    with progress_bar("nothing to embed", 0, enabled=True, console=console) as bar:
        bar(1)
        bar.update(1, 1)
    assert out.getvalue() == ""


def test_prefects_console_handler_is_replaced_once(root_handlers):
    from prefect.logging.handlers import PrefectConsoleHandler

    root_handlers.addHandler(PrefectConsoleHandler())
    handler = use_rich_logging(enabled=True)
    assert handler is not None and handler.console is CONSOLE
    assert use_rich_logging(enabled=True) is handler  # twice: the same one handler
    assert [type(h) for h in root_handlers.handlers if isinstance(h, (RichHandler, PrefectConsoleHandler))] == [
        RichHandler
    ]


def test_prefects_logging_setup_keeps_a_handler_installed_before_it(root_handlers):
    """The console script installs it before Prefect configures logging; Prefect then leaves the root logger be."""
    from prefect.logging.configuration import setup_logging
    from prefect.logging.handlers import PrefectConsoleHandler

    root_handlers.handlers[:] = []
    handler = use_rich_logging(enabled=True)
    setup_logging(incremental=False)
    assert handler in root_handlers.handlers
    assert not any(isinstance(h, PrefectConsoleHandler) for h in root_handlers.handlers)


def test_run_log_lines_name_their_task_or_flow_run(root_handlers):
    console, out = _terminal()
    use_rich_logging(enabled=True, console=console)
    log = logging.getLogger("bctflow.test_progress")  # the run names as Prefect's run loggers add them to records
    log.setLevel(logging.INFO)
    log.info("[model] epoch 1/2 loss=1.000", extra={"task_run_name": "train-7c1", "flow_run_name": "brave-fox"})
    log.info("Finished", extra={"flow_run_name": "brave-fox"})
    text = " ".join(_screen(out.getvalue()))
    assert "Task run 'train-7c1' - [model] epoch 1/2 loss=1.000" in text
    assert "Flow run 'brave-fox' - Finished" in text


def test_off_a_terminal_nothing_changes(root_handlers):
    before = root_handlers.handlers[:]
    assert use_rich_logging(enabled=False) is None and root_handlers.handlers == before
    with progress_bar("no bar", 3, enabled=False) as bar:
        bar(2)
        bar.update(3, 3)
