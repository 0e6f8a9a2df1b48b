"""The CLI outside a repository: the package ships the repository's params.yaml (flows/params/default_params.yaml), and
a
command without --params and without ./params.yaml reads it and says so in one line on stderr."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

import bctflow
from flows.params import PACKAGED_PARAMS_PATH, load_params
from tests.conftest import REPO


def _bctflow(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """The real command, as a process in ``cwd``; ``PYTHONPATH`` points at this checkout's code only. Its Prefect state
    goes to a folder of its own beside ``cwd``: a PREFECT_HOME an earlier in-process CLI test left in os.environ may
    point at a temp folder deleted since, and Prefect would warn about it on stderr."""
    prefect_home = cwd.parent / f"{cwd.name}-prefect"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PREFECT_HOME": str(prefect_home)}
    return subprocess.run(
        [sys.executable, "-m", "bctflow.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_packaged_defaults_are_the_repositorys_params_yaml_byte_for_byte():
    assert PACKAGED_PARAMS_PATH == REPO / "flows" / "params" / "default_params.yaml"
    assert PACKAGED_PARAMS_PATH.read_bytes() == (REPO / "params.yaml").read_bytes(), (
        "params.yaml changed: copy it into the package (cp params.yaml flows/params/default_params.yaml)"
    )


def test_the_built_wheel_ships_the_defaults_and_the_version(tmp_path: Path):
    """Build the wheel from the tracked files (no network, this environment's setuptools) and look inside."""
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    src = tmp_path / "src"
    for name in tracked.splitlines():
        if (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)]
    res = subprocess.run([*build, str(src)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    (wheel,) = tmp_path.glob("bctflow-*.whl")
    assert wheel.name.startswith(f"bctflow-{bctflow.__version__}-")
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read("flows/params/default_params.yaml") == (REPO / "params.yaml").read_bytes()
        metadata = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        assert f"Version: {bctflow.__version__}\n" in zf.read(metadata).decode()


def test_a_command_outside_a_repository_uses_the_packaged_defaults_and_says_so(tmp_path: Path):
    res = _bctflow(["schedule"], tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stderr.splitlines() == [
        f"no ./params.yaml here and no --params: using the defaults bctflow ships ({PACKAGED_PARAMS_PATH})"
    ]
    cron = yaml.safe_load(PACKAGED_PARAMS_PATH.read_text())["schedule"]["cron"]
    assert f"nightly retraining: cron '{cron}'" in res.stdout
    assert list(tmp_path.iterdir()) == []  # nothing written where it ran


def test_lineage_json_keeps_stdout_for_the_json(tmp_path: Path):
    """The line about the defaults goes to stderr; `lineage --json` of an empty workspace fails with its own line."""
    res = _bctflow(["lineage", "--json", "--home", str(tmp_path / "ws")], tmp_path)
    assert res.returncode == 2 and res.stdout == ""
    first, second = res.stderr.splitlines()
    assert first.startswith("no ./params.yaml here and no --params: using the defaults bctflow ships")
    assert second.startswith(f"error: no lineage in {tmp_path / 'ws'}")


def test_a_params_yaml_in_the_directory_wins_and_an_explicit_missing_one_is_refused(tmp_path: Path, monkeypatch):
    from typer.testing import CliRunner

    from bctflow.cli import app

    p = load_params(PACKAGED_PARAMS_PATH)
    (tmp_path / "params.yaml").write_text(
        yaml.safe_dump({**p.as_dict(), "schedule": {"cron": "5 4 * * *", "timezone": "UTC"}})
    )
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["schedule"])
    assert res.exit_code == 0 and "cron '5 4 * * *'" in res.output and "defaults bctflow ships" not in res.output
    res = CliRunner().invoke(app, ["schedule", "--params", "elsewhere.yaml"])
    assert res.exit_code == 2
    assert "error: params file elsewhere.yaml does not exist; pass --params with an existing file" in res.output
