"""Splitting a reply into Telegram-sized pieces."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.channels.telegram.render.splitting import TELEGRAM_LIMIT, split_markdown, utf16_len

FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _open_fence_at_end(piece: str) -> bool:
    """Whether a piece leaves a code block open (CommonMark: a ``` opener's info string
    may not contain a backtick)."""
    open_marker = None
    for line in piece.split("\n"):
        m = FENCE_LINE.match(line)
        if not m:
            continue
        marker = m.group(1)
        if open_marker is None:
            if not (marker[0] == "`" and "`" in line[m.end() :]):
                open_marker = marker
        elif (
            marker[0] == open_marker[0]
            and len(marker) >= len(open_marker)
            and not line[m.end() :].strip()
        ):
            open_marker = None
    return open_marker is not None


def _without_fences_and_space(text: str) -> str:
    kept = [line for line in text.split("\n") if not FENCE_LINE.match(line)]
    return re.sub(r"\s", "", "".join(kept))


def test_short_text_is_one_piece() -> None:
    assert split_markdown("hello") == ["hello"]
    assert split_markdown("   \n ") == []


def test_paragraphs_are_kept_whole() -> None:
    para = ("word " * 150).strip()  # 749 characters
    text = "\n\n".join([para] * 12)
    pieces = split_markdown(text)
    assert len(pieces) > 1
    assert "".join(pieces) == text
    for piece in pieces[:-1]:
        assert piece.endswith("\n\n"), "every cut falls on a paragraph boundary"
        assert utf16_len(piece) <= TELEGRAM_LIMIT


def test_limit_counts_utf16_units() -> None:
    text = "😀" * 3000  # 6000 UTF-16 units, 3000 code points
    pieces = split_markdown(text)
    assert len(pieces) == 2
    assert all(utf16_len(p) <= TELEGRAM_LIMIT for p in pieces)
    assert "".join(pieces) == text
    # strict encoding fails on a lone surrogate, i.e. on a cut inside a pair
    for p in pieces:
        p.encode("utf-16-le")


def test_code_block_is_closed_and_reopened() -> None:
    code = "\n".join(f"print({i})  # some line of code" for i in range(400))
    text = f"Here is the code:\n\n```python\n{code}\n```\n\nDone."
    pieces = split_markdown(text)
    assert len(pieces) >= 3
    for piece in pieces:
        assert utf16_len(piece) <= TELEGRAM_LIMIT
        assert not _open_fence_at_end(piece)
    for piece in pieces[1:-1]:
        assert piece.startswith("```python\n")
    assert _without_fences_and_space("".join(pieces)) == _without_fences_and_space(text)


def test_a_20_kB_reply() -> None:
    text = "\n".join(f"Line {i}: " + "lorem ipsum dolor sit amet " * 3 for i in range(230))
    assert len(text) > 20_000
    pieces = split_markdown(text)
    assert len(pieces) == 6
    assert "".join(pieces) == text
    assert all(p.endswith("\n") for p in pieces[:-1])


def test_one_huge_line_is_cut_at_spaces() -> None:
    text = " ".join(["abcdefgh"] * 2000)
    pieces = split_markdown(text)
    assert "".join(pieces) == text
    for p in pieces[:-1]:
        assert p.endswith(" ")
        assert utf16_len(p) <= TELEGRAM_LIMIT


_alphabet = st.sampled_from(list("ab \n`~😀é#*_") + ["```", "```py\n", "\n```\n", "~~~\n"])
_texts = st.lists(_alphabet, min_size=300, max_size=1500).map("".join)


def test_an_open_fence_on_a_last_line_without_newline_still_fits() -> None:
    # Found by hypothesis in CI: the closing fence of the last piece needs a newline of
    # its own when the text does not end with one, and that unit was not counted.
    text = "```py\n" + ("a" * 100 + "\n") * 8 + "b" * 288
    pieces = split_markdown(text, 600)
    assert all(utf16_len(p) <= 600 for p in pieces)
    assert all(not _open_fence_at_end(p) for p in pieces)


@settings(max_examples=40, deadline=None)
@given(_texts, st.integers(min_value=500, max_value=1200))
def test_pieces_fit_and_lose_nothing(text: str, limit: int) -> None:
    pieces = split_markdown(text, limit)
    for p in pieces:
        assert p.strip()
        assert utf16_len(p) <= limit
        p.encode("utf-16-le")  # no lone surrogate
    for p in pieces[:-1]:
        # (the last piece may end open: the reply itself did)
        assert not _open_fence_at_end(p)
    assert _without_fences_and_space("".join(pieces)) == _without_fences_and_space(text)
    if "```" not in text and "~~~" not in text:
        assert "".join(pieces).strip() == text.strip() or "".join(pieces) == text
