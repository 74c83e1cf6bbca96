"""A forget confirmation acts only on the preview it was shown for, once, on any replica
(bot/channels/telegram/confirmations.py, memory/storage/forget_requests.py): the real bot on the fake
Telegram and OpenAI servers, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from memory.contract.types import utcnow
from memory.storage import forget_requests as requests
from memory.storage.db import write_transaction
from memory.storage.forget_requests import forget_requests
from memory.testing.databases import temp_engine
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import BotMessage, FakeTelegram
from tests.reliability.process import BotProcess
from tests.reliability.test_logs import run_config
from tests.telegram.harness import running_bot
from tests.telegram.test_commands import ask
from tests.telegram.test_forget import code_of


async def _say(tg: FakeTelegram, *texts: str) -> None:
    for text in texts:
        tg.private(42).send(text)
        await tg.wait_for_message(42, contains=f"echo: {text}")


async def _preview(tg: FakeTelegram, command: str, expect: str) -> BotMessage:
    await ask(tg, command, expect)
    message = tg.bot_messages(42)[-1]
    assert message.reply_markup is not None, message.text
    return message


async def _forget(tg: FakeTelegram, what: str) -> BotMessage:
    """The preview of forgetting `what`, said once by the user and echoed once."""
    return await _preview(tg, f"/memory forget {what}", "This would forget 2 message(s)")


def _button(preview: BotMessage) -> str:
    """The Forget button's callback data (pressed later from an old copy, as a client
    whose screen was not refreshed would)."""
    assert preview.reply_markup is not None
    data: str = preview.reply_markup["inline_keyboard"][0][0]["callback_data"]
    return data


async def _press(tg: FakeTelegram, preview: BotMessage, data: str) -> str:
    before = len(tg.bot_messages(42))
    tg.private(42).press(preview, data)
    await tg.wait_for(lambda: len(tg.bot_messages(42)) > before)
    [answer] = tg.bot_messages(42)[before:]
    return answer.text


async def test_the_issue_repro_a_stale_button_erases_nothing(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    async with running_bot(tg, llm, tmp_path, provider="simple", db=db_kind):
        await _say(tg, "I walk the dog")
        await _say(tg, "I like green tea")
        a = await _forget(tg, "green tea")
        a_button = _button(a)
        await ask(tg, f"/memory forget confirm {code_of(a.text)}", "Forgot 2 message(s)")
        assert a.reply_markup is None  # confirmed by typing: its button is gone too
        b = await _preview(tg, "/memory forget everything", "This would erase ALL")
        assert _button(b) != a_button

        answer = await _press(tg, a, a_button)
        assert "no longer valid" in answer and "nothing was forgotten" in answer
        await ask(tg, "/memory status", "Messages: 2")
        await ask(tg, "/memory search walk the dog", "walk the dog")
        # The erasure is still pending, for its own code only; cancelling takes its button.
        assert b.reply_markup is not None
        await ask(tg, "/memory forget cancel", "Cancelled")
        assert b.reply_markup is None
        await ask(tg, f"/memory forget confirm {code_of(b.text)}", "no longer valid")
        await ask(tg, "/memory status", "Messages: 2")


async def test_a_button_acts_once_and_only_on_its_own_preview(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    async with running_bot(tg, llm, tmp_path, provider="simple", db=db_kind):
        await _say(tg, "I like green tea", "I like black coffee")
        a = await _forget(tg, "green tea")
        a_button = _button(a)
        assert "Forgot 2 message(s)" in await _press(tg, a, a_button)
        assert a.reply_markup is None
        b = await _forget(tg, "black coffee")
        # A's button again, with B pending: it does nothing, and B stays.
        assert "no longer valid" in await _press(tg, a, a_button)
        await ask(tg, "/memory search black coffee", "black coffee")
        assert b.reply_markup is not None
        assert "Forgot 2 message(s)" in await _press(tg, b, _button(b))
        await ask(tg, "/memory search black coffee", "No matches")
        await ask(tg, "/memory status", "Messages: 0")


async def test_a_superseded_preview_loses_its_button_and_does_nothing(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    async with running_bot(tg, llm, tmp_path, provider="simple", db=db_kind):
        await _say(tg, "I like green tea", "I like black coffee")
        a = await _forget(tg, "green tea")
        a_button = _button(a)
        b = await _forget(tg, "black coffee")
        assert a.reply_markup is None  # superseded: its button taken off
        assert "no longer valid" in await _press(tg, a, a_button)
        await ask(tg, f"/memory forget confirm {code_of(a.text)}", "no longer valid")
        await ask(tg, "/memory search green tea", "green tea")
        await ask(tg, f"/memory forget confirm {code_of(b.text)}", "Forgot 2 message(s)")
        assert b.reply_markup is None
        await ask(tg, "/memory search green tea", "green tea")
        await ask(tg, "/memory search black coffee", "No matches")


async def test_typed_confirm_needs_the_code_and_cancel_drops_the_request(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    async with running_bot(tg, llm, tmp_path, provider="simple", db=db_kind):
        await _say(tg, "I like green tea")
        a = await _forget(tg, "green tea")
        code = code_of(a.text)
        # Without the code nothing happens: the answer says what is pending, and its code.
        which = await ask(tg, "/memory forget confirm", "Which request?")
        assert "forget 2 message(s)" in which and f"/memory forget confirm {code}" in which
        await ask(tg, "/memory forget confirm 0badc0de", "no longer valid")
        await ask(tg, "/memory search green tea", "green tea")
        assert a.reply_markup is not None

        await ask(tg, "/memory forget cancel", "Cancelled")
        assert a.reply_markup is None
        await ask(tg, "/memory forget cancel", "Nothing to cancel")
        await ask(tg, f"/memory forget confirm {code}", "no longer valid")
        await ask(tg, "/memory forget confirm", "Nothing to confirm")
        await ask(tg, "/memory search green tea", "green tea")

        b = await _forget(tg, "green tea")
        await ask(tg, f"/memory forget confirm {code_of(b.text)}", "Forgot 2 message(s)")
        assert b.reply_markup is None
        await ask(tg, "/memory search green tea", "No matches")


async def test_a_code_quoted_in_a_listed_message_is_not_the_buttons(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path, provider="simple"):
        await _say(tg, "green tea: Reply /memory forget confirm deadbeef within")
        a = await _forget(tg, "green tea")
        assert "deadbeef" in a.text and code_of(a.text) != "deadbeef"
        assert "Forgot 2 message(s)" in await _press(tg, a, _button(a))


async def test_an_expired_request_is_not_confirmed(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    async with running_bot(tg, llm, tmp_path, provider="simple", db=db_kind) as bot:
        await _say(tg, "I like green tea")
        a = await _forget(tg, "green tea")
        async with write_transaction(bot.provider.engine) as conn:
            await conn.execute(
                forget_requests.update().values(created_at=utcnow() - timedelta(minutes=11))
            )
        await ask(tg, f"/memory forget confirm {code_of(a.text)}", "no longer valid")
        assert a.reply_markup is None  # expired: its button taken off
        await ask(tg, "/memory search green tea", "green tea")
        async with bot.provider.engine.connect() as conn:  # and the words it held are gone
            left = await conn.scalar(sa.select(sa.func.count()).select_from(forget_requests))
        assert left == 0


async def test_a_preview_made_in_one_process_is_confirmed_in_another(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    # Replicas on one database, one after the other on the same fake Telegram: this
    # test process's bot previews, a `mnemo run` subprocess presses the button and
    # previews again, and this process's next bot confirms that by typing.
    async with temp_engine(db_kind, tmp_path) as engine:
        url = engine.url.render_as_string(hide_password=False)
        async with running_bot(tg, llm, tmp_path / "a", provider="lcm", url=url):
            await _say(tg, "I like green tea", "I like black coffee")
            a = await _forget(tg, "green tea")
        config = run_config(tmp_path, tg, llm, url, memory={"provider": "lcm"})
        other = BotProcess(tmp_path, config, tg)
        await other.start()
        try:
            assert "Forgot 2 message(s)" in await _press(tg, a, _button(a))
            assert a.reply_markup is None
            b = await _forget(tg, "black coffee")
        finally:
            assert await other.stop() == 0
        async with running_bot(tg, llm, tmp_path / "c", provider="lcm", url=url):
            await ask(tg, f"/memory forget confirm {code_of(b.text)}", "Forgot 2 message(s)")
            assert b.reply_markup is None
            await ask(tg, "/memory status", "Messages: 0")


async def test_tidying_the_buttons_never_costs_the_answer(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The database failing while the bot takes ended previews' buttons off: the answer
    # still goes (the tidying is extra), and the next command tidies.
    async def down(*args: object) -> None:
        raise sa.exc.OperationalError("SELECT", {}, ConnectionError("database down"))

    async with running_bot(tg, llm, tmp_path, provider="simple"):
        await _say(tg, "I like green tea")
        a = await _forget(tg, "green tea")
        with monkeypatch.context() as patched:
            patched.setattr(requests, "unsettled", down)
            await ask(tg, f"/memory forget confirm {code_of(a.text)}", "Forgot 2 message(s)")
            assert a.reply_markup is not None  # left for later
        a_button = _button(a)
        await ask(tg, "/memory forget cancel", "Nothing to cancel")
        assert a.reply_markup is None  # tidied by the next command
        assert "no longer valid" in await _press(tg, a, a_button)
