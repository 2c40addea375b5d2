"""docs/ stays citable: every ``docs/<page>.md#<anchor>`` the code cites exists, every link
between the pages resolves, and every constant of ``compactd.core.constants`` is documented."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from compactd.core import constants

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

# Where the code cites docs/ from. clients/vscode's dependencies and build output are not ours.
CITING = ("compactd", "tests", "clients", "protocol", "README.md", "Makefile")
SKIPPED_DIRS = frozenset({"node_modules", "out", "__pycache__", ".venv"})
TEXT_SUFFIXES = frozenset({".py", ".ts", ".json", ".md", ".toml", ""})

CITATION = re.compile(r"docs/([A-Za-z0-9_-]+\.md)(?:#([A-Za-z0-9_-]+))?")
LINK = re.compile(r"\]\(([A-Za-z0-9_-]+\.md)?(?:#([A-Za-z0-9_-]+))?\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def slug(heading: str) -> str:
    """The anchor GitHub derives from a heading: lower case, punctuation dropped, spaces to
    hyphens."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"\s", "-", text)


def anchors(page: Path) -> list[str]:
    return [slug(h) for h in HEADING.findall(FENCE.sub("", page.read_text(encoding="utf-8")))]


def pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def citing_files() -> Iterator[Path]:
    for name in CITING:
        top = ROOT / name
        if top.is_file():
            yield top
            continue
        for path in top.rglob("*"):
            if (
                path.is_file()
                and path.suffix in TEXT_SUFFIXES
                and not SKIPPED_DIRS.intersection(path.relative_to(ROOT).parts)
            ):
                yield path


def test_slug_follows_github() -> None:
    assert slug("Auto-compact threshold") == "auto-compact-threshold"
    assert slug("Todo list and plan") == "todo-list-and-plan"
    assert slug("pytest-lsp") == "pytest-lsp"
    assert slug("What `compact/auto` does!") == "what-compactauto-does"


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_headings_are_unique_within_a_page(page: Path) -> None:
    found = anchors(page)
    assert len(found) == len(set(found)), sorted(a for a in found if found.count(a) > 1)


def test_every_citation_in_the_code_resolves() -> None:
    known = {page.name: set(anchors(page)) for page in pages()}
    broken = []
    cited = 0
    for path in citing_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for match in CITATION.finditer(text):
            cited += 1
            page, anchor = match.groups()
            if page not in known or (anchor is not None and anchor not in known[page]):
                line = text.count("\n", 0, match.start()) + 1
                broken.append(f"{path.relative_to(ROOT)}:{line}: {match.group(0)}")
    assert not broken, "\n".join(broken)
    assert cited > 50, "the code is expected to cite docs/ widely"


def test_links_between_pages_resolve() -> None:
    known = {page.name: set(anchors(page)) for page in pages()}
    broken = []
    for page in pages():
        for match in LINK.finditer(page.read_text(encoding="utf-8")):
            target, anchor = match.groups()
            target = target or page.name
            if target not in known or (anchor is not None and anchor not in known[target]):
                broken.append(f"{page.name}: {match.group(0)}")
    assert not broken, "\n".join(broken)


def test_every_reference_constant_is_documented() -> None:
    text = "\n".join(page.read_text(encoding="utf-8") for page in pages())
    names = [name for name in vars(constants) if name.isupper()]
    assert len(names) > 40
    missing = [name for name in names if not re.search(rf"\b{name}\b", text)]
    assert not missing, f"constants not mentioned in docs/: {missing}"
