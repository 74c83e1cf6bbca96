"""Sources people can open (memory/origins.py), `/memory why` and cited answers, on
the real bot and the fake servers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram, User
from tests.reliability.conftest import ask
from tests.reliability.harness import live_bot

PROVIDERS = ["simple", "lcm"]
ALICE, BOB = 42, 43
GROUP = -1001234567


def message_ids(answer: str) -> list[str]:
    return sorted(re.findall(r"\[message (\d+)\]", answer), key=int)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_show_opens_a_message(
    provider: str, tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with live_bot(tmp_path, tg, llm, provider=provider, telegram={"group_mode": "always"}):
        group = tg.group(GROUP, "Team")
        alice = User(ALICE, "Alice")
        await ask(tg, group, "my locker code is PLATYPUS-7731", user=alice)
        ids = message_ids(await ask(tg, group, "/memory search PLATYPUS", user=alice))
        shown = await ask(tg, group, f"/memory show {ids[0]}", user=alice)
        assert "PLATYPUS-7731" in shown, shown
        assert "https://t.me/c/1234567/" in shown, shown
