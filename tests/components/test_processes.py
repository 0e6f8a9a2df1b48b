"""components.processes: a command's children stopped at once, and the stop known to watchers of those children."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO

# in a process of its own: stopping the test worker's descendants would stop its Prefect server too
_CHILD = """
import json, subprocess, sys, psutil
from components import processes
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
before = processes.stopping_descendants()
processes.stop_descendants(grace_s=5)
print(json.dumps([before, processes.stopping_descendants(), psutil.pid_exists(child.pid)]))
"""


def test_stop_descendants_ends_every_child_and_says_the_stop_is_the_commands_own():
    out = subprocess.run([sys.executable, "-c", _CHILD], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    before, after, child_alive = json.loads(out.stdout)
    assert not before and after  # set before the first child is signalled: a watcher that wakes then sees it
    assert not child_alive  # ended and reaped (psutil waited on it), well before its 60 s
