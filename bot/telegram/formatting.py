"""Markdown from the model -> Telegram text plus message entities.

telegramify-markdown converts Markdown into plain text and `MessageEntity` ranges
(offsets in UTF-16 units), which is sturdier than MarkdownV2 escaping: nothing in the
model's text can break the parse. Each piece keeps its Markdown source as the plain-text
fallback sent when Telegram still refuses the entities.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import telegramify_markdown
from telegram import MessageEntity
from telegramify_markdown import RenderConfig

from bot.telegram.splitting import TELEGRAM_LIMIT, split_markdown, utf16_len

log = logging.getLogger(__name__)

# Our own config: the library's global one is shared mutable state.
_CONFIG = RenderConfig.isolated()


@dataclass(frozen=True)
class Piece:
    """One Telegram message: formatted text, its entities, and the plain fallback."""

    text: str
    entities: tuple[MessageEntity, ...]
    fallback: str


def _entities(raw: list[telegramify_markdown.MessageEntity]) -> tuple[MessageEntity, ...]:
    return tuple(
        MessageEntity(
            type=e.type,
            offset=e.offset,
            length=e.length,
            url=e.url,
            language=e.language,
            custom_emoji_id=e.custom_emoji_id,
        )
        for e in raw
    )


def render_piece(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[Piece]:
    """Render one Markdown piece (already split to size). The rendering is usually shorter
    than the source, but headings gain an emoji: a rare overflow is split again."""
    try:
        text, raw = telegramify_markdown.convert(markdown, config=_CONFIG)
    except Exception:  # a converter bug must never cost the user the reply
        log.warning("markdown conversion failed; sending plain text", exc_info=True)
        return [Piece(markdown, (), markdown)]
    if not text.strip():
        return [Piece(markdown, (), markdown)]
    if utf16_len(text) <= limit:
        return [Piece(text, _entities(raw), markdown)]
    return [
        Piece(part, _entities(ents), part)
        for part, ents in telegramify_markdown.split_entities(text, raw, limit)
    ]


def render(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[Piece]:
    """The whole reply as Telegram messages, in order; empty for blank text."""
    pieces: list[Piece] = []
    for chunk in split_markdown(markdown, limit):
        pieces.extend(render_piece(chunk, limit))
    return pieces


def plain_pieces(text: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """The reply as unformatted message texts (used while streaming)."""
    return split_markdown(text, limit)
