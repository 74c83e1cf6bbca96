"""Split Markdown into pieces that each fit one Telegram message.

Telegram counts a message's length in UTF-16 code units (an emoji outside the Basic
Multilingual Plane counts twice) and refuses text over 4096 of them. A reply is cut at
the last paragraph boundary that keeps a piece at least half full, else at the last line
boundary, else at the last space, else between two code points (never between the halves
of a surrogate pair: Python strings hold code points, and lengths are measured in UTF-16).

A piece that ends inside a fenced code block gets the fence closed, and the next piece
reopens it with the same opening line (language included), so every piece renders as
valid Markdown on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TELEGRAM_LIMIT = 4096

# A fence line: up to three spaces, then ``` or ~~~ (or longer), then an info string.
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
# Longer lines are never taken for fences: reopening one must cost little room.
_MAX_FENCE_LINE = 200


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, as Telegram counts it."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


@dataclass(frozen=True)
class _Fence:
    opener: str  # the opening line as written, without its newline
    char: str
    width: int

    @property
    def closer(self) -> str:
        return self.char * self.width


@dataclass(frozen=True)
class _Atom:
    """A line with its newline, or a part of an overlong line."""

    text: str
    size: int  # UTF-16 units
    fence_after: _Fence | None  # the code block still open after this atom
    ends_line: bool
    blank: bool


def _fence_step(line: str, open_fence: _Fence | None) -> _Fence | None:
    """The open code block after `line`, following CommonMark's fence rules closely
    enough for splitting (an info string with a backtick does not open a ``` fence)."""
    body = line.rstrip("\r")
    if len(body) > _MAX_FENCE_LINE:
        return open_fence
    m = _FENCE.match(body)
    if m is None:
        return open_fence
    marker, info = m.group(1), m.group(2)
    if open_fence is None:
        if marker[0] == "`" and "`" in info:
            return None
        return _Fence(body.strip(), marker[0], len(marker))
    if marker[0] == open_fence.char and len(marker) >= open_fence.width and not info.strip():
        return None
    return open_fence


def _cut(text: str, budget: int) -> list[str]:
    """Cut one overlong line into parts of at most `budget` UTF-16 units, at spaces when
    there are any in the second half of a part."""
    parts: list[str] = []
    while utf16_len(text) > budget:
        # Longest prefix within budget, counted in code points that may weigh 2 units.
        used, end = 0, 0
        for ch in text:
            w = 2 if ord(ch) > 0xFFFF else 1
            if used + w > budget:
                break
            used += w
            end += 1
        space = text.rfind(" ", 0, end)
        if space >= end // 2:
            end = space + 1
        parts.append(text[:end])
        text = text[end:]
    if text:
        parts.append(text)
    return parts


def _atoms(text: str, piece_budget: int) -> list[_Atom]:
    atoms: list[_Atom] = []
    fence: _Fence | None = None
    lines = text.split("\n")
    for i, line in enumerate(lines):
        last = i == len(lines) - 1
        if last and not line:
            break
        full = line if last else line + "\n"
        fence = _fence_step(line, fence)
        blank = not line.strip()
        parts = _cut(full, piece_budget)
        for k, part in enumerate(parts):
            atoms.append(
                _Atom(part, utf16_len(part), fence, ends_line=k == len(parts) - 1, blank=blank)
            )
    return atoms


def _closing(body: str, fence: _Fence | None) -> str:
    if fence is None:
        return ""
    return ("" if body.endswith("\n") else "\n") + fence.closer


def split_markdown(text: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Pieces of `text`, each at most `limit` UTF-16 units, none blank.

    With no code fences, the pieces concatenate back to `text` exactly.
    """
    if limit < 2 * (_MAX_FENCE_LINE + 2) + 16:
        raise ValueError(f"limit too small: {limit}")
    if not text.strip():
        return []
    if utf16_len(text) <= limit:
        return [text]

    # Room kept in every piece for a reopened fence line and a closing fence.
    reserve = 2 * (_MAX_FENCE_LINE + 2)
    atoms = _atoms(text, limit - reserve)
    pieces: list[str] = []
    i, n = 0, len(atoms)
    open_before: _Fence | None = None
    while i < n:
        prefix = open_before.opener + "\n" if open_before else ""
        size = utf16_len(prefix)
        j = i
        best_para = best_line = 0
        half = limit // 2
        while j < n:
            atom = atoms[j]
            # The closing fence as this piece would get it: its body would end with
            # this atom's text (the text's last line has no newline of its own).
            closing = _closing(atom.text, atom.fence_after)
            if size + atom.size + utf16_len(closing) > limit:
                break
            size += atom.size
            j += 1
            if size >= half:
                if atom.blank and atom.ends_line:
                    best_para = j
                if atom.ends_line:
                    best_line = j
        if j < n:  # the piece is full: back off to the best boundary seen
            if best_para:
                j = best_para
            elif best_line:
                j = best_line
        body = prefix + "".join(a.text for a in atoms[i:j])
        fence = atoms[j - 1].fence_after
        piece = body + _closing(body, fence)
        if piece.strip():
            pieces.append(piece)
        open_before = fence
        i = j
    return pieces
