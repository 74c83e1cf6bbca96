"""/memory forget through Telegram on the fake servers: a message deep in a chat
compacted twice is previewed, confirmed and then nowhere: search, the summaries (the
fake summarizer keeps distinctive words), the database file's bytes. In a group only the
bot's operators may forget; a user never reaches another user's memory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.channels.telegram.sessions import Place, base_session
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.summarizer import KeepingSummarizer
from tests.fakes.telegram_server import FakeTelegram, User
from tests.telegram.harness import running_bot
from tests.telegram.test_commands import ask

TOKEN = "Zqxforgetme"
NEEDLE = b"zqxforget"  # the porter stem FTS5 indexes it under starts so too
CODE = re.compile(r"/memory forget confirm ([0-9a-f]+) within")


def code_of(preview: str) -> str:
    """The code a forget preview asks to confirm with: its closing line's, the last."""
    found = CODE.findall(preview)
    assert found, preview
    return str(found[-1])


async def _chat(tg: FakeTelegram, n: int, start: int = 0, planted: int | None = None) -> None:
    for i in range(start, start + n):
        word = TOKEN if i == planted else f"Zword{i}"
        tg.private(42).send(f"line {i} {word}")
        await tg.wait_for_message(42, contains=f"echo: line {i} ")


async def _summaries(provider) -> str:  # type: ignore[no-untyped-def]
    async with provider.engine.connect() as conn:
        if provider.name == "lcm":
            rows = await conn.execute(sa.text("SELECT content FROM summaries"))
        else:
            rows = await conn.execute(sa.text("SELECT summary FROM simple_compactions"))
        return "\n".join(r[0] for r in rows)


@pytest.mark.parametrize("provider", ["lcm", "simple"])
async def test_forget_a_message_deep_in_a_twice_compacted_chat(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, provider: str
) -> None:
    async with running_bot(
        tg, llm, tmp_path, provider=provider, summarizer=KeepingSummarizer()
    ) as bot:
        await _chat(tg, 10, planted=3)
        await ask(tg, "/compact", "Compacted")
        await _chat(tg, 10, start=10)
        await ask(tg, "/compact", "Compacted")
        assert TOKEN in await _summaries(bot.provider)
        found = await ask(tg, f"/memory search {TOKEN}", TOKEN)
        quoted = re.findall(r"sum_[0-9a-f]{16}", found)  # lcm: summaries quoting it
        assert quoted or provider == "simple"
        for summary_id in quoted[:2]:
            await ask(tg, f"/memory expand {summary_id}", summary_id)

        # Someone else asking finds nothing of user 42's.
        tg.private(43).send(f"/memory forget {TOKEN}")
        other = await tg.wait_for(lambda: tg.bot_messages(43))
        assert "Nothing in your memory matches" in other[0].text
        tg.private(43).send("/memory forget confirm")
        await tg.wait_for(lambda: len(tg.bot_messages(43)) > 1)
        assert "Nothing to confirm" in tg.bot_messages(43)[1].text

        preview = await ask(tg, f"/memory forget {TOKEN}", "This would forget 2 message(s)")
        assert "line 3" in preview and "echo: line 3" in preview
        assert "summaries depend on them" in preview
        assert TOKEN in await _summaries(bot.provider)  # a preview changes nothing
        done = await ask(tg, f"/memory forget confirm {code_of(preview)}", "Forgot 2 message(s)")
        assert "rebuilt" in done
        await ask(tg, "/memory forget confirm", "Nothing to confirm")

        summaries = await _summaries(bot.provider)
        assert TOKEN not in summaries and "Zword2" in summaries and "Zword4" in summaries
        await ask(tg, f"/memory search {TOKEN}", "No matches")
        await ask(tg, "/memory search Zword4", "Zword4")
        for summary_id in quoted[:2]:  # rebuilt under new ids: the old ones are gone
            await ask(tg, f"/memory show {summary_id}", "ot found")
            await ask(tg, f"/memory expand {summary_id}", "ot found")
        await bot.conversations.drain()
        # The conversation goes on, and the model never sees the forgotten line again.
        before = len(llm.requests)
        await _chat(tg, 1, start=20)
        prompt = str(llm.requests[before:])
        assert TOKEN not in prompt and "Zword19" in prompt
        database = Path(str(bot.provider.engine.url.database))
        for path in (database, Path(f"{database}-wal")):
            if path.exists():
                assert NEEDLE not in path.read_bytes().lower(), path


async def test_in_a_group_only_operators_forget(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    alice, admin = User(11, "Alice"), User(7, "Admin")
    async with running_bot(tg, llm, tmp_path, provider="lcm", admin_ids=[7]):
        group = tg.group(-1001, "Team")
        group.send(f"@{tg.username} remember {TOKEN}", user=alice)
        await tg.wait_for_message(-1001, contains="echo:")
        group.send(f"/memory@{tg.username} forget {TOKEN}", user=alice)
        answer = await tg.wait_for_message(-1001, contains="operators only")
        assert "belongs to every member" in answer.text
        group.send(f"/memory@{tg.username} forget {TOKEN}", user=admin)
        preview = await tg.wait_for_message(-1001, contains="This would forget 2 message(s)")
        code = code_of(preview.text)
        group.send(f"/memory@{tg.username} forget confirm {code}", user=alice)
        await tg.wait_for(lambda: len(tg.bot_messages(-1001)) >= 4)
        assert "operators only" in tg.bot_messages(-1001)[-1].text
        # A member pressing the button is refused, and the button stays for an operator.
        [[button]] = preview.reply_markup["inline_keyboard"]  # type: ignore[index]
        group.press(preview, button["callback_data"], user=alice)
        await tg.wait_for(lambda: len(tg.bot_messages(-1001)) >= 5)
        assert "operators only" in tg.bot_messages(-1001)[-1].text
        assert preview.reply_markup is not None
        group.press(preview, button["callback_data"], user=admin)
        await tg.wait_for_message(-1001, contains="Forgot 2 message(s)")
        assert preview.reply_markup is None


async def test_the_confirmation_button(tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path) -> None:
    async with running_bot(tg, llm, tmp_path, provider="simple", summarizer=KeepingSummarizer()):
        await _chat(tg, 4, planted=1)
        await ask(tg, f"/memory forget {TOKEN}", "This would forget 2 message(s)")
        preview = tg.bot_messages(42)[-1]
        [[button]] = preview.reply_markup["inline_keyboard"]  # type: ignore[index]
        assert button["text"] == "Forget"
        before = len(tg.bot_messages(42))
        tg.private(42).press(preview, button["callback_data"])
        await tg.wait_for(lambda: len(tg.bot_messages(42)) > before)
        assert "Forgot 2 message(s)" in tg.bot_messages(42)[-1].text
        assert tg.calls_to("answerCallbackQuery")
        assert preview.reply_markup is None  # the buttons are gone once pressed
        # Pressed again (an old preview): nothing left to confirm.
        tg.private(42).press(preview, button["callback_data"])
        await tg.wait_for(lambda: len(tg.bot_messages(42)) > before + 1)
        assert "no longer valid" in tg.bot_messages(42)[-1].text
        await ask(tg, f"/memory search {TOKEN}", "No matches")


async def test_forget_everything(tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path) -> None:
    async with running_bot(
        tg, llm, tmp_path, provider="simple", summarizer=KeepingSummarizer()
    ) as bot:
        await _chat(tg, 3, planted=0)
        await ask(tg, "/new", "")
        await _chat(tg, 2, start=3)
        live = await bot.conversations.current_session(
            base_session("default", Place(42, None, False), 42)
        )
        await bot.provider.note_add(live, "secret", f"note {TOKEN}")
        tg.private(43).send("hello from someone else")
        await tg.wait_for_message(43, contains="echo: hello")
        preview = await ask(tg, "/memory forget everything", "2 conversation(s), 10 message(s)")
        assert "Reply /memory forget confirm" in preview
        code = code_of(preview)
        done = await ask(
            tg, f"/memory forget confirm {code}", "Erased: 2 session(s), 10 message(s)"
        )
        assert "1 note(s)" in done
        await ask(tg, "/memory notes", "No notes")
        await ask(tg, f"/memory search {TOKEN}", "No matches")
        [row] = await bot.provider.read_changelog(42, "default")
        assert row.scope == "erasure" and TOKEN not in row.after_text
        # Someone else's memory is untouched, and the user starts afresh.
        assert await bot.provider.read_changelog(43, "default") == []
        await _chat(tg, 1, start=9)
        await ask(tg, "/memory status", "Messages: 2")
