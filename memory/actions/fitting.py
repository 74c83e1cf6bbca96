"""Text made to fit: on one line, or in one message (a chat's reply limit)."""

from __future__ import annotations

# Telegram's limit is 4096 characters; leave room for a channel's own decoration. A
# channel with another limit passes its own.
MAX_REPLY = 3900


def one_line(text: str, width: int) -> str:
    """`text` on one line (whitespace runs made one space), cut to `width` with "…"."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def clip(text: str, limit: int = MAX_REPLY) -> str:
    """Cut `text` to `limit` characters at a line boundary, saying that it was cut."""
    if len(text) <= limit:
        return text
    note = "\n… (cut to fit one message)"
    head = text[: limit - len(note)]
    cut = head.rfind("\n")
    if cut > limit // 2:
        head = head[:cut]
    return head.rstrip() + note


def listing(lines: list[str], header: str, limit: int = MAX_REPLY) -> str:
    """Header plus as many whole lines as fit, with a note of how many were left out."""
    out = [header]
    size = len(header)
    for i, line in enumerate(lines):
        rest = len(lines) - i
        note = f"… and {rest} more not shown"
        if size + 1 + len(line) + 1 + len(note) > limit:
            out.append(note)
            break
        out.append(line)
        size += 1 + len(line)
    return "\n".join(out)
