"""gallery.store lancedb's own parts (components/indexing/stores/lance_tables.py): the live alias as a versioned
one-row table with the live table's version tagged, and its plan-time check; what it shares with the other database
stores is tested in tests/components/indexing/stores/test_database.py."""

from __future__ import annotations

import lancedb
import pytest

from components.errors import ConfigError
from components.indexing.backend import IndexOptions, vector_store
from tests.components.indexing.test_backend import stamped_store


def test_each_alias_move_is_a_version_of_the_alias_table_and_the_live_table_is_tagged(tmp_path):
    store = vector_store("lancedb", str(tmp_path / "lance"))
    outs = []
    for g in (0, 1):
        parts = stamped_store(tmp_path / f"v{g}" / "gallery", geometry="euclidean", stamps=(g,))
        out = tmp_path / f"v{g}" / "index"
        version = store.collection(f"lt_g{g}_v0", out)
        version.build(parts, generation=g, options=IndexOptions(recall_queries=20))
        version.point_alias([0, 1])
        outs.append(version)
    db = lancedb.connect(str(tmp_path / "lance"))
    alias = db.open_table("lt_live")
    history = []
    for v in alias.list_versions():
        alias.checkout(v["version"])
        history.append(alias.to_arrow()["collection"].to_pylist())
    assert history[0] == ["lt_g0_v0"] and history[-1] == ["lt_g1_v0"]  # the alias's history: rollback reads it
    for g in (0, 1):
        table = db.open_table(f"lt_g{g}_v0")
        assert table.tags.list()["live"]["version"] == table.version
    assert outs[1].aliased() and not outs[0].aliased()


def test_a_missing_uri_is_one_line_at_plan_time():
    with pytest.raises(ConfigError, match="gallery.store lancedb needs gallery.uri: a folder"):
        vector_store("lancedb").check()
