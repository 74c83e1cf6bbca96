"""How a reply is written into the message that makes it: `replying to Ann: "see you at…"`,
the words it answers kept short. One form for a chat import's replies and the live bot's,
so the model, search hits and `/memory` read them the same way (memory/search/labels.py
shows them as stored)."""

from __future__ import annotations

QUOTED_WORDS = 8  # enough to recognise the message answered, not to repeat it


def first_words(text: str, n: int = QUOTED_WORDS) -> str:
    """The first `n` words of `text` on one line, `…` when there were more."""
    words = text.split()
    return " ".join(words[:n]) + ("…" if len(words) > n else "")


def reply_note(speaker: str, quote: str = "") -> str:
    """`replying to <speaker>: "<quote>"` (without the quote when there is none)."""
    return f'replying to {speaker}: "{quote}"' if quote else f"replying to {speaker}"
