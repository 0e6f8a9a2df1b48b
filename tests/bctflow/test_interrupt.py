"""Ctrl-C and SIGTERM (bctflow/interrupt.py): a real `bctflow run` child, interrupted while it trains, ends within
5 s with one line and leaves no process of its group behind (Prefect's temporary server included)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers import write_params


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize(
    ("sig", "to_group"),
    [(signal.SIGINT, True), (signal.SIGTERM, True), (signal.SIGTERM, False)],
    ids=["ctrl-c", "sigterm-group", "sigterm-process"],
)
def test_an_interrupted_run_stops_within_5_s_with_one_line_and_no_orphans(tmp_path: Path, sig, to_group):
    params = tmp_path / "params.yaml"
    write_params(params, ["train.epochs=40"])  # long enough to be caught training
    home = tmp_path / "ws"
    cmd = [sys.executable, "-m", "bctflow.cli", "run", "--home", str(home), "--params", str(params)]
    out = tmp_path / "out.txt"
    with open(out, "w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path)
        deadline = time.monotonic() + 240
        while not list((home / "staging").glob("gen_000/checkpoints/epoch_*.pt")):  # training has begun
            assert proc.poll() is None, out.read_text()[-3000:]
            assert time.monotonic() < deadline, "the run never started training"
            time.sleep(0.2)
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
