"""The connection to Milvus (components/indexing/stores/milvus_client.py): a Milvus Lite file another process holds."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from components.errors import ConfigError
from components.indexing.backend import vector_store
from components.indexing.stores.milvus_client import client, release, server_log
from tests.conftest import REPO

_HOLD = (
    "import sys, time; from components.indexing.stores.milvus_client import client; client(sys.argv[1], 10); "
    "print('held', flush=True); time.sleep(120)"
)


def test_a_milvus_lite_file_another_process_holds_is_refused_in_one_line(tmp_path):
    """Milvus Lite serves a file to one process at a time (a second `bctflow serve` replica over a Milvus Lite
    gallery, or a serving one beside a backfill): the second process gets one line naming the file, its server's
    log and the fix, at open and at a command's plan-time check, instead of pymilvus's traceback; once the first lets
    go, it opens."""
    uri = str(tmp_path / "milvus.db")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, uri], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        why = rf"^cannot open the Milvus Lite file {uri} \(Open local milvus failed; its server's log: {uri}\.log\)"
        with pytest.raises(ConfigError, match=why) as refused:
            client(uri, 10)
        assert "\n" not in str(refused.value) and "Milvus server (gallery.uri: http://host:19530) or LanceDB" in str(
            refused.value
        )
        assert "DataDirLockedError" in server_log(uri).read_text()  # the log names the lock
        with pytest.raises(ConfigError, match=why):
            vector_store("milvus", uri).check()  # the same line, not wrapped in "does not answer"
    finally:
        holder.kill()
        holder.wait()
    client(uri, 10).list_collections()  # the lock went with the process
    release(uri)
