"""The request's messages in the one shape every chat template accepts.

Strict templates (Gemma's official one, Mistral's, others) raise "Conversation roles must
alternate user/assistant/user/assistant" on anything else, and a server answers HTTP 400
to every turn after. What the bot assembles does not always alternate: an lcm summary is
a user message right before the user's next one, a failed turn leaves its unanswered
user message in the history for the next one to follow, a budget cut can leave an
answer whose question was cut off at the start. So every request goes through
`alternating` right before it is sent (`LLMClient.complete`), whatever built it: a
provider, ours or a third party's, the summarizer, reflect, recall. The stored history
is never changed, only what is sent.

The shape: one system message (every system message merged into it, in order), then
user and assistant turns alternating, starting with a user turn. An assistant turn that
calls tools is followed by the results (`tool` messages), then the assistant goes on;
that is alternation too (llama.cpp renders the results as the tool-call's answer).
"""

from __future__ import annotations

from typing import Any

__all__ = ["alternating"]

SEPARATOR = "\n\n"


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return [dict(p) for p in content]
    return [{"type": "text", "text": content}] if content else []


def _joined(first: Any, second: Any) -> Any:
    """Two contents as one: texts joined with a blank line; content parts (images) kept,
    in order."""
    if not isinstance(first, list) and not isinstance(second, list):
        return SEPARATOR.join(c for c in (first, second) if c) or first
    head, tail = _parts(first), _parts(second)
    if head and tail and head[-1].get("type") == "text" and tail[0].get("type") == "text":
        text = SEPARATOR.join(t for t in (head[-1].get("text"), tail[0].get("text")) if t)
        head[-1] = {**head[-1], "text": text}
        tail = tail[1:]
    return head + tail


def _merge(into: dict[str, Any], entry: dict[str, Any]) -> None:
    into["content"] = _joined(into.get("content"), entry.get("content"))
    calls = list(into.get("tool_calls") or []) + list(entry.get("tool_calls") or [])
    if calls:
        into["tool_calls"] = calls


def alternating(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` (Chat Completions entries) as one system message, then alternating
    turns: consecutive user (or assistant) messages merged into one, assistant and tool
    messages before the first user message dropped (their question is not in the
    context). The input is not modified."""
    system: dict[str, Any] | None = None
    out: list[dict[str, Any]] = []
    for entry in messages:
        role = entry.get("role")
        if role == "system":
            if system is None:
                system = dict(entry)
            else:
                _merge(system, entry)
            continue
        if not out and role != "user":
            continue
        if out and role in ("user", "assistant") and out[-1].get("role") == role:
            _merge(out[-1], entry)
            continue
        out.append(dict(entry))
    return ([system] if system is not None else []) + out
