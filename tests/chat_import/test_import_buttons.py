"""An import offer's buttons act only on their own offer, once (bot/channels/telegram/imports.py):
an offer replaced by a newer one, or confirmed by typing, loses its buttons, and an old
button pressed anyway imports nothing, the newer offer staying as it was."""

from __future__ import annotations

from pathlib import Path

from memory.contract.types import ListOptions
from tests.chat_import.test_import_chat import FIXTURES, OFFER, _reply
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import BotMessage, FakeTelegram
from tests.telegram.harness import running_bot


async def _offer(tg: FakeTelegram, name: str, fixture: str) -> BotMessage:
    before = len(tg.bot_messages(42))
    tg.private(42).send_document(file_name=name, content=(FIXTURES / fixture).read_bytes())
    offer = await _reply(tg, 42, before)
    assert OFFER in offer.text and offer.reply_markup is not None, offer.text
    return offer


def _buttons(offer: BotMessage) -> tuple[str, str]:
    """(Import, Cancel) callback data, kept to be pressed from an old screen later."""
    assert offer.reply_markup is not None
    [[yes, no]] = offer.reply_markup["inline_keyboard"]
    return yes["callback_data"], no["callback_data"]


def _imported(tg: FakeTelegram) -> list[str]:
    return [m.text for m in tg.bot_messages(42) if m.text.startswith("Imported ")]


async def _press(tg: FakeTelegram, offer: BotMessage, data: str) -> str:
    before = len(tg.bot_messages(42))
    tg.private(42).press(offer, data)
    return (await _reply(tg, 42, before)).text


async def test_an_old_import_button_acts_on_nothing_but_its_own_offer(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    async with running_bot(tg, llm, tmp_path, provider="lcm", db=db_kind) as bot:
        a = await _offer(tg, "result.json", "telegram_chat.json")
        a_yes, a_no = _buttons(a)
        b = await _offer(tg, "conversations.json", "chatgpt.json")
        assert a.reply_markup is None  # replaced: its buttons taken off
        assert "no longer valid" in await _press(tg, a, a_yes)
        assert "no longer valid" in await _press(tg, a, a_no)
        assert await bot.provider.list_info(ListOptions(include_archived=True)) == []

        # B is still offered: typed, it is confirmed, and its buttons go.
        b_yes, _ = _buttons(b)
        tg.private(42).send("/memory import confirm")
        await tg.wait_for_message(42, contains="Imported 6 messages into 2 archived")
        assert b.reply_markup is None
        infos = await bot.provider.list_info(ListOptions(include_archived=True))
        assert sorted(i.title for i in infos) == ["ChatGPT: Snippet", "ChatGPT: Sourdough starter"]

        # A newer offer, then B's old Import button: no longer valid, the newer one stays.
        c = await _offer(tg, "result.json", "telegram_chat.json")
        assert "no longer valid" in await _press(tg, b, b_yes)
        assert len(await bot.provider.list_info(ListOptions(include_archived=True))) == 2
        assert c.reply_markup is not None
        c_yes, _ = _buttons(c)
        tg.private(42).press(c, c_yes)
        await tg.wait_for(lambda: len(_imported(tg)) == 2)
        assert "Imported 6 messages into 1 archived" in _imported(tg)[1]
        assert len(await bot.provider.list_info(ListOptions(include_archived=True))) == 3
        assert "no longer valid" in await _press(tg, c, c_yes)  # once
