"""Markdown from the model -> Telegram text plus message entities.

`bot.channels.telegram.render.markdown` turns the model's Markdown into the text Telegram shows and
`MessageEntity` ranges (offsets in UTF-16 units), removing only the Markdown markers it
defines, so no character the model wrote is lost; entities rather than MarkdownV2
escaping, so nothing in the model's text can break the parse. Each piece keeps its
Markdown source as the plain-text fallback sent when Telegram still refuses the entities.
"""

from __future__ import annotations

from dataclasses import dataclass

from telegram import MessageEntity

from bot.channels.telegram.render.markdown import render_markdown
from bot.channels.telegram.render.splitting import TELEGRAM_LIMIT, split_markdown, utf16_len


@dataclass(frozen=True)
class Piece:
    """One Telegram message: formatted text, its entities, and the plain fallback."""

    text: str
    entities: tuple[MessageEntity, ...]
    fallback: str


def render_piece(markdown: str) -> Piece:
    """Render one Markdown piece (already split to size: rendering only removes
    characters, so it still fits). Text that would show blank (only markers, as an
    empty code block) is sent as written."""
    rendered = render_markdown(markdown)
    text = rendered.text
    if not text.strip():
        return Piece(markdown, (), markdown)
    entities = tuple(
        MessageEntity(
            type=s.type,
            offset=utf16_len(text[: s.start]),
            length=utf16_len(text[s.start : s.end]),
            url=s.url,
            language=s.language,
        )
        for s in sorted(rendered.spans, key=lambda s: (s.start, -s.end))
    )
    # Refused formatting: the source, whose markers still say what was meant (a link's
    # URL included, which the unformatted text would lose).
    return Piece(text, entities, markdown)


def render(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[Piece]:
    """The whole reply as Telegram messages, in order; empty for blank text."""
    return [render_piece(chunk) for chunk in split_markdown(markdown, limit)]


def plain_pieces(text: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """The reply as unformatted message texts (used while streaming)."""
    return split_markdown(text, limit)
