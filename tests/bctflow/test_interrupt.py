"""Ctrl-C and SIGTERM (bctflow/interrupt.py): a real `bctflow run` child, interrupted while it trains, ends within
5 s with one line and leaves no process of its group behind (Prefect's temporary server included). Of two commands
started together on one workspace, one runs and the other is refused in one line before it starts a server of its
own (bctflow/generations.py, flows/runtime/lock.py); a `kill -9` of the one that runs, which no handler sees, takes its
server
with it too (flows/runtime/prefect_api.py)."""

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


def _params(tmp_path: Path, epochs: int) -> tuple[Path, Path]:
    """The tiny params with ``epochs`` (long enough to be caught training) and the workspace."""
    params = tmp_path / "params.yaml"
    write_params(params, [f"train.epochs={epochs}"])
    return params, tmp_path / "ws"


def _start_run(tmp_path: Path, params: Path, home: Path, sink, api: str | None = None) -> subprocess.Popen:
    """A real `bctflow run` in a session of its own, its output to ``sink``; on the Prefect server at ``api``, else
    on a temporary server of its own (in its process group)."""
    cmd = [sys.executable, "-m", "bctflow.cli", "run", "--home", str(home), "--params", str(params)]
    env = {**os.environ, "PREFECT_API_URL": api} if api else None
    return subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path, env=env)


def _wait_training(proc: subprocess.Popen, home: Path, sink) -> None:
    """Until the run's training has begun (its first epoch checkpoint is written)."""
    deadline = time.monotonic() + 240
    while not list((home / "staging").glob("gen_000/checkpoints/epoch_*.pt")):
        assert proc.poll() is None, Path(sink.name).read_text()[-3000:]
        assert time.monotonic() < deadline, "the run never started training"
        time.sleep(0.2)


@pytest.mark.parametrize(
    ("sig", "to_group"),
    [(signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["ctrl-c", "sigterm-process"],
)
def test_an_interrupted_run_stops_within_5_s_with_one_line_and_no_orphans(tmp_path: Path, sig, to_group, request):
    """Each signal and each way of sending it, once: SIGINT to the group (a terminal's Ctrl-C), SIGTERM to the command
    alone (`kill PID`, a supervisor), which must stop its temporary Prefect server itself. (SIGTERM to the group, the
    two combined, took ~40 s of one CI worker.) A Ctrl-C reaches a temporary server in the group as well, so that run
    reports to the session's server (a temporary one took ~20 s of a CI worker to start)."""
    from prefect.settings import PREFECT_API_URL

    api = None
    if to_group:
        request.getfixturevalue("prefect_harness")
        api = PREFECT_API_URL.value()
    out = tmp_path / "out.txt"
    with open(out, "w") as sink:
        params, home = _params(tmp_path, epochs=40)
        proc = _start_run(tmp_path, params, home, sink, api)
        _wait_training(proc, home, sink)
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


def _running(proc: psutil.Process) -> bool:
    """Alive and not a zombie (a killed process that the container's init has not reaped yet is gone)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_two_commands_started_together_one_runs_one_is_a_busy_line_and_kill_9_takes_the_server_along(tmp_path: Path):
    """As in the issue: two `bctflow run` on one workspace started together. The one that plans second is refused at
    the lock in one line, before a Prefect server of its own would start (it used to start one, then fail in the flow
    or time out waiting for that server, with a traceback). The other trains; a `kill -9` of it, which no handler
    sees, takes its Prefect server along (the parent-death signal)."""
    params, home = _params(tmp_path, epochs=400)  # long enough to be caught training
    outs = [tmp_path / "first.txt", tmp_path / "second.txt"]
    with open(outs[0], "w") as first, open(outs[1], "w") as second:
        procs = [_start_run(tmp_path, params, home, sink) for sink in (first, second)]
        try:
            deadline = time.monotonic() + 240
            while all(p.poll() is None for p in procs):  # until one of them is refused
                assert time.monotonic() < deadline, "neither command was refused"
                time.sleep(0.2)
            loser = next(i for i, p in enumerate(procs) if p.poll() is not None)
            refused, run = procs[loser], procs[1 - loser]
            text = outs[loser].read_text()
            assert refused.returncode == 2 and len(text.strip().splitlines()) == 1, text[-3000:]
            assert text.startswith(f"error: workspace {home} is busy: "), text
            assert f'"pid": {run.pid}' in text and "a new generation is being created" in text

            _wait_training(run, home, outs[1 - loser])
            server = [p for p in psutil.Process(run.pid).children(recursive=True) if "uvicorn" in p.cmdline()]
            assert len(server) == 1, "the run's temporary Prefect server"
            os.kill(run.pid, signal.SIGKILL)  # no handler runs: only the kernel can take the server along
            assert run.wait(timeout=30) == -signal.SIGKILL
            deadline = time.monotonic() + 5
            while _running(server[0]) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not _running(server[0]), "the Prefect server outlived its command"
        finally:
            for p in procs:
                if _group_alive(p.pid):
                    os.killpg(p.pid, signal.SIGKILL)
