"""components.processes: a command's children stopped at once, and the stop known to watchers of those children."""

from __future__ import annotations

import subprocess
import sys
import threading

import psutil

from components import processes


def test_stop_descendants_ends_every_child_and_says_the_stop_is_the_commands_own(monkeypatch):
    monkeypatch.setattr(processes, "_STOPPING", threading.Event())  # this worker's flag stays as other tests left it
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert not processes.stopping_descendants()
    processes.stop_descendants(grace_s=5)
    assert processes.stopping_descendants()  # set before the first child is signalled: a watcher that wakes sees it
    assert not psutil.pid_exists(child.pid)  # ended and reaped (psutil waited on it), well before its 60 s
