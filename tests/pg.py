"""A real PostgreSQL server for the tests: a throwaway cluster (initdb + pg_ctl of the Debian ``postgresql``
package) in a temp folder, on a free localhost port, stopped at the end. As root, the server runs as the
``postgres`` user (initdb refuses root)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

BIN = Path(os.environ.get("BCTFLOW_PG_BIN", "/usr/lib/postgresql/15/bin"))


def available() -> bool:
    return (BIN / "initdb").is_file() and (BIN / "pg_ctl").is_file()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresCluster:
    """``start()`` a cluster in a new folder under the system temp dir (the server user must reach it: pytest's own
    temp dirs are private to their owner); ``new_database()`` → a SQLAlchemy URL of a fresh, empty database."""

    def __init__(self) -> None:
        self.root, self.port = Path(tempfile.mkdtemp(prefix="bctflow-pg-")), _free_port()
        self.data = self.root / "data"
        self._as_postgres = os.geteuid() == 0

    def _run(self, *args: str) -> None:
        cmd = [str(a) for a in args]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if res.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stdout[-1500:]} {res.stderr[-1500:]}")

    def start(self) -> PostgresCluster:
        if self._as_postgres:
            shutil.chown(self.root, "postgres")
        self._run(BIN / "initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(BIN / "pg_ctl", "-D", self.data, "-o", opts, "-l", self.root / "server.log", "-w", "start")
        return self

    def stop(self) -> None:
        self._run(BIN / "pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)
