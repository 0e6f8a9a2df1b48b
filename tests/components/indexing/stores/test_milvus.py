"""gallery.store milvus's own checks (components/indexing/stores/milvus.py); what it shares with the other database
stores is tested in tests/components/indexing/stores/test_database.py."""

from __future__ import annotations

import pytest

from components.errors import ConfigError
from components.indexing.backend import vector_store


def test_an_unreachable_server_or_a_missing_uri_is_one_line_at_plan_time(tmp_path):
    with pytest.raises(ConfigError, match="gallery.store milvus needs gallery.uri"):
        vector_store("milvus").check()
    with pytest.raises(ConfigError, match=r"the Milvus at gallery.uri http://127.0.0.1:9 does not answer .*fix"):
        vector_store("milvus", "http://127.0.0.1:9", {"timeout": 1}).check()
    vector_store("milvus", str(tmp_path / "lite" / "m.db")).check()  # a Milvus Lite file is created where it lies
    assert (tmp_path / "lite" / "m.db").exists()


def test_a_search_asks_few_enough_queries_per_call_that_the_reply_fits_and_answers_the_same(tmp_path, monkeypatch):
    """Each call's reply (``limit`` stored vectors per query) stays under the reply budget — a corpus's top-101
    metrics, re-ranked 4×, once asked 2048 queries for 430 MB, over gRPC's 256 MiB — and the answers do not change."""
    import numpy as np

    from components.indexing.backend import IndexOptions, open_index
    from components.indexing.stores import milvus
    from tests.components.indexing.test_backend import stamped_store

    assert milvus.queries_per_call(404, 129) * 404 * (4 * 129 + 64) <= milvus._REPLY_BYTES
    assert milvus.queries_per_call(404, 129) < 2048 and milvus.queries_per_call(10, 16) == 2048
    assert milvus.queries_per_call(10**9, 129) == 1
    parts = stamped_store(tmp_path / "gallery", geometry="euclidean", stamps=(0,))
    store = vector_store("milvus", str(tmp_path / "m.db"), {"index_type": "FLAT"})
    store.collection("t_g0_v0", tmp_path / "index").build(parts, generation=0, options=IndexOptions(recall_queries=50))
    q = np.concatenate([p.gallery.vectors()[:20] for p in parts.parts()])
    whole = open_index(tmp_path / "index").search(q, 30)
    monkeypatch.setattr(milvus, "_REPLY_BYTES", 7 * 30 * (4 * 8 + 64))  # 7 queries per call
    assert milvus.queries_per_call(30, 8) == 7
    split = open_index(tmp_path / "index").search(q, 30)
    np.testing.assert_array_equal(split[1], whole[1])
    np.testing.assert_allclose(split[0], whole[0])
    store.close()


def _hnsw_collection(tmp_path):
    """(store, its client, an HNSW index spec) over a built 300-row collection ``t_g0_v0`` in a Milvus Lite file."""
    from components.indexing.backend import IndexOptions
    from tests.components.indexing.test_backend import stamped_store

    parts = stamped_store(tmp_path / "gallery", geometry="euclidean", stamps=(0,))
    store = vector_store("milvus", str(tmp_path / "m.db"), {"index_type": "HNSW"})
    store.collection("t_g0_v0", tmp_path / "index").build(parts, generation=0, options=IndexOptions(recall_queries=50))
    db = store._db()
    spec = db.prepare_index_params()
    spec.add_index("vector", index_type="HNSW", metric_type="IP", params={"M": 16, "efConstruction": 200})
    return store, db, spec


def test_a_create_index_retried_after_it_went_through_is_waited_for_and_must_be_the_one_asked(tmp_path):
    """pymilvus retries a create_index whose gRPC connection the server reset mid-build (GOAWAY, seen building HNSW
    over 1M rows) and the retry finds the index the first call built: that one is accepted when it is the index
    asked for, and a different one is one line."""
    from components.errors import IndexIntegrityError
    from components.indexing.stores import milvus_client

    store, db, spec = _hnsw_collection(tmp_path)
    milvus_client.create_index(db, "t_g0_v0", spec, "HNSW", "IP")  # "already exists": the retry's answer, accepted
    with pytest.raises(IndexIntegrityError, match=r"holds a HNSW index under IP, not the IVF_FLAT under IP asked for"):
        milvus_client.create_index(db, "t_g0_v0", spec, "IVF_FLAT", "IP")
    store.close()


def test_an_index_build_that_indexes_no_row_for_too_long_ends_in_one_line(tmp_path, monkeypatch):
    """A server whose index build stops (its indexed rows stay where they are) is not waited for forever: after
    ``STALLED_S`` seconds without a newly indexed row, one line naming the collection and what to do. The stall is
    the real Milvus Lite's describe_index answer with its state held at 'InProgress' (a build cannot be stopped
    here); a build that still indexes rows is waited for."""
    import time

    from components.errors import IndexIntegrityError
    from components.indexing.stores import milvus_client

    store, db, spec = _hnsw_collection(tmp_path)
    real, looks = db.describe_index, []

    class Stalled:
        """The real client, its index build reported as stuck after ``grows`` looks that each indexed a row more."""

        def __init__(self, grows: int) -> None:
            self.grows = grows

        def __getattr__(self, name):
            return getattr(db, name)

        def describe_index(self, collection, field):
            looks.append(time.monotonic())
            found = real(collection, field)
            done = min(len(looks), self.grows) if self.grows else 7
            return {**found, "state": "InProgress", "indexed_rows": done, "total_rows": 300, "pending_index_rows": 1}

    monkeypatch.setattr(milvus_client, "POLL_S", 0.05)
    monkeypatch.setattr(milvus_client, "STALLED_S", 0.3)
    with pytest.raises(IndexIntegrityError) as err:
        milvus_client.create_index(Stalled(0), "t_g0_v0", spec, "HNSW", "IP")
    assert str(err.value) == (
        "the Milvus collection t_g0_v0's HNSW index has indexed 7 of 300 rows and none more for 0.3 s (state "
        "InProgress); check the Milvus server and its logs, then run the same command again (the rows written are kept)"
    )
    looks.clear()
    with pytest.raises(IndexIntegrityError):
        milvus_client.create_index(Stalled(20), "t_g0_v0", spec, "HNSW", "IP")  # 20 looks × 0.05 s growth, then stuck
    # the 20 growing looks are 19 sleeps apart; the last growth is seen at look 20, and the look that gives up comes
    # more than 0.3 s after it
    assert looks[-1] - looks[0] >= 19 * 0.05 + 0.3
    assert store.collection("t_g0_v0", tmp_path / "index").count_by_generation() == {0: 300}  # the rows are kept
    store.close()


def test_a_gallery_opened_where_its_collection_is_released_loads_it_to_search(tmp_path):
    """A new process finds an indexed collection released (Milvus Lite's server keeps loads in its memory): opening
    the gallery to search loads it. The bench's search of generation 0's corpus failed so ("call load() before
    search") once the rollback's gate stopped counting rows, the load that used to come first."""
    import numpy as np

    from components.indexing.backend import open_index

    store, db, _ = _hnsw_collection(tmp_path)
    db.release_collection("t_g0_v0")  # Milvus Lite has no get_load_state: the search below is the check
    _, ids = open_index(tmp_path / "index").search(np.eye(8, dtype=np.float32)[:3], 5)
    assert ids.shape == (3, 5) and (ids >= 1000).all()
    store.close()


def test_a_missing_alias_or_collection_is_answered_without_pymilvus_logging_an_error(tmp_path):
    """The alias and a collection's facts are asked for directly (one round trip where they exist); where they do not,
    the miss is the answer, not an ERROR with a traceback in the command's output (pymilvus logs every failed call on
    its own handler)."""
    import logging

    from components.errors import IndexIntegrityError

    store, db, _ = _hnsw_collection(tmp_path)
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append  # type: ignore[method-assign]
    logger = logging.getLogger("pymilvus.decorators")
    logger.addHandler(handler)
    try:
        assert store.live_collection("t_g0_v0") is None
        with pytest.raises(IndexIntegrityError, match="the Milvus collection t_g9_v0 does not exist"):
            store.collection("t_g9_v0", tmp_path / "nowhere")._facts()
        assert seen == []
        with pytest.raises(Exception, match="does not exist"):
            db.describe_alias("t_live")  # outside the store's expected misses pymilvus still reports its errors
        assert [r.levelno for r in seen] == [logging.ERROR]
    finally:
        logger.removeHandler(handler)
        store.close()


def test_what_a_milvus_lite_server_logs_goes_to_the_log_beside_its_file_not_to_the_console(tmp_path, capfd):
    """A Milvus Lite file's gRPC server runs in the process that opens it, and a backfill's console showed
    its ``ERROR | grpc._server`` report, with a traceback, of a call it does not implement (AllocTimestamp: pymilvus's
    own wait for an index asked it). An index build asks it no such call now; the call asked here anyway is refused
    (pymilvus ignores the refusal) and the server's report is in ``<uri>.log`` — nothing on the console: not on file
    descriptors 1 and 2, no record passed up to the root logger, whose handlers print a command's log lines."""
    import logging
    import re

    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append  # type: ignore[method-assign]
    logging.getLogger().addHandler(handler)
    try:
        store, db, _ = _hnsw_collection(tmp_path)  # an HNSW index built through the store
        log = tmp_path / "m.db.log"
        assert "MilvusLite server started for" in log.read_text() and "Exception calling" not in log.read_text()
        assert db._get_connection().alloc_timestamp() == 0  # refused: "Method not implemented!"
        store.close()
    finally:
        logging.getLogger().removeHandler(handler)
    text = log.read_text()
    assert "ERROR grpc._server" in text and "AllocTimestamp" in text and "NotImplementedError" in text
    assert not [r for r in seen if r.name.startswith(("grpc", "milvus_lite"))]
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err and "ERROR" not in out + err
    assert not re.search("grpc|goaway|milvus", out + err, re.IGNORECASE), out + err


_FORKS = """
import multiprocessing, sys
if sys.argv[2] == "quiet":
    from flows.runtime.env import quiet_environment

    quiet_environment()  # what the console script does first (bctflow/cli.py)
from components.indexing.backend import vector_store

store = vector_store("milvus", sys.argv[1])
store.check()  # its server runs in this process now
for _ in range(3):  # as a DataLoader starts its workers
    child = multiprocessing.get_context("fork").Process(target=int)
    child.start()
    child.join()
store.close()
"""


def test_a_process_with_bctflows_defaults_forking_beside_a_milvus_lite_server_prints_no_grpc_line(tmp_path):
    """gRPC's C core printed ``I… fork_posix.cc:71] Other threads are currently calling into gRPC, skipping fork()
    handlers`` at each fork of a process running a Milvus Lite server (a backfill's DataLoader workers):
    bctflow's quiet defaults (GRPC_VERBOSITY=ERROR, gRPC's documented default, set before grpc is imported; a user's
    own setting wins) keep it off the console. The same child without them prints it (the fork is the one that did)."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"} | {"PYTHONPATH": str(REPO)}
    runs = {}
    for how in ("loud", "quiet"):
        cmd = [sys.executable, "-c", _FORKS, str(tmp_path / how / "m.db"), how]
        runs[how] = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert runs[how].returncode == 0, runs[how].stderr[-2000:]
    assert "fork_posix" in runs["loud"].stderr  # the line, without bctflow's defaults
    assert runs["quiet"].stdout == runs["quiet"].stderr == ""
