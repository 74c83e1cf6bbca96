"""Console pages about what the bot did, driven through the bot on the fake servers:
the turn page (the operator's `/memory why`: a memory search, then a cited answer, with
each model call's tokens and the turn's latency), and the next context, whose numbers
are `/memory status`'s."""

from __future__ import annotations

import re
from pathlib import Path

from tests.fakes.openai_server import FakeOpenAI, text, tool_call
from tests.fakes.telegram_server import FakeTelegram
from tests.reliability.conftest import ask
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


FIGURES = re.compile(
    r"Next turn's context: ([\d,]+) of ([\d,]+) tokens \(system prompt ([\d,]+).*?"
    r"memory tool ([\d,]+)[,;] summaries ([\d,]+)[,;] messages ([\d,]+)",
    re.S,
)


def figures(text: str) -> tuple[int, ...]:
    m = FIGURES.search(text)
    assert m, text
    return tuple(int(g.replace(",", "")) for g in m.groups())


async def test_the_console_and_memory_status_give_the_same_context(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with live_bot(tmp_path, tg, llm, provider="lcm") as bot:
        chat = tg.private(42, "Alice")
        for i in range(8):
            chat.send(f"note {i} about the garden")
            await tg.wait_for_message(42, contains=f"echo: note {i} about")
        assert "Compacted" in await ask(tg, chat, "/compact")
        bot.settings.llm.context_window = 20_000  # as a llama.cpp server would report it
        status = await ask(tg, chat, "/memory status")
        # The console of the same bot: its settings, with the console's logins.
        web = settings_for(str(bot.engine.url), tmp_path, "lcm").web
        settings = bot.settings.model_copy(update={"web": web})
        async with serve(settings, bot.engine, bot.provider) as base, client() as http:
            await login(http, base, VIEWER_TOKEN)
            page = await (await http.get(f"{base}/sessions/default%3Atelegram%3A42")).text()
    shown = figures(status)
    assert figures(page.split('id="context-figures"')[1]) == shown
    total, budget, *parts = shown
    assert total == sum(parts) and parts[1] > 0 and parts[2] > 0  # a tool, a summary
    bar = page.split('id="context-bar"')[1].split("</svg>")[0]
    assert bar.count('<rect class="part') == 4 and f"budget {budget:,}" in bar
    assert "the model's window is 20,000" in status
    assert "the model's window is 20,000" in page and "model window 20,000" in bar
