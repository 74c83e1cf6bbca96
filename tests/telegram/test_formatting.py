"""Markdown -> Telegram entities, and the small text helpers of the channel."""

from __future__ import annotations

from bot.telegram.formatting import render
from bot.telegram.sessions import strip_mention
from bot.telegram.splitting import utf16_len


def test_render_gives_entities_and_keeps_the_source_as_fallback() -> None:
    [piece] = render("Use **care** with [links](https://example.org).")
    assert piece.text == "Use care with links."
    assert [(e.type, e.url) for e in piece.entities] == [("bold", None),
                                                        ("text_link", "https://example.org")]
    assert piece.fallback == "Use **care** with [links](https://example.org)."


def test_rendering_that_grows_is_split_again() -> None:
    # headings gain an emoji when rendered: a piece at the limit overflows after rendering
    text = "\n".join("# h" for _ in range(1365))  # 4094 characters of source
    pieces = render(text)
    assert len(pieces) >= 2
    assert all(utf16_len(p.text) <= 4096 for p in pieces)
    for p in pieces:
        for e in p.entities:
            assert e.offset + e.length <= utf16_len(p.text)


def test_blank_reply_renders_to_nothing() -> None:
    assert render("  \n\n ") == []


def test_strip_mention() -> None:
    assert strip_mention("@Mnemo_Bot what now?", "mnemo_bot") == "what now?"
    assert strip_mention("hey @mnemo_bot, and you", "mnemo_bot") == "hey , and you"
    assert strip_mention("ask @mnemo_bot_two instead", "mnemo_bot") == "ask @mnemo_bot_two instead"
    assert strip_mention("line one\n@mnemo_bot line two", "mnemo_bot") == "line one\nline two"
