"""The Prefect API of a command (flows/runtime/prefect_api.py, registry/prefect_db.py; docs/design.md §7.12): one
temporary
server for all the flows of a process, on a database seeded from a migrated template; a temporary server that does
not answer in time is one error line; a configured server is used and must answer. Real Prefect servers, in child
processes where the test harness's server would stand in. (That the server dies with a killed command:
tests/bctflow/test_interrupt.py.)"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

from tests.conftest import REPO

#: a command's two flows in a fresh process: the API each flow run reported to, and the servers the process ran
_TWO_FLOWS = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import psutil
    from flows.runtime.prefect_api import prefect_api

    home = Path(sys.argv[1])
    url = prefect_api(home)
    from prefect import flow
    from prefect.context import get_run_context

    @flow
    def probe() -> dict:
        servers = [p for p in psutil.Process().children(recursive=True) if "uvicorn" in " ".join(p.cmdline())]
        return {"api": str(get_run_context().client.api_url), "servers": [p.pid for p in servers]}

    first = probe()
    again = prefect_api(home)  # the next generation of the same command
    print("RESULT " + json.dumps({"url": url, "again": again, "runs": [first, probe()]}))
    """
)


def _child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}  # no harness, no inherited home
    return {**env, **extra}


def _flow_runs(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM flow_run").fetchone()[0]


def test_the_flows_of_a_command_share_one_temporary_server_on_a_seeded_database(tmp_path: Path):
    from registry.prefect_db import prefect_database_file, seed_prefect_database, template_path

    cache, home = tmp_path / "cache", tmp_path / "ws"
    res = subprocess.run(
        [sys.executable, "-c", _TWO_FLOWS, str(home)],
        env=_child_env(BCTFLOW_CACHE_DIR=str(cache)),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    out = json.loads(res.stdout.split("RESULT ", 1)[1])
    assert out["again"] == out["url"]
    assert [r["api"].rstrip("/") for r in out["runs"]] == [out["url"]] * 2  # both flows reported to it...
    assert len(out["runs"][0]["servers"]) == 1 and out["runs"][1]["servers"] == out["runs"][0]["servers"]  # ...once
    template = template_path(cache)
    assert template.is_file()  # built by the first command on this machine (this Prefect release)...
    assert _flow_runs(home / "prefect" / "prefect.db") == 2  # ...the workspace's database started as its copy
    assert _flow_runs(template) == 0  # the template stays empty

    built = template.stat().st_mtime_ns
    url = f"sqlite+aiosqlite:///{tmp_path / 'another' / 'prefect.db'}"
    t0 = time.perf_counter()
    assert seed_prefect_database(url, cache)  # another new workspace: a copy, no migration
    assert time.perf_counter() - t0 < 5 and template.stat().st_mtime_ns == built
    assert not seed_prefect_database(url, cache)  # an existing database is never replaced
    with sqlite3.connect(template) as a, sqlite3.connect(prefect_database_file(url)) as b:
        head = "SELECT version_num FROM alembic_version"
        assert a.execute(head).fetchall() == b.execute(head).fetchall() != []
    assert prefect_database_file("postgresql+asyncpg://u@h/db") is None
    assert not seed_prefect_database("sqlite+aiosqlite:///:memory:", cache)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_configured_server_that_does_not_answer_is_one_error_line(tiny_params_file: Path, tmp_path: Path):
    url = f"http://127.0.0.1:{_free_port()}/api"
    home = tmp_path / "ws"
    cmd = [sys.executable, "-m", "bctflow.cli", "run", "--home", str(home), "--params", str(tiny_params_file)]
    env = _child_env(PREFECT_API_URL=url)
    res = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    err = res.stderr.strip()
    assert err.startswith("error:") and url in err and "does not answer" in err and "PREFECT_API_URL" in err, err
    assert "Traceback" not in res.stdout + res.stderr
    assert not (home / "prefect").exists() and not (home / "staging").exists()  # no temporary server, nothing run


def _servers_until_exit(proc: subprocess.Popen, timeout: float) -> list[psutil.Process]:
    """The Prefect servers (uvicorn) a command started, each seen while it ran, polled until the command ends."""
    seen: dict[int, psutil.Process] = {}
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("the command did not end")
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(proc.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if "uvicorn" in child.cmdline():
                        seen.setdefault(child.pid, child)
        time.sleep(0.1)
    return list(seen.values())


def test_a_temporary_server_that_does_not_answer_in_time_is_one_error_line(tmp_path: Path):
    """A real server that cannot answer within a 1 s startup timeout (its start takes seconds), as a server on a
    loaded machine misses Prefect's 20 s: two starts, then one line and exit 2 (two servers seen, each stopped);
    nothing is written. (It used to end in Prefect's 60-line traceback.) Run through what a DVC generation stage runs,
    `bctflow stage generation`, which starts the flow as `bctflow run` does (bctflow/generations.py: run_generation)
    and must then leave no results either; the same test through `bctflow run` took another ~45 s of one CI worker."""
    from tests.helpers import write_params

    params, home = tmp_path / "params.yaml", tmp_path / "ws"
    write_params(params)
    manifest = tmp_path / "outputs" / "data" / "g0.json"  # as dvc.yaml runs generation 0 (the data stage's manifest
    manifest.parent.mkdir(parents=True)  # is only compared after the run)
    manifest.write_text("{}")
    results = tmp_path / "results" / "g0"
    cmd = [sys.executable, "-m", "bctflow.cli", "stage", "generation", "g0", "--home", str(home)]
    cmd += ["--manifest", str(manifest), "--results", str(results), "--params", str(params)]
    env = _child_env(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="1", BCTFLOW_HOME=str(tmp_path / "shared"))
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    servers = _servers_until_exit(proc, timeout=300)
    out, err = proc.communicate()
    lines = (out + err).strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, (out + err)[-3000:]  # one line, nothing else
    assert lines[0].startswith("error: the temporary Prefect server did not answer within 1 s, in 2 starts"), lines
    assert "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS (now 1)" in lines[0] and "PREFECT_API_URL" in lines[0]
    assert len(servers) == 2 and not any(s.is_running() for s in servers)  # tried twice; each start stopped
    assert not (home / "staging").exists() and not (home / "generations").exists() and not results.exists()


def test_a_configured_server_is_used(prefect_harness, tmp_path: Path, monkeypatch):
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL

    from flows.runtime.env import QUIET
    from flows.runtime.prefect_api import prefect_api

    for key in ("PREFECT_HOME", "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", *QUIET):  # restored after
        if key in os.environ:
            monkeypatch.setenv(key, os.environ[key])
        else:
            monkeypatch.delenv(key, raising=False)
    harness = SubprocessASGIServer()  # the harness's server stands in for the process's temporary one
    pid = harness.server_process.pid
    assert prefect_api(tmp_path / "ws") == PREFECT_API_URL.value()
    assert SubprocessASGIServer() is harness and harness.server_process.pid == pid  # nothing else started


def test_a_temporary_server_killed_mid_command_is_one_error_line_and_keeps_the_staged_work(tmp_path: Path):
    """The temporary server SIGKILLed while the flow runs (as a loaded machine's OOM killer did to a benchmark's
    `bctflow run`, which then retried the dead API for minutes and ended in Prefect's traceback): the command stops
    within seconds with one error line naming the server and the way on, exit 1, no traceback, no process left;
    nothing is committed and the staged training is kept for the same command, which resumes it (a rerun here, with
    a temporary server of its own, took ~50 s of one CI worker; resuming a killed generation's staged work:
    tests/flows/recovery/test_crash_consistency.py)."""
    from tests.helpers import write_params

    params, home = tmp_path / "params.yaml", tmp_path / "ws"
    # epochs enough that the server dies mid-training: with one epoch the whole tiny generation, commit included,
    # could finish before the watch saw the server die (the test then found it committed)
    write_params(params, ["train.epochs=40"])
    cmd = [sys.executable, "-m", "bctflow.cli", "run", "--home", str(home), "--params", str(params)]
    env = _child_env(BCTFLOW_HOME=str(tmp_path / "shared"))
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, killed, servers = [], None, []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if killed is None and "Task run 'train-" in line:  # the flow runs: its first training step logged
            servers = [c for c in psutil.Process(proc.pid).children(recursive=True) if "uvicorn" in c.cmdline()]
            assert len(servers) == 1, servers
            servers[0].kill()
            killed = time.monotonic()
    proc.wait(timeout=120)
    assert killed is not None, "\n".join(lines[-20:])
    after = lines[next(i for i, ln in enumerate(lines) if "Task run 'train-" in ln) + 1 :]
    errors = [ln for ln in after if ln.startswith("error:")]
    assert proc.returncode == 1 and len(errors) == 1 and "Traceback" not in "\n".join(lines), "\n".join(lines[-30:])
    assert "temporary Prefect server" in errors[0] and "died mid-command (killed by SIGKILL" in errors[0], errors
    assert "run the same command again" in errors[0] and "PREFECT_API_URL" in errors[0]
    assert time.monotonic() - killed < 30  # not Prefect's minutes of retries
    assert not psutil.pid_exists(proc.pid) or psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE
    assert (home / "staging" / "gen_000").is_dir() and not (home / "generations" / "gen_000").exists()
