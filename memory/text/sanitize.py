"""Making arbitrary text storable on both databases.

PostgreSQL `text` cannot hold NUL, and neither database can encode a lone UTF-16
surrogate (Python strings can carry one, e.g. from a broken client). Both are replaced
by U+FFFD at the storage boundary, identically on SQLite and PostgreSQL, so a hostile
message is stored (and answered) instead of failing the turn.

`clean_parameters` is that boundary for every statement: memory/storage/db.py hooks it into
every engine, so each string parameter (a message, a forget's needle, a search query's
LIKE pattern, a note, a username) reaches SQL cleaned the same way, whichever path it
took. Because writes and reads are cleaned alike, text looked up with a NUL finds what
was stored with U+FFFD. Code that also compares text in Python (a forget's needles
against notes) cleans it itself with `storable`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from memory.contract.types import Message, ToolCall

REPLACEMENT = "\ufffd"


def storable(text: str) -> str:
    if "\x00" in text:
        text = text.replace("\x00", REPLACEMENT)
    if text.isascii():  # no surrogate either; the common case, without an encoded copy
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Pairs up valid surrogate pairs, replaces lone ones.
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def storable_message(msg: Message) -> Message:
    """`msg` with every text it carries storable."""

    def maybe(text: str | None) -> str | None:
        return None if text is None else storable(text)

    return dataclasses.replace(
        msg,
        content=storable(msg.content or ""),
        tool_calls=[
            ToolCall(storable(c.id), storable(c.name), storable(c.arguments))
            for c in msg.tool_calls
        ],
        tool_call_id=maybe(msg.tool_call_id),
        name=maybe(msg.name),
        reasoning=maybe(msg.reasoning),
    )


def clean_parameters(  # type: ignore[no-untyped-def]
    conn, cursor, statement: str, parameters: Any, context, executemany: bool
) -> tuple[str, Any]:
    """A `before_cursor_execute` hook (retval=True): the statement's parameters with
    every string made storable. The driver's own form (dict, tuple, list of either for
    executemany) is kept; values that need nothing are passed through as they are."""
    return statement, _clean(parameters)


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        cleaned = {k: _clean(v) for k, v in value.items()}
        return value if all(cleaned[k] is value[k] for k in value) else cleaned
    if isinstance(value, (list, tuple)):
        items = [_clean(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return type(value)(items) if isinstance(value, list) else tuple(items)
    return value
