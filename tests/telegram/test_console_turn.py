"""The console's turn page, the operator's `/memory why`: a turn driven through the bot
on the fake servers (a memory search, then a cited answer) shows its memory call and
what it returned, its citation, each model call's tokens and the turn's latency."""

from __future__ import annotations

import re
from pathlib import Path

from tests.fakes.openai_server import FakeOpenAI, text, tool_call
from tests.fakes.telegram_server import FakeTelegram
from tests.reliability.harness import live_bot
from tests.web.site import VIEWER_TOKEN, client, login, serve, settings_for


async def test_a_turn_page_shows_what_the_answer_rests_on(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with live_bot(tmp_path, tg, llm, provider="simple") as bot:
        engine = bot.engine
        chat = tg.private(42, "Alice")
        chat.send("we adopted a puppy called Rex")
        await tg.wait_for_message(42, contains="echo: we adopted")
        llm.push(
            tool_call("memory", {"action": "search", "text": "puppy"}),
            text("NAME_ANSWER: Rex [1]"),  # [1]: the search's first hit
        )
        chat.send("what was the puppy called?")
        await tg.wait_for_message(42, contains="NAME_ANSWER")
        settings = settings_for(str(engine.url), tmp_path, "simple")
        async with serve(settings, engine, bot.provider) as base, client() as http:
            await login(http, base, VIEWER_TOKEN)
            page = await (await http.get(f"{base}/sessions/default%3Atelegram%3A42")).text()
            turns = re.findall(r'href="(/sessions/[^"]+/turn/\d+)"', page)
            assert len(turns) == 2  # one a final answer; tool-call rows have none
            first = await (await http.get(base + turns[0])).text()
            assert 'id="no-calls"' in first and "echo: we adopted" in first
            second = await (await http.get(base + turns[1])).text()
            calls = second.split('id="calls"')[1].split("</ol>")[0]
            assert "search" in calls and "“puppy”" in calls
            assert re.search(r"returned <code>message \d+</code>", calls), calls
            cited = second.split('id="cited"')[1].split("</p>")[0]
            assert re.search(r"<code>message \d+</code>", cited), cited
            usage = second.split('id="turn-usage"')[1].split("</table>")[0]
            assert usage.count("<tr><td") == 2  # the tool call's model call, then the answer's
            assert 'id="latency"' in second
            r = await http.get(f"{base}/sessions/default%3Atelegram%3A42/turn/999999")
            assert r.status == 404
