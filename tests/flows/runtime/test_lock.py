"""One writer per workspace: a second run is refused at once, naming the holder; the thread holding it re-enters."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from components.errors import LineageError
from flows.runtime.lock import workspace_lock


def test_a_second_writer_is_refused_with_the_holder_named(tmp_path: Path):
    with workspace_lock(tmp_path, "a backfill is running"):
        # another process tries the same workspace
        code = (
            "from flows.runtime.lock import workspace_lock\nfrom pathlib import Path\n"
            f"with workspace_lock(Path({str(tmp_path)!r}), 'x'): pass"
        )
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert res.returncode != 0
        assert "is busy" in res.stderr and "a backfill is running" in res.stderr
    with workspace_lock(tmp_path, "next"):  # released after the first holder finished
        pass


def test_the_lock_is_released_when_the_holder_fails(tmp_path: Path):
    with pytest.raises(RuntimeError), workspace_lock(tmp_path, "first"):
        raise RuntimeError("boom")
    with workspace_lock(tmp_path, "second"):
        pass


def test_the_holding_thread_re_enters_the_lock_and_another_thread_is_refused(tmp_path: Path):
    """A command holds its workspace from before its Prefect server starts, and the flow it runs in the same thread
    takes the lock again; another thread of the process is refused as another process is."""
    refused: list[BaseException] = []

    def other_thread() -> None:
        try:
            with workspace_lock(tmp_path, "another thread"):
                pass
        except LineageError as err:
            refused.append(err)

    with workspace_lock(tmp_path, "a new generation is being created"):
        with workspace_lock(tmp_path / ".", "the flow"):  # the same workspace, spelled otherwise
            thread = threading.Thread(target=other_thread)
            thread.start()
            thread.join()
        assert "a new generation is being created" in (tmp_path / ".lock").read_text()  # the outer holder's words
        thread = threading.Thread(target=other_thread)  # still held after the inner block
        thread.start()
        thread.join()
    assert len(refused) == 2 and all("is busy" in str(e) for e in refused)
    with workspace_lock(tmp_path, "next"):  # released by the outer block
        pass


def test_workspaces_sharing_a_postgresql_lineage_serialise_through_the_database(tmp_path: Path, pg_cluster):
    url = pg_cluster.new_database()
    with (
        workspace_lock(tmp_path / "a", "a new generation is being created", url),
        pytest.raises(LineageError, match=r"is busy: another bctflow run .* holds its lock"),
        workspace_lock(tmp_path / "b", "a backfill is running", url),
    ):
        pass
    with workspace_lock(tmp_path / "b", "next", url):  # released with the first holder
        pass


def test_a_killed_holder_releases_the_database_lock(tmp_path: Path, pg_cluster):
    url = pg_cluster.new_database()
    code = (
        "import os, signal\nfrom pathlib import Path\nfrom flows.runtime.lock import workspace_lock\n"
        f"with workspace_lock(Path({str(tmp_path / 'a')!r}), 'x', {url!r}):\n"
        "    print('held', flush=True)\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == -9 and "held" in res.stdout
    with workspace_lock(tmp_path / "b", "after the crash", url):  # the server dropped the dead session's lock
        pass
