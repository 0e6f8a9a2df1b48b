"""README.md is read in five minutes: at most 200 lines, the two commands CI runs at its top, every page of docs/
linked from it (and every link to docs/ pointing at a page that exists), and every example home relative."""

from __future__ import annotations

import json
import re

from components.evaluation import ILL_CONDITIONED
from tests.conftest import REPO

README = REPO / "README.md"
MAX_LINES = 200
INSTALL = 'python3 -m venv .venv && .venv/bin/pip install -e ".[dev]"'
COMMANDS = [f"{INSTALL} && .venv/bin/bctflow demo --reset", f"{INSTALL} && .venv/bin/python -m pytest"]
DOC_LINK = re.compile(r"\]\((docs/[^)#\s]+\.md)(?:#[^)\s]*)?\)")
ABSOLUTE_HOME = re.compile(r"(?:--home[ =]|BCTFLOW_HOME=)[/~][\w./]")


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def test_the_readme_is_at_most_200_lines():
    lines = _readme().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines (at most {MAX_LINES}): move a section to docs/"


def test_the_two_commands_open_the_readme_and_ci_runs_the_same_ones():
    text = _readme()
    first_block = text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert first_block == COMMANDS, "the README's first code block is the demo command and the test command"
    assert text.index("```bash") < 1200, "the two commands stand at the very top of the README"
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert INSTALL in ci and "\n.venv/bin/python -m pytest" in ci, ".ci/run installs and tests as the README says"


def test_every_docs_page_is_linked_from_the_readme_and_every_link_exists():
    linked = set(DOC_LINK.findall(_readme()))
    missing = sorted(link for link in linked if not (REPO / link).is_file())
    assert not missing, f"README.md links pages that do not exist: {missing}"
    pages = {f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")}
    unlinked = sorted(pages - linked)
    assert not unlinked, f"docs pages README.md does not link (add them to its Documentation table): {unlinked}"


def test_examples_use_relative_homes():
    texts = {"README.md": _readme()} | {
        f"docs/{p.name}": p.read_text(encoding="utf-8") for p in sorted((REPO / "docs").glob("*.md"))
    }
    absolute = [f"{name}: {m.group(0)}" for name, text in texts.items() for m in ABSOLUTE_HOME.finditer(text)]
    assert not absolute, f"examples name absolute homes (use a relative one, e.g. --home runs/demo): {absolute}"


LAYOUT_LINE = re.compile(r"^([\w.]+/)\s", flags=re.M)
#: what the README's map of the system must name
PARTS = {"query service": "flows/serving/", "Milvus": "milvus", "LanceDB": "lancedb", "Dask": "cluster"}


def _layout_block() -> str:
    return _readme().split("## Layout", 1)[1].split("```\n", 1)[1].split("```", 1)[0]


def test_the_layout_block_names_every_package_folder_and_only_folders_that_exist():
    named = LAYOUT_LINE.findall(_layout_block())
    absent = sorted(f for f in named if not (REPO / f).is_dir())
    assert not absent, f"README.md's layout block names folders that are not in the tree: {absent}"
    packages = {p.parent.name + "/" for p in REPO.glob("*/__init__.py")} | {"scripts/", "tests/", "docs/"}
    unnamed = sorted(packages - set(named))
    assert not unnamed, f"README.md's layout block does not name {unnamed}; add a line for each"
    top = ""
    for line in _layout_block().splitlines():  # a folder a line names: from the root, or inside the line's folder
        top = line.split()[0] if line[:1].strip() else top
        for path in re.findall(r"(?<![\w/])((?:[a-z_]+/)+)", line):
            assert (REPO / path).is_dir() or (REPO / top / path).is_dir(), (
                f"README.md's layout block names {path}, which is not a folder of the tree"
            )


def test_the_readme_map_names_the_query_service_the_stores_and_the_cluster_backfill():
    hood = _readme().split("Under the hood:", 1)[1].split("\n\n", 1)[0]
    layout = _layout_block()
    for part in PARTS:
        assert part in hood, f"README.md's 'Under the hood' does not name the {part}"
    for part, where in PARTS.items():
        assert where in layout.lower() or part in layout, f"README.md's layout block does not say where the {part} is"


def test_the_method_table_is_the_committed_common_denominator_numbers():
    """README's "Which alignment method" cells are each method's gain · P_com ± std (P_up) against the common φ*, as
    the equal-budget tables' results.json record them (``common_reference``), to the digits shown, with ⚠ where the
    mean denominator is below ILL_CONDITIONED."""
    text = README.read_text().split("## Which alignment method")[1].split("\n## ")[0]
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith(("| method", "| ---"))]
    assert len(rows) == 5
    results = REPO / "benchmarks" / "results" / "cpu_equal"
    made = {sc: json.loads((results / sc / "results.json").read_text())["common_reference"]["methods"]
            for sc in ("ext_class", "ext_data")}  # fmt: skip
    for row in rows:
        name, *cells = [c.strip() for c in row.strip("|").split("|")]
        for scenario, cell in zip(("ext_class", "ext_data"), cells, strict=True):
            m = made[scenario][name]
            gain, p_com, p_up = m["abs_gain"]["mean"], m["p_com_common"], m["p_up_common"]["mean"]
            ill = " ⚠" if abs(m["p_com_common_denominator"]["mean"]) < ILL_CONDITIONED else ""
            want = f"{gain:+.3f} · {p_com['mean']:.3f} ± {p_com['std']:.3f}{ill} ({p_up:+.3f})"
            assert cell == want, f"{name} {scenario}: README says {cell!r}, results.json {want!r}"
