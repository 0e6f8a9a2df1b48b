"""DVC snapshots of data manifests (registry/data_snapshots.py) with a real DVC repository."""

from __future__ import annotations

import hashlib
import re

import pytest
import yaml

from components.data import DataManifest, create_dataset, select_training_data
from registry.data_snapshots import DataSnapshots


@pytest.fixture(scope="module")
def manifests(tmp_path_factory):
    d = create_dataset("digits", tmp_path_factory.mktemp("digits"))

    def sel(seed):
        return select_training_data(
            d.train, dataset="digits", fingerprint=d.fingerprint, class_order=[0, 1, 2], fraction=0.5, seed=seed
        )

    return sel(0), sel(1)


def _cache_file(root, md5):
    return root / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]


def test_snapshot_is_stable_and_versioned_in_the_dvc_cache(tmp_path, manifests):
    m0, m1 = manifests
    root = tmp_path / "data"
    store = DataSnapshots(root)
    first = store.snapshot("gen0", m0)
    assert (root / ".dvc").is_dir()
    dvc_file = root / "snapshots" / "gen0" / "manifest.json.dvc"
    assert dvc_file.is_file() and first.path == root / "snapshots" / "gen0" / "manifest.json"
    meta = yaml.safe_load(dvc_file.read_text())
    assert meta["outs"][0]["md5"] == first.data_hash
    assert first.data_hash == hashlib.md5(m0.to_json().encode()).hexdigest()

    again = store.snapshot("gen0", m0)
    assert again.data_hash == first.data_hash
    assert store.read_hash("gen0") == first.data_hash

    cached = _cache_file(root, first.data_hash)
    assert cached.is_file() and cached.read_text() == m0.to_json()

    changed = store.snapshot("gen0", m1)
    assert changed.data_hash != first.data_hash
    assert _cache_file(root, changed.data_hash).read_text() == m1.to_json()
    # the earlier version is still in the cache
    assert cached.is_file() and cached.read_text() == m0.to_json()

    loaded = store.load("gen0")
    assert isinstance(loaded, DataManifest) and loaded.sha256 == m1.sha256

    other = store.snapshot("gen1", m0)  # another name, same content: same hash
    assert other.data_hash == first.data_hash
    assert store.load("gen1").sha256 == m0.sha256
    assert not list((root / "snapshots" / "gen0").glob("*.tmp"))


_ON_A_TERMINAL = """
import logging, sys
import numpy as np
from components.data import DataManifest
from registry.data_snapshots import DataSnapshots

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")  # a console that shows INFO
m = DataManifest("digits", "fp", (0, 1), ("0", "1"), 1.0, 0, np.arange(5), np.zeros(5, dtype=np.int64))
store = DataSnapshots(sys.argv[1])
for name in ("gen_000", "gen_001"):
    print("snapshot", name, store.snapshot(name, m).data_hash)
"""


def test_dvc_prints_nothing_of_its_own_on_a_terminal(tmp_path):
    """On a terminal (a pty) with INFO logging on: the first snapshot initialises the DVC repository and both add a
    manifest, and the console holds only the caller's lines: no "Initialized DVC repository." (it was printed twice),
    no "Checking graph" spinner, no progress bar."""
    import os
    import pty
    import subprocess
    import sys

    from tests.conftest import REPO

    main, child = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm"}
    proc = subprocess.Popen(
        [sys.executable, "-c", _ON_A_TERMINAL, str(tmp_path / "data")], stdout=child, stderr=child, env=env
    )
    os.close(child)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    assert proc.wait(timeout=120) == 0, out.decode(errors="replace")[-3000:]
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode())  # colour and cursor codes (a colour reset at exit)
    lines = text.replace("\r", "").splitlines()
    assert [line.split()[:2] for line in lines if line.strip()] == [["snapshot", "gen_000"], ["snapshot", "gen_001"]], (
        lines
    )
    assert (tmp_path / "data" / ".dvc").is_dir()


def test_dvc_keeps_its_own_logging_outside_the_quiet_block(tmp_path, manifests):
    import logging

    from registry.data_snapshots import quiet_dvc

    def state():
        return [(lg.level, list(lg.handlers)) for lg in map(logging.getLogger, ("dvc", "dvc_data", "dvc.progress"))]

    import dvc.repo  # noqa: F401 (DVC's console handlers are installed at import)

    before = state()
    assert before[0][1], "DVC installs console handlers of its own at import"
    DataSnapshots(tmp_path / "data").snapshot("gen0", manifests[0])
    assert state() == before
    with quiet_dvc():
        assert logging.getLogger("dvc").handlers == [] and logging.getLogger("dvc.progress").level == logging.CRITICAL
