"""Search within dates through Telegram: `/memory search since … before …` for people
and the memory tool's `since`/`before` for the model, on both databases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory.contract.types import utcnow
from tests.fakes.openai_server import FakeOpenAI, text, tool_call
from tests.fakes.telegram_server import FakeTelegram
from tests.telegram.harness import running_bot
from tests.telegram.test_commands import ask


@pytest.mark.parametrize(("provider", "db"), [("lcm", "sqlite"), ("simple", "postgres")])
async def test_people_search_within_dates(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, provider: str, db: str
) -> None:
    async with running_bot(tg, llm, tmp_path, provider=provider, db=db):
        tg.private(42).send("we decided to paint the kitchen blue")
        await tg.wait_for_message(42, contains="echo: we decided")
        today = utcnow().date().isoformat()
        found = await ask(tg, "/memory search since 7d decided kitchen", "matches for")
        assert "“decided kitchen” from " in found and "paint the kitchen blue" in found
        found = await ask(tg, f"/memory search before {today}T00:00 kitchen", "No matches")
        assert f"before {today} 00:00 UTC" in found
        found = await ask(tg, f"/memory search before 2099-01-01 since {today} kitchen", "2 ")
        assert "kitchen blue" in found
        await ask(tg, "/memory search since 2020-01-01 before 2020-02-01 kitchen", "No matches")
        # A bad date or range answers with the usage line, and a plain search is unchanged.
        await ask(tg, "/memory search since someday kitchen", "Usage: /memory search")
        # A time before year 1 in UTC is no date either (not an overflow).
        await ask(tg, "/memory search since 0001-01-01T00:00+05:00 x", "Usage: /memory search")
        found = await ask(tg, "/memory search since 0001-01-01 kitchen", "2 matches")
        assert "kitchen blue" in found
        await ask(tg, "/memory search since 2d before 3d kitchen", "since must be earlier")
        await ask(tg, "/memory search since", "matches for “since”")


async def test_the_model_searches_last_week(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path, provider="lcm"):
        tg.private(42).send("we decided on a dog called Rex")
        await tg.wait_for_message(42, contains="echo: we decided")
        llm.push(
            tool_call("memory", {"action": "search", "text": "decided", "since": "7d"}),
            tool_call("memory", {"action": "search", "text": "decided", "before": "2020-01-01"}),
            tool_call("memory", {"action": "search", "text": "decided", "since": "March"}),
            text("DONE"),
        )
        tg.private(42).send("what did we decide last week?")
        await tg.wait_for_message(42, contains="DONE")
        tools = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
        week, old, bad = tools[-3:]
        assert "dog called Rex" in week and "decided” (hybrid, both) from " in week, week
        assert old.startswith("no results for “decided” (hybrid, both) before 2020-01-01"), old
        assert "since must be a date" in bad, bad
        schema = json.dumps(llm.requests[-1]["tools"])
        assert "since 7d" in schema
