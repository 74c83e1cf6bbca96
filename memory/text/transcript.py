"""Messages as plain text for a summarizer or a reviewer, and safe cut points.

Shared by the providers: a summarizer reads a transcript, not JSON, and a context window
cut between an assistant's tool call and its tool result is rejected by the
Chat Completions API, so every cut goes through `safe_start`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memory.contract.types import Message, Role, minute_utc


def render_message(msg: Message, message_id: int | None = None) -> str:
    """One message as `[time] role: text`, tool calls and results spelled out; with its
    id, `[time] (message 12) role: text` (what a reviewer cites)."""
    stamp = minute_utc(msg.created_at) + " " if msg.created_at else ""
    tag = f"(message {message_id}) " if message_id is not None else ""
    if msg.role == Role.TOOL:
        who = tag + (f"tool result ({msg.name})" if msg.name else "tool result")
        return f"[{stamp.strip()}] {who}: {msg.content}" if stamp else f"{who}: {msg.content}"
    text = msg.content
    if msg.tool_calls:
        calls = "; ".join(f"calls {c.name}({c.arguments})" for c in msg.tool_calls)
        text = f"{text}\n{calls}" if text else calls
    who = tag + msg.role
    return f"[{stamp.strip()}] {who}: {text}" if stamp else f"{who}: {text}"


def render_reviewed(items: Sequence[tuple[int, Message]]) -> str:
    """A transcript whose messages carry their ids (the review context reflect reads)."""
    return "\n\n".join(render_message(m, i) for i, m in items)


# A block's head as render_reviewed writes it: the ids a review showed.
_REVIEWED = re.compile(r"^(?:\[[^\]\n]*\] )?\(message (\d{1,18})\) ", re.MULTILINE)


def reviewed_ids(text: str) -> set[int]:
    """The message ids a review context shows (a caller still checks each belongs to the
    reviewed conversation: a message's own text may imitate a head)."""
    return {int(i) for i in _REVIEWED.findall(text)}


def render_transcript(msgs: Sequence[Message]) -> str:
    """The messages in order, one block per message, blank line between."""
    return "\n\n".join(render_message(m) for m in msgs)


def safe_start(msgs: Sequence[Message], start: int) -> int:
    """The index at or before `start` where a window `msgs[start:]` may begin without
    orphaning a tool result from the assistant message that called it.

    Moves the cut earlier (keeping more) past tool results; returns 0 when the whole
    list is one call group.
    """
    start = max(0, min(start, len(msgs)))
    while 0 < start < len(msgs) and msgs[start].role == Role.TOOL:
        start -= 1
    return start


def without_leading_results(msgs: Sequence[Message]) -> list[Message]:
    """`msgs` minus the tool results at its start (their call was cut off before it):
    the cut for a window that must shrink rather than grow."""
    start = 0
    while start < len(msgs) and msgs[start].role == Role.TOOL:
        start += 1
    return list(msgs[start:])
