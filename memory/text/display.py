"""Stored text made safe to show on a terminal.

Anything a user or a model wrote may hold terminal control sequences (ESC starts one, BEL
rings, a C1 CSI acts like ESC-[) or Unicode bidi controls (a right-to-left override
makes `exe.txt` read as `txt.exe`). Shown raw, they act on the operator's terminal:
recolour it, retitle the window, hide or reorder what follows. Every CLI printer passes
its text through `terminal_safe`, which writes each such character as a visible escape
(`\\x1b`, `\\u202e`); all other text, right-to-left scripts and emoji included, is left
as it is. Escaping is for display only: what is stored is never changed, and a JSON
export stays lossless (`json_terminal_safe` writes those characters as JSON `\\uXXXX`
escapes, which read back as the same characters).
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, C1 controls; the bidi marks, embeddings,
# overrides and isolates; the line and paragraph separators (some terminals break there).
_UNSAFE_IN_LINES = (
    "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
)
_MULTILINE = re.compile(f"[{_UNSAFE_IN_LINES}]")
_ONE_LINE = re.compile(f"[\t\n{_UNSAFE_IN_LINES}]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def terminal_safe(text: str, *, multiline: bool = False) -> str:
    """`text` with every control and bidi character written as a visible escape. With
    `multiline`, newlines and tabs are kept (message bodies, logs); otherwise they are
    escaped too (a title or id on one line of a table)."""
    return (_MULTILINE if multiline else _ONE_LINE).sub(_escape, text)


def json_terminal_safe(json_text: str) -> str:
    """JSON text (as `json.dumps` writes it: control characters below U+0020 already
    escaped) with the other unsafe characters as `\\uXXXX` escapes: the same value when
    parsed, harmless when shown. Those characters occur only inside strings."""
    return _MULTILINE.sub(lambda m: f"\\u{ord(m.group()):04x}", json_text)
