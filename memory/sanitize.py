"""Making arbitrary text storable on both databases.

PostgreSQL `text` cannot hold NUL, and neither database can encode a lone UTF-16
surrogate (Python strings can carry one, e.g. from a broken client). Both are replaced
by U+FFFD at the storage boundary, identically on SQLite and PostgreSQL, so a hostile
message is stored (and answered) instead of failing the turn.
"""

from __future__ import annotations

REPLACEMENT = "\ufffd"


def storable(text: str) -> str:
    if "\x00" in text:
        text = text.replace("\x00", REPLACEMENT)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Pairs up valid surrogate pairs, replaces lone ones.
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text
