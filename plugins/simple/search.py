"""Pieces of substring search: a LIKE pattern safe for any user text, and snippets."""

from __future__ import annotations

SNIPPET_CHARS = 500


def like_pattern(text: str) -> str:
    """`%text%` with LIKE's metacharacters escaped (use with `escape="\\\\"`), so `%`,
    `_` and backslashes in user input match themselves."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def snippet(content: str, text: str, width: int = SNIPPET_CHARS) -> str:
    """At most `width` characters of `content`, around the first match of `text` (or its
    first word) when there is one, else from the start; cuts are marked with `…`."""
    if len(content) <= width:
        return content
    folded = content.casefold()
    at = folded.find(text.casefold())
    if at < 0 and text.split():
        at = folded.find(text.split()[0].casefold())
    start = max(0, min(at - width // 4, len(content) - width)) if at > 0 else 0
    body = content[start : start + width - 2]
    return ("…" if start > 0 else "") + body + ("…" if start + len(body) < len(content) else "")
