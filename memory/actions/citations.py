"""The ids a model's answer cites, kept only when they are known.

Shared by delegated recall (memory/actions/delegated_recall.py: only what its material held)
and the chat turn's answer (memory/actions/provenance.py: only what the memory tool returned in
that turn), so an id a model invents, guesses or remembers from elsewhere (another
user's message) never reaches anyone as a source.

A citation is a bracket of ids, `[12]`, `[12, sum_ab]`, `[#12]`, `[message 12]`, not
followed by `(` (a Markdown link); a bracket with nothing id-like in it (`[Alice]`,
`[sic]`, `[2026-11-26]`) is left as written. An id named in words ("message 12") stays
only when known (else its word stays and the id goes), where the caller asks so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeVar

T = TypeVar("T")

_CITED = re.compile(r"\[([^\[\]]{1,400})\](?!\()")
_NAMED = re.compile(r"\b(message|summary|archive|note)\s+#?([\w-]{1,80})", re.IGNORECASE)
_SPLIT = re.compile(r"[\s,;]+")
# What a memory id looks like (a message's number, a summary's, a simple archive's), so
# that "[2026-11-26]" or "[v2]" is prose, not a citation of something unknown.
_ID_LIKE = re.compile(r"\d{1,19}|sum_[0-9a-f]+|archive-[\w.-]+")


def _id_like(token: str) -> bool:
    return bool(_ID_LIKE.fullmatch(token))


def cite(
    answer: str, known: Mapping[str, T], *, numbered: bool = False, named: bool = True
) -> tuple[str, list[T]]:
    """`answer` without the ids it cites that are not in `known`, and the known items it
    cites, in order of first citation. `numbered`: each kept citation shows the item's
    number in that order (`[1]`) instead of its id. `named`: drop unknown ids named in
    words too (delegated recall, whose whole answer is about its material; a chat answer
    keeps its words, "message 3" being as likely prose as a reference)."""
    cited: dict[str, T] = {}
    order: dict[str, int] = {}

    def keep(match: re.Match[str]) -> str:
        tokens = [t.strip("#") for t in _SPLIT.split(match.group(1)) if t.strip("#")]
        if not any(t in known or _id_like(t) for t in tokens):
            return match.group(0)  # not a citation
        kept: list[str] = []
        for token in tokens:
            if token in known and token not in kept:
                cited.setdefault(token, known[token])
                order.setdefault(token, len(order) + 1)
                kept.append(token)
        shown = [str(order[t]) if numbered else t for t in kept]
        return f"[{', '.join(shown)}]" if kept else ""

    def in_words(match: re.Match[str]) -> str:
        # Only ids: "the message 12 you sent" keeps its words when 12 is known.
        token = match.group(2)
        if token in known or not any(c.isdigit() for c in token):
            return match.group(0)
        return match.group(1)

    text = _CITED.sub(keep, answer)
    if named:
        text = _NAMED.sub(in_words, text)
    text = re.sub(r"[ \t]+([.,;:!?])", r"\1", re.sub(r"[ \t]{2,}", " ", text)).strip()
    return text, list(cited.values())
