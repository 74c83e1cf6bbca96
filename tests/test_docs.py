"""The docs hold together: every relative link in README.md and docs/ (and the lcm
provider's README) reaches a file, and its `#anchor` a heading there; the README's first
screen is the quickstart, from @BotFather to the picture of a reply."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "plugins/lcm/README.md"]
_FENCED = re.compile(r"```.*?```", re.S)
_INLINE_CODE = re.compile(r"`[^`\n]*`")


def _prose(path: Path) -> str:
    """The text outside code, where a `[x](y)` is a link."""
    return _INLINE_CODE.sub("", _FENCED.sub("", path.read_text(encoding="utf-8")))


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as dashes, a
    repeated one numbered."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(
        r"^#{1,6} (.*)$", _FENCED.sub("", path.read_text(encoding="utf-8")), re.M
    ):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _prose(doc)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in _anchors(dest)):
            broken.append(target)
    assert not broken, broken


def test_the_readme_opens_with_the_quickstart() -> None:
    first_screen = "\n".join((ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:40])
    headings = re.findall(r"^## (.*)$", first_screen, re.M)
    assert headings[0] == "Quickstart", headings
    quickstart = first_screen.split("## Quickstart", 1)[1]
    for step in ("@BotFather", "TELEGRAM_BOT_TOKEN", "OPENAI_API_KEY", "make run", "mnemo run"):
        assert step in quickstart, step
    assert "](docs/chat.png)" in quickstart
    picture = ROOT / "docs" / "chat.png"
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert picture.stat().st_size < 200_000
