"""params.yaml's moved keys (flows/params/moved_keys.py): every old key maps to a key of the schema, and reading it
is refused with its one-line notice."""

from __future__ import annotations

import pytest

from components.errors import ConfigError
from flows.params import params_from_dict
from flows.params.moved_keys import MOVED_KEYS, moved_notice
from flows.params.overrides import schema_keys, set_dotted
from flows.params.schema import Params


@pytest.mark.parametrize("old", sorted(MOVED_KEYS))
def test_every_old_key_maps_to_a_key_of_the_schema_and_its_notice_is_one_line(old: str):
    keys = schema_keys(Params)
    new = MOVED_KEYS[old].new
    assert old not in keys and new in keys  # the old name is gone, the new one is read
    notice = moved_notice(old)
    assert notice is not None and "\n" not in notice
    assert notice.startswith(f"{old.rsplit('.', 1)[-1]} moved to {new}") and f"(--set {new}=…)" in notice
    raw: dict = {}
    set_dotted(raw, [(old, None)])
    with pytest.raises(ConfigError) as err:
        params_from_dict(raw, "p")
    section = old.rpartition(".")[0]
    assert str(err.value) == f"invalid parameters in p: {section}: {notice}"


def test_a_key_that_never_moved_has_no_notice():
    assert moved_notice("backfill.chunk_size") is None
    assert moved_notice("backfill.not_a_key") is None
