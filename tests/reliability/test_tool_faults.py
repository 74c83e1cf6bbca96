"""Tool calls gone wrong, from the model, through the real bot on the fake servers: each
fault ends the turn in an answer or one clear line (never a stuck turn, never a
traceback), and the tool result tells the model what was wrong so it can correct itself.

The model is the harness's scripted one (`tool said: <result>` after a tool result, an
echo otherwise) with the faulty turns pushed ahead of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fakes.openai_server import FakeOpenAI, text, tool_call, tool_calls
from tests.fakes.telegram_server import Chat, FakeTelegram
from tests.reliability.conftest import ask
from tests.reliability.corpus import looks_like_traceback
from tests.reliability.harness import live_bot, scripted, tool_text


def tool_results(request: dict[str, Any]) -> list[str]:
    """The tool results a request carried back to the model, after its last user message."""
    msgs = request["messages"]
    last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
    return [str(m["content"]) for m in msgs[last_user:] if m["role"] == "tool"]


async def answered(tg: FakeTelegram, chat: Chat, words: str) -> str:
    """The bot's answer to `words`, checked to be no traceback; and the bot still answers
    the next message (the faulty turn did not leave the chat stuck)."""
    reply = await ask(tg, chat, words)
    assert reply.strip() and not looks_like_traceback(reply), reply
    # A turn that ended without an answer leaves its message to go to the model with the
    # next one (one user turn, for strict chat templates).
    unanswered = reply.startswith("Sorry, I couldn't answer")
    expected = f"echo: {words}\n\nstill there?" if unanswered else "echo: still there?"
    assert await ask(tg, chat, "still there?") == expected
    return reply


async def test_malformed_json_arguments_are_named_and_the_model_can_correct_them(
    tg: FakeTelegram, tmp_path: Path
) -> None:
    async with FakeOpenAI(scripted) as llm, live_bot(tmp_path, tg, llm):
        chat = tg.private(42, "Alice")
        llm.push(tool_call("memory", '{"action": "search", "text": '))
        reply = await answered(tg, chat, "find my notes")
        assert reply.startswith(
            "tool said: error: invalid arguments for memory: they are not valid JSON"
        ), reply
        assert "call it again with one JSON object" in reply

        # Valid JSON that is not an object, then a corrected call: the model recovers.
        llm.push(tool_call("memory", '["status"]'), tool_call("memory", {"action": "status"}))
        reply = await answered(tg, chat, "what do you remember?")
        first, second = tool_results(llm.requests[-2])
        assert "they must be a JSON object, not list" in first, first
        assert not second.startswith("error") and reply == "tool said: " + second, reply


async def test_an_unknown_function_is_answered_with_the_known_ones(
    tg: FakeTelegram, tmp_path: Path
) -> None:
    async with FakeOpenAI(scripted) as llm, live_bot(tmp_path, tg, llm):
        chat = tg.private(42, "Alice")
        llm.push(tool_call("weather", {"city": "Oslo"}))
        reply = await answered(tg, chat, "weather in Oslo?")
        assert reply == (
            "tool said: error: unknown tool 'weather' (available: memory); call one of those"
        ), reply


async def test_arguments_of_the_wrong_type_name_the_parameter(
    tg: FakeTelegram, tmp_path: Path
) -> None:
    async with FakeOpenAI(scripted) as llm, live_bot(tmp_path, tg, llm):
        chat = tg.private(42, "Alice")
        cases = {
            '{"action": "search", "text": "x", "limit": "ten"}': "limit must be an integer",
            '{"action": "search", "text": "x", "limit": true}': "limit must be an integer",
            '{"action": "search", "text": ["a", "b"]}': "text",
            '{"action": 7}': "action",
        }
        for args, named in cases.items():
            reply = await answered(tg, chat, tool_text(args))
            assert reply.startswith("tool said: error: ") and named in reply, (args, reply)


async def test_the_same_call_repeated_is_not_run_again_and_the_model_answers_next(
    tg: FakeTelegram, tmp_path: Path
) -> None:
    rule = "always answer in French"
    async with FakeOpenAI(scripted) as llm, live_bot(tmp_path, tg, llm):
        chat = tg.private(42, "Alice")
        # The same call, its keys in another order: a model going round in circles.
        llm.push(
            tool_call("memory", json.dumps({"action": "constraint_add", "text": rule})),
            tool_call("memory", json.dumps({"text": rule, "action": "constraint_add"})),
        )
        before = len(llm.requests)
        reply = await answered(tg, chat, "remember a rule")
        turn = llm.requests[before : before + 3]
        # Two rounds with tools, then one without: the repeat made the next round the last.
        assert [("tools" in r) for r in turn] == [True, True, False]
        ran, note = tool_results(turn[2])
        assert not ran.startswith("error") and ran == tool_results(turn[1])[0], ran
        assert note.startswith("error: you already called memory with exactly these")
        assert "it was not run again" in note and "last round of tool calls" in note
        assert reply == "tool said: " + note, reply

        listed = await ask(tg, chat, tool_text({"action": "constraint_list"}))
        assert listed.count(rule) == 1, listed


async def test_text_beside_tool_calls_is_shown_once_before_the_answer(
    tg: FakeTelegram, tmp_path: Path
) -> None:
    async with FakeOpenAI(scripted) as llm, live_bot(tmp_path, tg, llm):
        chat = tg.private(42, "Alice")
        llm.push(tool_calls([("memory", {"action": "status"})], content="Let me look that up."))
        reply = await answered(tg, chat, "how much do you remember?")
        assert reply.startswith("Let me look that up.\n\ntool said: "), reply
        assert reply.count("Let me look that up.") == 1

        # A final answer that repeats what was said beside the call shows it once.
        llm.push(
            tool_calls([("memory", {"action": "status"})], content="Checking."),
            text("Checking. All is well."),
        )
        assert await answered(tg, chat, "all well?") == "Checking. All is well."


async def test_calls_after_the_round_limit_end_in_one_clear_line(
    tg: FakeTelegram, tmp_path: Path
) -> None:
    async with (
        FakeOpenAI(scripted) as llm,
        live_bot(tmp_path, tg, llm, llm={"max_tool_rounds": 1}),
    ):
        chat = tg.private(42, "Alice")
        # Told the last round has come (no tools offered), it calls one all the same.
        llm.push(
            tool_call("memory", {"action": "status"}),
            tool_call("memory", {"action": "search", "text": "x"}),
        )
        before = len(llm.requests)
        reply = await answered(tg, chat, "look everywhere")
        assert reply == (
            "Sorry, I couldn't answer: the model kept calling tools after 1 round(s) of them "
            "without answering (llm.max_tool_rounds is 1). Your message is saved; please "
            "try again."
        ), reply
        last = llm.requests[before + 1]
        assert "tools" not in last and "last round of tool calls" in tool_results(last)[0]

        # Text with its calls in the last round: the text is the answer, the calls dropped.
        llm.push(
            tool_call("memory", {"action": "status"}),
            tool_calls([("memory", {"action": "status"})], content="Here is what I have."),
        )
        assert await answered(tg, chat, "and now?") == "Here is what I have."
