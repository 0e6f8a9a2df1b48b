"""Ctrl-C and SIGTERM (bctflow/interrupt.py): a real `bctflow run` child, interrupted while it trains, ends within
5 s with one line and leaves no process of its group behind (Prefect's temporary server included). A `kill -9`,
which no handler sees, takes the server with it too (flows/prefect_api.py), and a second command on the workspace the
run holds is refused in one line before it starts a server of its own (bctflow/generations.py, flows/lock.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO
from tests.helpers import write_params


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _training_run(tmp_path: Path, sink, epochs: int = 40) -> tuple[subprocess.Popen, list[str]]:
    """A real `bctflow run` in a session of its own, once its training has begun (its first epoch checkpoint is
    written); the process and its command line."""
    params = tmp_path / "params.yaml"
    write_params(params, [f"train.epochs={epochs}"])  # long enough to be caught training
    home = tmp_path / "ws"
    cmd = [sys.executable, "-m", "bctflow.cli", "run", "--home", str(home), "--params", str(params)]
    proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path)
    deadline = time.monotonic() + 240
    while not list((home / "staging").glob("gen_000/checkpoints/epoch_*.pt")):  # training has begun
        assert proc.poll() is None, Path(sink.name).read_text()[-3000:]
        assert time.monotonic() < deadline, "the run never started training"
        time.sleep(0.2)
    return proc, cmd


@pytest.mark.parametrize(
    ("sig", "to_group"),
    [(signal.SIGINT, True), (signal.SIGTERM, True), (signal.SIGTERM, False)],
    ids=["ctrl-c", "sigterm-group", "sigterm-process"],
)
def test_an_interrupted_run_stops_within_5_s_with_one_line_and_no_orphans(tmp_path: Path, sig, to_group):
    out = tmp_path / "out.txt"
    with open(out, "w") as sink:
        proc, _ = _training_run(tmp_path, sink)
        t0 = time.monotonic()
        if to_group:  # as a terminal's Ctrl-C does
            os.killpg(proc.pid, sig)
        else:  # as `kill PID` or a supervisor does: the command only, its children must not outlive it
            os.kill(proc.pid, sig)
        try:
            code = proc.wait(timeout=30)
        finally:
            took = time.monotonic() - t0
            if _group_alive(proc.pid):
                os.killpg(proc.pid, signal.SIGKILL)  # never leave a stuck run behind
    text = out.read_text()
    assert took <= 5.0, f"took {took:.1f}s:\n{text[-3000:]}"
    assert code == 128 + sig
    assert f"stopped by {signal.Signals(sig).name}" in text and "Traceback" not in text
    time.sleep(0.5)
    assert not _group_alive(proc.pid), "a process of the command's group outlived it"


def test_prefects_sigterm_bridge_is_disabled_when_its_flow_engine_loads_and_not_before(tmp_path: Path):
    """The console script does not import Prefect to disable its bridge (a command that runs no flow never loads
    it); the flow engine, once imported, runs its flows under bctflow's no-op in place of the bridge it calls."""
    code = """
import inspect, sys
from bctflow import interrupt
interrupt.install_interrupt_handlers()
assert "prefect" not in sys.modules
import prefect.flow_engine as engine
assert "with capture_sigterm():" in inspect.getsource(engine)  # what a flow runs under, looked up by name
assert engine.capture_sigterm is interrupt._keep_our_sigterm
"""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr[-3000:]


def test_a_second_command_on_a_held_workspace_is_one_line_and_kill_9_takes_the_server_along(tmp_path: Path):
    out = tmp_path / "out.txt"
    with open(out, "w") as sink:
        proc, cmd = _training_run(tmp_path, sink, epochs=400)
        try:
            server = [p for p in psutil.Process(proc.pid).children(recursive=True) if "uvicorn" in p.cmdline()]
            assert len(server) == 1, "the run's temporary Prefect server"
            # the same command on the same workspace, while the first one trains: refused at the lock, before a
            # Prefect server of its own would start (it used to start one, then fail in the flow or time out)
            second = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
            lines = (second.stdout + second.stderr).strip().splitlines()
            assert second.returncode == 2 and len(lines) == 1, second.stdout[-3000:] + second.stderr[-3000:]
            assert lines[0].startswith(f"error: workspace {tmp_path / 'ws'} is busy: "), lines[0]
            assert f'"pid": {proc.pid}' in lines[0] and "a new generation is being created" in lines[0]

            os.kill(proc.pid, signal.SIGKILL)  # no handler runs: only the kernel can take the server along
            assert proc.wait(timeout=30) == -signal.SIGKILL
            deadline = time.monotonic() + 5
            while _group_alive(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not server[0].is_running(), "the Prefect server outlived its command"
            assert not _group_alive(proc.pid), "a process of the command's group outlived it"
        finally:
            if _group_alive(proc.pid):
                os.killpg(proc.pid, signal.SIGKILL)
