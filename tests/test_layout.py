"""The house rules: imports point down the layers, the design the code cites is in the repository,
the registry alone knows where the stores live, modules split by cohesion and none passes 600 lines."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.conftest import REPO

PACKAGES = ("bctflow", "benchmarks", "components", "flows", "registry", "scripts")


def _sources(*packages: str) -> list[Path]:
    return sorted(p for pkg in packages for p in (REPO / pkg).rglob("*.py"))


def test_imports_only_point_down_and_packages_do_not_import_each_other_in_circles():
    """The layer and acyclicity contracts of pyproject.toml [tool.importlinter], checked by import-linter."""
    res = subprocess.run([str(Path(sys.executable).parent / "lint-imports")], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert f"Contracts: {len(contracts)} kept, 0 broken." in res.stdout


DESIGN_HEADING = re.compile(r"^#{2,3} §(\d+(?:\.\d+)?) ", flags=re.M)
DESIGN_CITATION = re.compile(r"design(?:\.md)? §(\d+(?:\.\d+)?)")


def design_headings() -> set[str]:
    """The § numbers headed on docs/design.md (the contents) or on any page under docs/design/ (the sections)."""
    pages = [REPO / "docs" / "design.md", *sorted((REPO / "docs" / "design").glob("*.md"))]
    return {n for page in pages for n in DESIGN_HEADING.findall(page.read_text())}


def unresolved_design_citations(texts: dict[str, str], headings: set[str]) -> dict[str, list[str]]:
    """Each § that ``texts`` (name → text) cite as ``docs/design.md §N.M`` and no heading holds → who cites it."""
    cited: dict[str, set[str]] = {}
    for name, text in texts.items():
        for section in DESIGN_CITATION.findall(text):
            cited.setdefault(section, set()).add(name)
    return {s: sorted(names) for s, names in cited.items() if s not in headings}


def test_every_design_citation_resolves_to_a_heading_of_docs_design_md():
    """A citation ``docs/design.md §N.M`` in the code or the tests names a heading §N.M of the design: on
    docs/design.md or on one of its pages under docs/design/."""
    texts = {str(p.relative_to(REPO)): p.read_text() for p in _sources(*PACKAGES, "tests")}
    assert any(DESIGN_CITATION.search(t) for t in texts.values()), "the code cites docs/design.md"
    assert unresolved_design_citations(texts, design_headings()) == {}


def test_a_design_citation_that_names_no_heading_is_unresolved():
    headings = design_headings()
    assert {"7.6", "10", "11"} <= headings  # a section of a page, the references, the last section
    nowhere = "§99.9"  # spelled apart, so that this file cites no such section itself
    texts = {"a.py": f"see docs/design.md §7.6 and design {nowhere}", "b.py": f"docs/design.md {nowhere}"}
    assert unresolved_design_citations(texts, headings) == {"99.9": ["a.py", "b.py"]}


def test_code_cites_nothing_outside_the_repository():
    outside = re.compile(r"papers/[\w-]+\.md|\.\./shared|\bissue #?\d+", re.I)
    found = [
        f"{p.relative_to(REPO)}: {m.group(0)}"
        for p in _sources(*PACKAGES, "tests")
        for m in outside.finditer(p.read_text())
    ]
    assert found == []


def test_only_the_registry_knows_the_stores_are_sqlite():
    mention = re.compile(r"\bsqlite\b|\blineage\.db\b", re.I)
    found = [
        str(p.relative_to(REPO))
        for p in _sources("bctflow", "benchmarks", "components", "flows", "scripts")
        if mention.search(p.read_text())
    ]
    assert found == []


#: a module over LOOK_AT lines is listed for a look (does it do one job?); over SPLIT_ABOVE it must split by cohesion
LOOK_AT, SPLIT_ABOVE = 400, 600


def test_no_module_is_over_600_lines_and_those_over_400_are_listed():
    """The size cap is a signal, not a target (docs/architecture.md, "When a module should split"): a module over
    600 lines fails; one between 400 and 600 is printed, to look at whether it does one job or two."""
    sizes = {str(p.relative_to(REPO)): len(p.read_text().splitlines()) for p in _sources(*PACKAGES)}
    for path, n in sorted(sizes.items()):
        if LOOK_AT < n <= SPLIT_ABOVE:
            print(f"{path}: {n} lines (over {LOOK_AT}: does it do one job?)")
    assert {path: n for path, n in sizes.items() if n > SPLIT_ABOVE} == {}


def test_no_consumer_asks_whether_a_split_is_in_memory_or_on_disk():
    """One split interface (components/data/sources/split.py): the application, the benchmark, the CLI and the
    stores read every split the same way — through its loader or a seeded sample — and never branch on what kind of
    split or source it is. Only the training data picks in-memory batches, through SourceDataset.resident()."""
    kinds = r"(ArrayDataset|ArraySource|SourceDataset|ImageSource|FileSource|WebDatasetSource|ManifestSource|"
    kinds += r"ImageFolderSource|StreamData|TensorData)"
    branch = re.compile(rf"isinstance\([^)]*\b{kinds}\b|\btype\([^)]*\)\s*(is|==)\s*{kinds}\b")
    consumers = _sources("bctflow", "benchmarks", "flows", "registry", "scripts")
    assert [str(p.relative_to(REPO)) for p in consumers if branch.search(p.read_text())] == []
    asks = {str(p.relative_to(REPO)) for p in _sources(*PACKAGES) if ".resident()" in p.read_text()}
    assert asks == {"components/training/data.py"}


def test_test_files_have_unique_names():
    """The tests are not packages (pytest's default rootdir import mode): two test files of one name in two folders
    cannot both be collected, so a clean checkout would fail to collect the second."""
    names: dict[str, list[str]] = {}
    for p in sorted((REPO / "tests").rglob("test_*.py")):
        names.setdefault(p.name, []).append(str(p.relative_to(REPO)))
    assert {n: ps for n, ps in names.items() if len(ps) > 1} == {}


def _top_level_names(tree: ast.Module) -> set[str]:
    """The names a module binds at its top level (definitions, assignments, imports), searched in every block."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def test_every_name_imported_from_the_project_exists_in_its_module():
    """`from benchmarks.scale import X` where scale.py no longer defines X fails only when that command runs (a
    renamed helper once broke `bctflow bench serve`, which no test imports): every project-internal from-import,
    in the packages and the tests, names something its module binds, or one of its submodules."""
    trees: dict[str, ast.Module] = {}
    for path in _sources(*PACKAGES, "tests"):
        mod = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        trees[mod] = ast.parse(path.read_text())
    bound = {
        mod: _top_level_names(tree) | {m.rpartition(".")[2] for m in trees if m.rpartition(".")[0] == mod}
        for mod, tree in trees.items()
    }
    stars = {
        mod: {
            n.module
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and n.module and any(a.name == "*" for a in n.names)
        }
        & set(trees)
        for mod, tree in trees.items()
    }
    for _ in range(3):  # `from X import *` re-exports X's names (chains of them)
        for mod, sources in stars.items():
            for source in sources:
                bound[mod] |= bound[source]
    missing = []
    for mod, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in bound:
                missing += [
                    f"{mod}:{node.lineno}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name != "*" and a.name not in bound[node.module]
                ]
    assert missing == []
