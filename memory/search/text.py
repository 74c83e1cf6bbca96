"""User text made safe for SQL search, and snippets of what was found.

Shared by the SQL providers: a LIKE pattern that matches `%`, `_` and `\\` literally,
FTS5 queries built from quoted terms (operators such as `AND`, `NEAR`, `-` or `*` in
user input are searched as words, never parsed), and snippets around the first match.
"""

from __future__ import annotations

import re

from memory.search.stopwords import STOP_WORDS
from memory.text.sanitize import storable

SNIPPET_CHARS = 500
# A query of more words than this keeps its first ones: a pasted page is not a query.
MAX_QUERY_TERMS = 32
_WORD = re.compile(r"\w+")


def clean_query(text: str) -> str:
    """`text` storable (no NUL, no lone surrogate) and stripped; "" means "no query"."""
    return storable(text or "").strip()


def like_pattern(text: str) -> str:
    """`%text%` with LIKE's metacharacters escaped (use with `escape="\\\\"`), so `%`,
    `_` and backslashes in user input match themselves."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def query_terms(text: str, skip: frozenset[str] = frozenset()) -> list[str]:
    """The distinct words of `text` (casefolded) not in `skip`, in order, at most
    MAX_QUERY_TERMS."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text):
        folded = word.casefold()
        if folded in skip:
            continue
        seen.setdefault(folded, None)
        if len(seen) >= MAX_QUERY_TERMS:
            break
    return list(seen)


def ranked_terms(text: str) -> list[str]:
    """The words a ranked search looks for: `query_terms` without English stop words.
    Empty when nothing is left ("who are you", "🐙", "%"): the caller then searches
    the text literally."""
    return query_terms(text, STOP_WORDS)


def fts5_string(text: str) -> str:
    """`text` as one FTS5 string (a phrase): double quotes doubled inside."""
    return '"' + text.replace('"', '""') + '"'


def snippet(content: str, needles: list[str], width: int = SNIPPET_CHARS) -> str:
    """At most `width` characters of `content` around the first occurrence of any of
    `needles` (case-insensitive), else from the start; cuts are marked with `…`."""
    if len(content) <= width:
        return content
    folded = content.casefold()
    hits = [i for i in (folded.find(n.casefold()) for n in needles if n) if i >= 0]
    at = min(hits) if hits else 0
    start = max(0, min(at - width // 4, len(content) - width)) if at > 0 else 0
    body = content[start : start + width - 2]
    return ("…" if start > 0 else "") + body + ("…" if start + len(body) < len(content) else "")
