"""The README is the door, the manual is docs/ (issue 47): every page of docs/ is linked from the README, every
relative link of the README, docs/ and CONTRIBUTING.md reaches a file of the repository, and the README stays a
read of minutes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.release_free

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


def _links(page: Path) -> list[str]:
    return [m.group(1) for m in re.finditer(r"\]\(([^)\s]+)\)", page.read_text())]


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_relative_link_reaches_a_file(page):
    broken = [link for link in _links(page) if not link.startswith(("http://", "https://", "#", "mailto:"))
              and link.split("#")[0] and not (page.parent / link.split("#")[0]).exists()]
    assert not broken, broken


def test_the_readme_links_every_page_of_the_manual_and_stays_short():
    readme = ROOT / "README.md"
    linked = {link.split("#")[0] for link in _links(readme)}
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert pages <= linked, pages - linked
    assert len(readme.read_text().splitlines()) <= 250  # issue 62: the rules one line each, the rest in docs/
