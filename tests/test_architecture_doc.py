"""docs/architecture.md's one list of the layout ("Every package and module") matches the tree: every module of
the six packages is listed, every listed path exists, and every path the document names elsewhere exists too."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

DOC = REPO / "docs" / "architecture.md"
HEADING = "## Every package and module"
PACKAGES = ("bctflow", "benchmarks", "components", "flows", "registry", "scripts")
#: modules not listed: a package's __init__.py (its folder's line says what it holds) and the Alembic revisions
UNLISTED = re.compile(r"(^|/)__init__\.py$|^registry/migrations/versions/")


def layout_list(text: str) -> list[str]:
    """The paths of the layout list: the first fenced block after :data:`HEADING`.

    A line that starts at the margin is a folder, its path from the repository root ending in ``/``; an indented
    line is a file of the folder above it, by name. Each line's first word is the path, the rest says what it holds.
    """
    if HEADING not in text:
        raise AssertionError(f"docs/architecture.md has no {HEADING!r} section; the layout list goes under it")
    block = re.search(r"^```[a-z]*\n(.*?)^```", text.split(HEADING, 1)[1], flags=re.S | re.M)
    assert block, f"no fenced block under {HEADING!r} in docs/architecture.md"
    paths: list[str] = []
    folder: str | None = None
    for n, line in enumerate(block.group(1).splitlines(), 1):
        if not line.strip():
            continue
        word = line.split()[0]
        if not line[0].isspace():
            assert word.endswith("/"), f"layout list line {n}: a folder line's path ends in '/': {line!r}"
            folder = word
            paths.append(folder)
        else:
            assert folder is not None, f"layout list line {n}: a file line comes before any folder line: {line!r}"
            assert "/" not in word, (
                f"layout list line {n}: a file line names a file of its folder, not a path: {line!r}"
            )
            paths.append(folder + word)
    return paths


def tree_modules() -> set[str]:
    """Every .py module of the six packages that the list must name, as repository-relative paths."""
    return {
        rel
        for pkg in PACKAGES
        for p in (REPO / pkg).rglob("*.py")
        if not UNLISTED.search(rel := p.relative_to(REPO).as_posix())
    }


def test_the_layout_list_names_every_module_and_nothing_that_is_not_there():
    listed = layout_list(DOC.read_text())
    twice = sorted({p for p in listed if listed.count(p) > 1})
    missing = sorted(tree_modules() - set(listed))
    absent = sorted(p for p in listed if not ((REPO / p).is_dir() if p.endswith("/") else (REPO / p).is_file()))
    assert not (missing or absent or twice), (
        f"docs/architecture.md's layout list is out of date: not listed {missing}; listed but not in the tree {absent};"
        f" listed twice {twice}; edit the list under {HEADING!r}"
    )


def test_every_package_folder_has_its_line():
    listed = set(layout_list(DOC.read_text()))
    folders = {Path(m).parent.as_posix() + "/" for m in tree_modules()}
    unlisted = sorted(folders - listed)
    assert unlisted == [], f"add a folder line for each of {unlisted} to the list under {HEADING!r}"


def test_every_path_the_document_names_exists():
    """Paths named in the prose and diagrams (``flows/generation/results.py``, ``registry/tracking/``) exist."""
    named = set(re.findall(rf"\b(?:{'|'.join(PACKAGES)})/(?:\w+/)*(?:\w+\.py)?", DOC.read_text()))
    assert named, "the document names paths"
    stale = sorted(p for p in named if not (REPO / p).exists())
    assert stale == [], f"docs/architecture.md names paths that are not in the tree: {stale}; name the ones that are"


@pytest.mark.parametrize(
    ("text", "paths"),
    [
        (
            f"{HEADING}\n\nprose\n\n```text\nflows/       app\n    plan.py   the plan\n\n"
            "flows/steps/   steps\n    zeta.py  ζ\n```\n\n```\nother/\n```\n",
            ["flows/", "flows/plan.py", "flows/steps/", "flows/steps/zeta.py"],
        ),
    ],
)
def test_the_list_is_read_folder_by_folder(text, paths):
    assert layout_list(text) == paths


@pytest.mark.parametrize(
    ("block", "error"),
    [
        ("    plan.py   before any folder\n", "a file line comes before any folder line"),
        ("flows    no slash\n", "a folder line's path ends in '/'"),
        ("flows/\n    steps/zeta.py   a path\n", "a file line names a file of its folder"),
    ],
)
def test_a_malformed_line_is_named(block, error):
    with pytest.raises(AssertionError, match=error):
        layout_list(f"{HEADING}\n```\n{block}```\n")
