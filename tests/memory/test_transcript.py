"""Transcripts for summarizers and safe cut points in a message list."""

from __future__ import annotations

from datetime import UTC, datetime

from memory.contract.types import Message, ToolCall
from memory.text.transcript import render_transcript, safe_start, without_leading_results

T = datetime(2026, 1, 2, 3, 4, tzinfo=UTC)
CALL = Message(
    "assistant", "", tool_calls=[ToolCall("c1", "memory", '{"action":"status"}')], created_at=T
)
RESULT = Message("tool", "ok", tool_call_id="c1", name="memory", created_at=T)


def test_render_spells_out_roles_times_and_tool_calls() -> None:
    text = render_transcript([Message("user", "hi", created_at=T), CALL, RESULT])
    assert text == (
        "[2026-01-02 03:04 UTC] user: hi\n\n"
        '[2026-01-02 03:04 UTC] assistant: calls memory({"action":"status"})\n\n'
        "[2026-01-02 03:04 UTC] tool result (memory): ok"
    )


def test_cuts_never_orphan_a_tool_result() -> None:
    msgs = [Message("user", "a"), CALL, RESULT, RESULT, Message("assistant", "done")]
    assert safe_start(msgs, 3) == 1 and safe_start(msgs, 2) == 1
    assert safe_start(msgs, 4) == 4 and safe_start(msgs, 99) == 5 and safe_start(msgs, -1) == 0
    assert without_leading_results(msgs[2:]) == [msgs[4]]
    assert without_leading_results(msgs) == msgs
