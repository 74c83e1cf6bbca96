"""The tool loop of one turn: ask the model, run the tools it calls, ask again.

Bounded by `llm.max_tool_rounds`: a model that keeps calling tools gets a last round
without tools (the results of the round before tell it so), so the turn ends with text;
a model that calls tools even then, without a word, ends the turn with one clear line
(an `LLMError`). An unknown tool, arguments that are not a JSON object and a tool that
raises become an error *result* the model reads (it can correct its call), never an
exception here. A call repeated within the turn (same name, same arguments) is not run
again: its result is a note pointing at the first; a round of nothing but repeats makes
the next round the last. Text the model writes next to its tool calls is part of the
answer, before the final round's text (and streamed so), never shown twice.
The runner only collects messages; the conversation service decides what to store. Images the user sent
with the turn ride on the current user message of every round's request, never on what
the runner collects (`bot.model.images`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.model.client import AssistantTurn, LLMError, OnDelta, TokenUsage
from bot.model.images import Image, with_images
from memory.actions.provenance import shown_answer
from memory.contract.types import Message, ToolCall

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


# Said to the model in the results of the round before its last (no tools offered).
LAST_ROUND_NOTE = (
    "\n\n[note: that was the last round of tool calls this turn; "
    "answer the user now from what you have, without calling tools]"
)


def _parse_arguments(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw or "{}")
    except ValueError as exc:  # JSONDecodeError, or a number too long to convert
        raise ValueError(f"they are not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"they must be a JSON object, not {type(value).__name__}")
    return value


def call_key(call: ToolCall) -> tuple[str, str]:
    """What makes two calls the same: the name and the arguments (as JSON, keys sorted,
    so `{"a":1,"b":2}` and `{"b": 2, "a": 1}` match; the raw text when not JSON)."""
    try:
        args = json.dumps(json.loads(call.arguments or "{}"), sort_keys=True)
    except (ValueError, RecursionError):
        args = call.arguments
    return call.name, args


def repeated_note(call: ToolCall) -> str:
    return (
        f"error: you already called {call.name} with exactly these arguments in this "
        "turn; it was not run again, its result is above. Answer from it, or call "
        "with different arguments."
    )


async def run_tool_call(call: ToolCall, tools: dict[str, Tool]) -> str:
    """Run one call; every failure becomes text for the model."""
    tool = tools.get(call.name)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        return f"error: unknown tool {call.name!r} (available: {known}); call one of those"
    try:
        args = _parse_arguments(call.arguments)
    except (ValueError, RecursionError) as exc:
        reason = str(exc) if isinstance(exc, ValueError) else "they are nested too deeply"
        return (
            f"error: invalid arguments for {call.name}: {reason}; "
            "call it again with one JSON object"
        )
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
    stores nothing of the turn then), also when the model's final answer is empty.
    `images` go with the prompt's last user message in every round."""
    by_name = {t.name: t for t in tools}
    schemas = [t.schema for t in tools] or None
    parts = [image.part() for image in images]  # encoded once for all the rounds
    result = TurnResult()
    said: list[str] = []  # text the model wrote next to its tool calls, in order
    seen: set[tuple[str, str]] = set()
    last = False
    for round_no in range(1, max_rounds + 2):
        last = last or round_no > max_rounds
        sent = prompt + result.messages
        turn = await llm.complete(
            with_images(sent, parts) if parts else sent,
            None if last else schemas,
            on_delta=_after(said, on_delta),
        )
        result.rounds = round_no
        result.usage += turn.tokens
        message = turn.to_message()
        if not turn.tool_calls or last:
            message.tool_calls = []
            if not message.content.strip():
                if turn.tool_calls:
                    raise LLMError(
                        f"the model kept calling tools after {round_no - 1} round(s) of "
                        f"them without answering (llm.max_tool_rounds is {max_rounds})"
                    )
                raise LLMError("the language model returned an empty answer")
            result.messages.append(message)
            result.text = shown_answer(result.messages)
            return result
        result.messages.append(message)
        result.tool_calls.extend(turn.tool_calls)
        if message.content.strip():
            said.append(message.content.strip())
        fresh = 0
        outputs: list[Message] = []
        for call in turn.tool_calls:
            key = call_key(call)
            if key in seen:
                output = repeated_note(call)
            else:
                seen.add(key)
                fresh += 1
                output = await run_tool_call(call, by_name)
            outputs.append(
                Message(role="tool", content=output, tool_call_id=call.id, name=call.name)
            )
        # Nothing new was asked: the model is going round in circles, so it answers next.
        last = fresh == 0 or round_no == max_rounds
        if last:
            for out in outputs:
                out.content += LAST_ROUND_NOTE
        result.messages.extend(outputs)
    raise AssertionError("unreachable")  # pragma: no cover


def _after(said: list[str], on_delta: OnDelta | None) -> OnDelta | None:
    """Stream a round's text after what the earlier rounds said (the channel shows the
    whole text so far, and each round's stream starts empty)."""
    if on_delta is None or not said:
        return on_delta
    head = "\n\n".join(said) + "\n\n"

    async def delta(text: str) -> None:
        await on_delta(head + text)

    return delta
