"""The console script starts at once (bctflow/cli.py): `--version` and every command's `--help` import none of the
heavy packages; a command imports what it needs when it runs. The Prefect setting bctflow documents is checked before
Prefect is imported, whose own import would fail on a bad value with a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import typer.main

from bctflow import __version__
from bctflow.cli import app
from tests.conftest import REPO

#: what a command that only prints must not import: each takes seconds (torch alone ~2 s of CPU)
HEAVY = ("torch", "prefect", "mlflow", "dvc", "faiss", "timm", "torchvision")

#: every call in one process, then the heavy top-level packages in sys.modules, as the last line
_CALLS = """
import json, sys
import bctflow.cli
from bctflow.cli import main
def _raise(code):  # each call ends as SystemExit here, not as the process's end
    raise SystemExit(code)
bctflow.cli._exit_now = _raise
calls, heavy = json.loads(sys.argv[1]), set(json.loads(sys.argv[2]))
for args in calls:
    sys.argv = ["bctflow", *args]
    try:
        main()
    except SystemExit as exit:
        if exit.code not in (0, None):
            raise SystemExit(f"bctflow {' '.join(args)} exited {exit.code}")
print("\\n" + json.dumps(sorted({m.split(".")[0] for m in sys.modules} & heavy)))
"""


def command_paths() -> list[list[str]]:
    """Every command and group of the app, as the words that name it (the root: [])."""

    def walk(cmd, path: list[str]):
        yield path
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            yield from walk(sub, [*path, name])

    return list(walk(typer.main.get_command(app), []))


def test_version_and_every_help_import_no_heavy_package(tmp_path):
    paths = command_paths()
    assert ["bench", "scale"] in paths and ["stage", "generation"] in paths  # the tree is walked to its leaves
    calls = [["--version"], *([*p, "--help"] for p in paths)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "120"}
    res = subprocess.run(
        [sys.executable, "-c", _CALLS, json.dumps(calls), json.dumps(HEAVY)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"bctflow {__version__}" in res.stdout and "Usage: bctflow stage generation" in res.stdout
    assert json.loads(res.stdout.splitlines()[-1]) == []


def test_a_bad_startup_timeout_is_one_line_before_the_command_runs(monkeypatch, capsys):
    from bctflow.cli import main

    monkeypatch.setenv("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "2m")
    monkeypatch.setattr(sys, "argv", ["bctflow", "--version"])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS='2m': ") and "\n" not in err


_EXIT = """
import atexit, sys
atexit.register(lambda: print("exit hook ran"))
sys.argv = ["bctflow", *sys.argv[1:]]
from bctflow.cli import main
main()
"""


@pytest.mark.parametrize(("args", "code"), [(["--version"], 0), (["promote", "--generation", "x"], 2)])
def test_the_console_script_ends_with_its_exit_code_its_exit_hooks_run_and_its_output_flushed(tmp_path, args, code):
    """main() ends the process itself once the exit hooks ran (no interpreter finalization: seconds at the end of a
    backfill): the command's exit code, every exit hook (Prefect's server stop, a backfill's seconds), the output
    flushed into a pipe."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", _EXIT, *args], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert res.returncode == code, res.stderr[-2000:]
    assert res.stdout.rstrip().endswith("exit hook ran") and (code or f"bctflow {__version__}" in res.stdout)
