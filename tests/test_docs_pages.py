"""The documentation stays readable: no hand-written page under docs/ (nor benchmarks/results/README.md) passes 600
lines, docs/design.md is the design's contents list, linking every § heading of its pages under docs/design/, and
every link between the pages leads to a page and a heading of it."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from tests.conftest import REPO

MAX_LINES = 600
#: the first lines of a page that a command writes (docs/lineage-json.md): its length is its source's, not prose
GENERATED = "<!-- GENERATED"
DESIGN = REPO / "docs" / "design.md"
SECTION = re.compile(r"^#{2,3} (§(\d+(?:\.\d+)?) .+)$", flags=re.M)
LINK = re.compile(r"\[([^\]]+)\]\(([^)#\s]+)(?:#([^)\s]*))?\)")


def _hand_written_pages() -> list[Path]:
    pages = [*sorted((REPO / "docs").rglob("*.md")), REPO / "benchmarks" / "results" / "README.md"]
    return [p for p in pages if GENERATED not in "".join(p.read_text(encoding="utf-8").splitlines(True)[:5])]


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation and symbols dropped, each space a hyphen."""
    kept = "".join(c for c in heading.lower() if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")


def _design_pages() -> dict[str, str]:
    """Each page under docs/design/ by its link from docs/design.md (``design/<name>.md``) → its text."""
    return {f"design/{p.name}": p.read_text(encoding="utf-8") for p in sorted((REPO / "docs" / "design").glob("*.md"))}


def test_no_hand_written_docs_page_passes_600_lines():
    pages = _hand_written_pages()
    assert REPO / "docs" / "design.md" in pages and REPO / "docs" / "lineage-json.md" not in pages
    long = {
        str(p.relative_to(REPO)): n for p in pages if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}, f"pages over {MAX_LINES} lines (split them by topic, or move superseded notes out): {long}"


def test_anchor_is_githubs():
    assert (
        anchor("§7.6 A backfill: full or partial, resumable, atomic")
        == "76-a-backfill-full-or-partial-resumable-atomic"
    )
    assert anchor("§9.2 u = 1 − tanh(√K‖z‖)") == "92-u--1--tanhkz"
    assert anchor("§7.7 ζ restart") == "77-ζ-restart"


def test_design_md_links_every_section_of_its_pages_and_holds_none_itself():
    text = DESIGN.read_text(encoding="utf-8")
    assert SECTION.findall(text) == [], "docs/design.md is the contents: each § section goes on a page of docs/design/"
    pages = _design_pages()
    assert pages, "the design's sections are on pages under docs/design/"
    listed = {(label, page, frag) for label, page, frag in LINK.findall(text)}
    unlisted = [
        f"{page}: {heading}"
        for page, page_text in pages.items()
        for heading, _ in SECTION.findall(page_text)
        if (heading, page, anchor(heading)) not in listed
    ]
    assert unlisted == [], (
        f"docs/design.md's contents do not link these headings (as [heading](page#anchor)): {unlisted}"
    )


def test_every_link_between_the_pages_leads_to_a_page_and_a_heading_of_it():
    """A link from README.md, a page under docs/ or one of benchmarks/results/ to another page (``page.md`` or
    ``page.md#anchor``) names a page that exists and, with an anchor, a heading of it: moving a section to another
    page moves its links."""
    pages = [
        REPO / "README.md",
        *sorted((REPO / "docs").rglob("*.md")),
        *sorted((REPO / "benchmarks" / "results").glob("*.md")),
    ]
    broken = []
    for page in pages:
        for _, target, frag in LINK.findall(page.read_text(encoding="utf-8")):
            if not target.endswith(".md") or "://" in target:
                continue
            linked = (page.parent / target).resolve()
            if not linked.is_file():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such page)")
            elif frag and frag not in {anchor(h) for h in re.findall(r"^#+ (.+)$", linked.read_text(), flags=re.M)}:
                broken.append(f"{page.relative_to(REPO)}: {target}#{frag} (no such heading)")
    assert broken == []


def test_the_references_come_last():
    """The contents end with the references (§10), after §11: they are read last, whatever their number."""
    sections = [label for label, _, _ in LINK.findall(DESIGN.read_text(encoding="utf-8")) if label.startswith("§")]
    assert sections[-1] == "§10 References" and "§11 Upgrade routes: bridges between generations" in sections
