"""The in-chat import on the fake Bot API: an export sent in a private chat gets the
dry-run summary and an Import button; the press (or `/memory import confirm`) imports
into the sender's memory only, editing one message with the outcome; the same file
again adds nothing; a malformed one is refused in one line and nothing is stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memory.actions.delegated_recall import SYSTEM_PROMPT
from memory.contract.types import ListOptions, SearchQuery, Session, utcnow
from tests.fakes.openai_server import FakeOpenAI, Response, echo, text
from tests.fakes.telegram_server import BotMessage, FakeTelegram
from tests.telegram.harness import running_bot

FIXTURES = Path(__file__).parent / "fixtures"
OFFER = "Reply /memory import confirm within 10 minutes"


async def _reply(tg: FakeTelegram, chat_id: int, before: int) -> BotMessage:
    await tg.wait_for(lambda: len(tg.bot_messages(chat_id)) > before)
    return tg.bot_messages(chat_id)[before]


@pytest.mark.parametrize("provider", ["lcm", "simple"])
async def test_an_export_sent_in_chat_is_offered_confirmed_and_imported_for_its_sender_only(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, provider: str, db_kind: str
) -> None:
    export = (FIXTURES / "telegram_account.json").read_bytes()
    async with running_bot(tg, llm, tmp_path, provider=provider, db=db_kind) as bot:
        alice, mallory = tg.private(42), tg.private(43)
        alice.send_document(file_name="result.json", content=export)
        offer = await _reply(tg, 42, 0)
        assert "Telegram export result.json: 3 chats, 6 messages" in offer.text
        assert "• Family: 3 messages, 2022-12-24 .. 2022-12-24, 3 new" in offer.text
        assert OFFER in offer.text
        [[yes, _no]] = offer.reply_markup["inline_keyboard"]  # type: ignore[index]
        assert yes["text"] == "Import"
        assert await bot.provider.list_info(ListOptions(include_archived=True)) == []

        mallory.send("/memory import confirm")  # an offer is its sender's alone
        assert (await _reply(tg, 43, 0)).text.startswith("Nothing to confirm")

        alice.press(offer, yes["callback_data"])
        done = await tg.wait_for_message(42, contains="Imported 6 messages into 3 archived")
        assert done.edits >= 1  # the progress message, edited with the outcome
        infos = await bot.provider.list_info(ListOptions(include_archived=True))
        assert len(infos) == 3
        assert {i.user_id for i in infos} == {42} and all(i.archived for i in infos)

        mallory.send("/memory search lemon tart")
        assert (await _reply(tg, 43, 1)).text.startswith("No matches")
        before = len(tg.bot_messages(42))
        alice.send("/memory search lemon tart")
        found = (await _reply(tg, 42, before)).text
        assert "lemon tart" in found
        # Grouped under the chat, named once with the span of its messages, not the day
        # of the import. Alice's reply quotes too little to hold the words: it is found
        # through the message before it, which it names as "after"; "replying to" is
        # only its own stored text.
        [group] = [line for line in found.splitlines() if line.startswith("From ")]
        assert group == "From conversation “Telegram: Family”, 2022-12-24:", found
        assert utcnow().strftime("%Y-%m-%d") not in found
        assert '[Alice, replying to Mum: "Dinner is at 7, Alice please bring the…"]' in found
        assert "(after: [Mum] Dinner is at 7, Alice please bring the lemon tart)" in found
        assert found.count("replying to") == 1

        before = len(tg.bot_messages(42))
        alice.send_document(file_name="result.json", content=export)  # again: nothing new
        again = await _reply(tg, 42, before)
        assert "Nothing new: everything in it is imported already." in again.text
        assert again.reply_markup is None


async def test_a_chatgpt_export_is_imported_by_typed_confirmation(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path, provider="lcm") as bot:
        alice = tg.private(42)
        alice.send_document(
            file_name="conversations.json", content=(FIXTURES / "chatgpt.json").read_bytes()
        )
        assert OFFER in (await _reply(tg, 42, 0)).text
        alice.send("/memory import confirm")
        await tg.wait_for_message(42, contains="Imported 6 messages into 2 archived")
        infos = await bot.provider.list_info(ListOptions(user_id=42, include_archived=True))
        assert sorted(i.title for i in infos) == ["ChatGPT: Snippet", "ChatGPT: Sourdough starter"]


async def test_a_malformed_or_cancelled_export_stores_nothing(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path, provider="lcm") as bot:
        alice = tg.private(42)
        alice.send_document(
            file_name="result.json", content=(FIXTURES / "telegram_bad_date.json").read_bytes()
        )
        refused = (await _reply(tg, 42, 0)).text
        assert refused.startswith("I can't import that file: result.json: chat 'Bob', message 2")
        assert "\n" not in refused
        alice.send_document(
            file_name="result.json", content=(FIXTURES / "telegram_chat.json").read_bytes()
        )
        offer = await _reply(tg, 42, 1)
        assert OFFER in offer.text
        alice.send("/memory import cancel")
        assert (await _reply(tg, 42, 2)).text == "Import cancelled."
        alice.send("/memory import confirm")
        assert (await _reply(tg, 42, 3)).text.startswith("Nothing to confirm")
        assert await bot.provider.list_info(ListOptions(include_archived=True)) == []
        assert list((tmp_path / "data" / "imports").iterdir()) == []  # the file is gone too
        # Over the Bot API's 20 MB: refused by its stated size, never downloaded.
        alice.send_document(file_name="result.json", content=b"{}", file_size=21 * 2**20)
        assert "over 20 MB" in (await _reply(tg, 42, 4)).text
        assert len(tg.calls_to("getFile")) == 2


def _recall_reader(body: dict[str, Any]) -> Response:
    """The chat model echoes; the recall model cites each material line on the tart."""
    msgs = body.get("messages") or []
    if not msgs or not str(msgs[0].get("content") or "").startswith(SYSTEM_PROMPT):
        return echo(body)
    lines = str(msgs[-1].get("content") or "").partition("Material:\n")[2].splitlines()
    ids = [line[1 : line.index("]")] for line in lines if "lemon tart" in line]
    return text("Mum asked for it in " + " ".join(f"[{i}]" for i in ids) if ids else "NOTHING")


async def test_memory_ask_answers_from_an_imported_chat(tmp_path: Path, tg: FakeTelegram) -> None:
    async with (
        FakeOpenAI(_recall_reader) as llm,
        running_bot(tg, llm, tmp_path, provider="lcm") as bot,
    ):
        alice = tg.private(42)
        alice.send_document(
            file_name="result.json", content=(FIXTURES / "telegram_account.json").read_bytes()
        )
        assert OFFER in (await _reply(tg, 42, 0)).text
        alice.send("/memory import confirm")
        await tg.wait_for_message(42, contains="Imported 6 messages")
        session = Session("default:telegram:42", "default", 42, "telegram")
        [hit] = await bot.provider.search(session, SearchQuery("lemon tart", limit=1))
        before = len(tg.bot_messages(42))
        alice.send("/memory ask who brings the lemon tart?")
        answer = await _reply(tg, 42, before)
        assert hit.source_id in answer.text, answer.text
