"""gallery.store milvus's own checks (components/indexing/stores/milvus.py); what it shares with the other database
stores is tested in tests/components/indexing/test_db_index.py."""

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
