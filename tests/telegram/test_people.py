"""People by name: the console shows the name and @username the chat last showed for
a user id (and a group's title for its chat id), updated when they change and gone
with an erasure. Driven through the bot on the fake Telegram, read through the
console over HTTP."""

from __future__ import annotations

from pathlib import Path

from bot.app.services import register_erasure_hooks
from memory.contract.tracing import unwrap
from memory.contract.types import Message, Owner, Session
from memory.storage import forgetting as fg
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram, User
from tests.telegram.harness import running_bot
from tests.waits import eventually
from tests.web.site import OPERATOR_TOKEN, client, login, serve, settings_for


async def test_the_console_names_people_as_the_chat_does(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path, provider="simple") as bot:
        engine = unwrap(bot.provider).engine
        settings = settings_for(str(engine.url), tmp_path, "simple")
        tg.private(42, "Alice", "alice").send("hello")
        await tg.wait_for_message(42, contains="echo: hello")
        group = tg.group(-1001, "Garden club")
        group.send(f"@{tg.username} the roses?", user=User(43, "Bob"))
        await tg.wait_for_message(-1001, contains="the roses?")
        async with serve(settings, engine, bot.provider) as base, client() as http:
            await login(http, base, OPERATOR_TOKEN)

            async def page(path: str) -> str:
                return await (await http.get(base + path)).text()

            # Names are written after the answer: polled, not signalled.
            await eventually(
                lambda: page("/memory/42"),
                lambda p: "Alice (@alice)" in p,
                what="the name on the memory page",
            )
            assert "Garden club" in await page("/memory/-1001")
            assert "Alice (@alice)" in await page("/sessions")
            # A new name is shown once the chat shows it.
            tg.private(42, "Alice Liddell", "alice").send("again")
            await tg.wait_for_message(42, contains="echo: again")
            await eventually(
                lambda: page("/memory/42"),
                lambda p: "Alice Liddell (@alice)" in p,
                what="the new name on the memory page",
            )
            # An erasure takes the name with the id's last memory: while another agent
            # keeps a conversation of 42, the name stays.
            register_erasure_hooks()
            other = Session("cli:42", agent_id="other", user_id=42)
            await bot.provider.append(other, Message(role="user", content="elsewhere"))
            await fg.erase(bot.provider, Owner(42, "default"), "a test")
            assert "Alice Liddell" in await page("/memory/42")
            await fg.erase(bot.provider, Owner(42, "other"), "a test")
            assert "Alice" not in await page("/memory/42")
            assert "Garden club" in await page("/memory/-1001")  # others' names stay
