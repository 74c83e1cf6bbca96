"""The tool loop of one turn: ask the model, run the tools it calls, ask again.

Bounded by `llm.max_tool_rounds`: a model that keeps calling tools gets a last round
without tools, so the turn always ends with text. An unknown tool or a tool that raises
becomes an error *result* the model reads (it can recover), never an exception here.
The runner only collects messages; the pool decides what to store. Images the user sent
with the turn ride on the current user message of every round's request, never on what
the runner collects (`bot.images`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.images import Image, with_images
from bot.llm import AssistantTurn, LLMError, OnDelta, TokenUsage
from memory.types import Message, ToolCall

log = logging.getLogger(__name__)

ToolHandler = Callable[[dict[str, Any]], Awaitable[str]]


class Completer(Protocol):
    async def complete(
        self,
        messages: list[Message] | list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        on_delta: OnDelta | None = None,
    ) -> AssistantTurn: ...


@dataclass
class Tool:
    """A function the model may call: its OpenAI schema and the coroutine that runs it."""

    schema: dict[str, Any]  # {"type": "function", "function": {"name": ..., ...}}
    handler: ToolHandler

    @property
    def name(self) -> str:
        return str(self.schema["function"]["name"])


@dataclass
class TurnResult:
    """Every message the turn produced, in order, after the prompt it was given."""

    messages: list[Message] = field(default_factory=list)
    text: str = ""
    rounds: int = 0
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: TokenUsage = field(default_factory=TokenUsage)  # every round's, summed


def _parse_arguments(raw: str) -> dict[str, Any]:
    value = json.loads(raw or "{}")
    if not isinstance(value, dict):
        raise ValueError("arguments must be a JSON object")
    return value


async def run_tool_call(call: ToolCall, tools: dict[str, Tool]) -> str:
    """Run one call; every failure becomes text for the model."""
    tool = tools.get(call.name)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        return f"error: unknown tool {call.name!r} (available: {known})"
    try:
        args = _parse_arguments(call.arguments)
    except ValueError as exc:
        return f"error: invalid arguments for {call.name}: {exc}"
    try:
        return await tool.handler(args)
    except Exception as exc:  # a tool bug must not kill the user's turn
        log.warning("tool %s failed: %s", call.name, exc, exc_info=True)
        return f"error: {call.name} failed: {exc}"


async def run_turn(
    llm: Completer,
    prompt: list[Message],
    tools: list[Tool],
    *,
    max_rounds: int,
    on_delta: OnDelta | None = None,
    images: Sequence[Image] = (),
) -> TurnResult:
    """Run the model with tools until it answers in text. Raises LLMError (the caller
    stores nothing of the turn then) or when the model's final answer is empty.
    `images` go with the prompt's last user message in every round."""
    by_name = {t.name: t for t in tools}
    schemas = [t.schema for t in tools] or None
    parts = [image.part() for image in images]  # encoded once for all the rounds
    result = TurnResult()
    for round_no in range(1, max_rounds + 2):
        last = round_no > max_rounds
        sent = prompt + result.messages
        turn = await llm.complete(
            with_images(sent, parts) if parts else sent,
            None if last else schemas,
            on_delta=on_delta,
        )
        result.rounds = round_no
        result.usage += turn.tokens
        message = turn.to_message()
        if not turn.tool_calls or last:
            message.tool_calls = []
            if not message.content.strip():
                raise LLMError("the language model returned an empty answer")
            result.messages.append(message)
            result.text = message.content
            return result
        result.messages.append(message)
        result.tool_calls.extend(turn.tool_calls)
        for call in turn.tool_calls:
            output = await run_tool_call(call, by_name)
            result.messages.append(
                Message(role="tool", content=output, tool_call_id=call.id, name=call.name)
            )
    raise AssertionError("unreachable")  # pragma: no cover
