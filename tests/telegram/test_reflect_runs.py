"""Every reflect review leaves a changelog row, changed or not, that the console's
changelog shows: the session and the messages it read, and what it decided."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from bot.jobs.reflect.job import build_reflector
from tests.fakes.openai_server import FakeOpenAI, text, tool_call
from tests.fakes.telegram_server import FakeTelegram
from tests.reliability.harness import live_bot
from tests.web.site import VIEWER_TOKEN, client, login, serve, settings_for


def _rows(page: str) -> list[str]:
    body = page.split('id="changelog"')[1].split("</tbody>")[0]
    return [html.unescape(r) for r in body.split("<tr>")[2:]]  # past the header row


@pytest.mark.parametrize(("provider", "db"), [("simple", "sqlite"), ("lcm", "postgres")])
async def test_a_review_that_changed_nothing_is_on_the_console(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, provider: str, db: str
) -> None:
    async with live_bot(tmp_path, tg, llm, provider=provider, db_kind=db) as bot:
        chat = tg.private(42, "Alice")
        for said in ("the weather is grey", "nothing much happened today"):
            chat.send(said)
            await tg.wait_for_message(42, contains=f"echo: {said}")
        llm.push(text("Nothing worth keeping: no change."))
        report = await build_reflector(bot.services).run_cycle()
        assert [s.status for s in report.sessions] == ["unchanged"]
        # A second cycle with nothing new reads nothing and calls no model: no row.
        chat.send("I moved to Berlin")
        await tg.wait_for_message(42, contains="echo: I moved")
        llm.push(
            tool_call("memory", {"action": "profile_update", "content": "Lives in Berlin."}),
            text("Noted the move."),
        )
        report = await build_reflector(bot.services).run_cycle()
        assert [s.status for s in report.sessions] == ["changed"]
        assert [s.status for s in (await build_reflector(bot.services).run_cycle()).sessions] in (
            [],
            ["nothing_new"],
        )
        settings = settings_for(str(bot.engine.url), tmp_path, provider)
        async with serve(settings, bot.engine, bot.provider) as base, client() as http:
            await login(http, base, VIEWER_TOKEN)
            page = await (await http.get(f"{base}/changelog?scope=reflect")).text()
            assert "<option selected>reflect</option>" in page  # the filter offers it
    changed, unchanged = _rows(page)  # newest first
    session = "default:telegram:42"
    assert f">{session}<" in unchanged and ">review<" in unchanged and "reflect" in unchanged
    # What it read: the four messages of the first exchange; what it decided.
    assert re.search(r"session default:telegram:42: 4 new message\(s\), messages \d+–\d+", page)
    assert "no change" in unchanged and "Nothing worth keeping" in unchanged
    assert "1 change(s): profile_update" in changed
    # It read only what was new since the first review: the move and its echo.
    assert "2 new message(s) after " in page
    # Its versions frame the write it made (v_before → v_after, one apart).
    before, after = map(int, re.findall(r"(\d+) → (\d+)", changed)[0])
    assert after == before + 1
