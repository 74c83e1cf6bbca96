"""A model server that streams for ever cannot hold a turn (issue #35): the turn ends at
its deadline, the user gets what was streamed with a note (or one apology when nothing
was), the cut answer and its usage are stored, and the next message is answered. The
deadlines are short in the config; nothing here times the bot, the waits only bound how
long a test may hang."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import sqlalchemy as sa

from memory.storage.usage import usage_records
from tests.fakes.openai_server import FakeOpenAI, forever, hang, tool_call
from tests.fakes.telegram_server import FakeTelegram
from tests.reliability.conftest import ask
from tests.reliability.harness import live_bot, session_id, stored_history

ALICE = 42
ON_BOTH_DATABASES = pytest.mark.parametrize(
    "db_kind", [pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)]
)
NOTE = "(cut off: the answer took longer than 2 s)"


async def until_hung_up(llm: FakeOpenAI) -> None:
    """The fake stops writing once the bot has hung up on it."""
    for _ in range(600):
        if llm.streaming == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{llm.streaming} stream(s) still being written")


async def usage_kinds(bot: object) -> list[tuple[str, bool]]:
    async with bot.engine.connect() as conn:  # type: ignore[attr-defined]
        query = sa.select(usage_records).order_by(usage_records.c.at)
        rows = (await conn.execute(query)).mappings().all()
    return [(r["kind"], bool(r["estimated"])) for r in rows]


@ON_BOTH_DATABASES
async def test_a_streamed_forever_turn_ends_at_its_deadline(
    db_kind: str, tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    llm.push(forever("and on "))
    async with live_bot(
        tmp_path,
        tg,
        llm,
        db_kind=db_kind,
        llm={"timeout_s": 30, "answer_deadline_s": 60, "turn_deadline_s": 2},
    ) as bot:
        alice = tg.private(ALICE)
        alice.send("tell me a story")
        cut = await tg.wait_for_message(ALICE, NOTE, within=60)
        assert cut.text.startswith("and on and on"), cut.text
        await until_hung_up(llm)
        assert await ask(tg, alice, "and now?", within=60) == "echo: and now?"
        history = await stored_history(bot.engine, session_id(ALICE))
        assert history[0] == ("user", "tell me a story")
        assert history[1][0] == "assistant" and history[1][1].endswith(NOTE)
        assert history[2:] == [("user", "and now?"), ("assistant", "echo: and now?")]
        # The cut call's usage is stored, estimated; the next one is the server's report.
        assert await usage_kinds(bot) == [("chat", True), ("chat", False)]


async def test_the_turn_deadline_spans_its_tool_rounds(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    """A tool round, then a stream for ever: the turn's deadline, not the call's, ends it."""
    llm.push(tool_call("memory", {"action": "status"}), forever("still going "))
    async with live_bot(
        tmp_path, tg, llm, llm={"timeout_s": 30, "answer_deadline_s": 600, "turn_deadline_s": 2}
    ):
        alice = tg.private(ALICE)
        alice.send("check your memory and tell me")
        cut = await tg.wait_for_message(ALICE, NOTE, within=60)
        assert cut.text.startswith("still going"), cut.text
        await until_hung_up(llm)
        assert await ask(tg, alice, "next", within=60) == "echo: next"


async def test_a_deadline_with_nothing_streamed_is_one_apology(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    llm.push(hang())
    async with live_bot(
        tmp_path, tg, llm, llm={"timeout_s": 60, "answer_deadline_s": 2, "turn_deadline_s": 600}
    ):
        alice = tg.private(ALICE)
        answer = await ask(tg, alice, "hello?", within=60)
        assert answer == (
            "Sorry, I couldn't answer: the language model did not answer within 2 s. "
            "Your message is saved; please try again."
        )
        # The unanswered message goes to the model with the next one (one user turn).
        assert await ask(tg, alice, "again", within=60) == "echo: hello?\n\nagain"
