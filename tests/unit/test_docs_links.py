"""Every relative Markdown link in README.md and docs/ leads to a file that exists, and to a
heading that exists when it names one: the README sends newcomers to docs/ pages, and a moved
section must not leave them at a dead link."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def _prose_lines(path: Path) -> list[tuple[int, str]]:
    """Lines outside fenced code blocks, numbered from 1 (links in code are not links)."""
    lines: list[tuple[int, str]] = []
    in_fence = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            lines.append((number, line))
    return lines


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings (repeats get -1, -2, ...)."""
    seen: dict[str, int] = {}
    result: set[str] = set()
    for _, line in _prose_lines(path):
        match = HEADING.match(line)
        if not match:
            continue
        slug = _slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def relative_links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link in the file that is not to another site."""
    found: list[tuple[int, str]] = []
    for number, line in _prose_lines(path):
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            target = match.group(1)
            if not EXTERNAL.match(target):
                found.append((number, target))
    return found


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    problems: list[str] = []
    for number, target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        destination = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{number}: {target}"
        if not destination.exists():
            problems.append(f"{where}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            problems.append(f"{where}: no heading with anchor #{anchor}")
    return problems


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_lead_somewhere(path: Path) -> None:
    assert broken_links(path) == []


def test_the_checker_sees_a_broken_link(tmp_path: Path) -> None:
    """A missing file and a missing heading are both reported (the test above can fail)."""
    (tmp_path / "other.md").write_text("# A page\n\n## Quick start: `make run`\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n[ok](other.md#quick-start-make-run) [ok](#title) [web](https://example.com)\n"
        "[gone](missing.md) [no anchor](other.md#nowhere)\n"
        "```\n[in code](also-missing.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links(page, root=tmp_path) == [
        "page.md:4: missing.md: no such file",
        "page.md:4: other.md#nowhere: no heading with anchor #nowhere",
    ]


def test_readme_links_to_the_reference_pages() -> None:
    """The README's reference material lives in docs/ pages, each linked from the README."""
    targets = {target.partition("#")[0] for _, target in relative_links(ROOT / "README.md")}
    pages = "protocol transactions cluster configuration security acls quotas metrics storage cli"
    for page in (pages + " development spark console").split():
        assert f"docs/{page}.md" in targets
