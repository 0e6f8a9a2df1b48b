"""Plugin catalogs (components/plugins.py): the names read from the plugins' source are the names they register."""

from __future__ import annotations

import pytest

from components.losses.catalog import available_alignments
from components.models.head_catalog import HEADS
from components.plugins import declared_names


def test_declared_names_are_the_names_the_catalog_registers():
    assert declared_names("components.losses.methods", "register_alignment") == available_alignments()
    assert declared_names("components.models.heads", "register_head") == HEADS.names()


def test_a_name_that_only_importing_could_tell_is_refused():
    """cifar100.py registers ``@register_dataset(NAME)``: a variable, not a literal."""
    with pytest.raises(TypeError, match=r"cifar100\.py:\d+: @register_dataset\(\.\.\.\) must name its plugin"):
        declared_names("components.data.sets", "register_dataset")
