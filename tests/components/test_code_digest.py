"""The digest of the model-shaping code (components/code_digest.py): content and sorted paths of the shaping files,
nothing else."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from components.code_digest import CODE_EXCLUDED, code_digest, shaping_files
from tests.conftest import REPO


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the repository's components/ package (sources only)."""
    shutil.copytree(REPO / "components", tmp_path / "components", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_the_digest_covers_what_trains_a_model_and_is_the_same_for_a_copy(tree: Path):
    files = shaping_files()
    assert files == sorted(files) and code_digest() == code_digest(tree)  # the same code anywhere: the same digest
    shaping = ("components/losses/methods/hbct.py", "components/training/loop.py", "components/models/heads/bt2.py")
    assert set(shaping) <= set(files)
    assert not CODE_EXCLUDED & set(files) and "components/indexing/stores/faiss/gallery_index.py" not in files
    assert len(code_digest()) == 64


def test_an_edit_of_a_shaping_file_changes_it_and_nothing_else_does(tree: Path):
    before = code_digest(tree)
    loss = tree / "components/losses/methods/hbct.py"
    os.utime(loss, (0, 0))  # mtimes are not content
    (tree / "components/losses/methods/__pycache__").mkdir()
    (tree / "components/losses/methods/__pycache__/hbct.cpython-311.pyc").write_bytes(b"bytecode")
    (tree / "components/data/download.py").write_text("# fetching is not shaping\n")
    (tree / "components/indexing/stores/faiss/gallery_index.py").write_text("# nor is serving\n")
    assert code_digest(tree) == before
    loss.write_text(loss.read_text() + "# a bug fix\n")
    fixed = code_digest(tree)
    assert fixed != before
    loss.rename(tree / "components/losses/methods/hbct_renamed.py")  # the same bytes under another path
    assert code_digest(tree) not in (before, fixed)
