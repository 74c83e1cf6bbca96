"""Forgetting reaches follow-ups (memory/followups/store.py `drop_sources`, `erase_owner`):
forgetting the message that alone asked for one drops it; one resting on another message
too stays; erasing the memory removes them all with the user's preferences."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from memory.contract.errors import InvalidArgument
from memory.contract.types import Owner
from memory.followups import store
from memory.testing.databases import temp_engine
from memory.transfer.session import export_session, import_session
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.followups.kit import USER, all_followups, ask, bot_with_delivery, remind
from tests.telegram.test_forget import code_of


async def test_forget_and_erase_reach_followups(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    async with bot_with_delivery(tg, llm, tmp_path, db=db_kind) as (bot, _, _):
        engine = bot.provider.engine
        await ask(tg, "/memory timezone Europe/Paris", "Time zone set")
        await remind(tg, llm, "remind me to call the notary", "2030-05-06T09:00", "notary")
        await remind(tg, llm, "remind me about the dentist", "2030-05-07T09:00", "dentist")
        # A third resting on both requests: it outlives forgetting one of them.
        async with engine.connect() as conn:
            from memory.storage.history import messages

            ids = (
                await conn.execute(
                    sa.select(messages.c.id, messages.c.content).where(messages.c.role == "user")
                )
            ).all()
        both = [i for i, c in ids if "notary" in c or "dentist" in c]
        assert len(both) == 2
        await remind(tg, llm, "and remind me of both", "2030-05-08T09:00", "both", source_ids=both)
        assert sorted(i.text for i in await all_followups(bot)) == ["both", "dentist", "notary"]

        preview = await ask(tg, "/memory forget call the notary", "This would forget")
        await ask(tg, f"/memory forget confirm {code_of(preview.text)}", "Forgot")
        left = {i.text: i for i in await all_followups(bot)}
        assert sorted(left) == ["both", "dentist"]
        assert await store.source_ids(engine, left["both"].id) == [
            i for i in both if i != min(both)
        ]

        preview = await ask(tg, "/memory forget everything", "This would erase ALL")
        await ask(tg, f"/memory forget confirm {code_of(preview.text)}", "follow-up(s)")
        assert await all_followups(bot) == []
        assert await store.get_prefs(engine, Owner(USER, "default")) == store.Prefs()
        async with engine.connect() as conn:
            assert await conn.scalar(sa.select(sa.func.count()).select_from(store.sources)) == 0


async def test_export_and_import_carry_followups(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    async with bot_with_delivery(tg, llm, tmp_path, db=db_kind) as (bot, _, _):
        engine = bot.provider.engine
        await ask(tg, "/memory timezone Asia/Tokyo", "Time zone set")
        await remind(tg, llm, "remind me to call the notary", "2030-05-06T09:00", "notary")
        doc = json.loads(json.dumps(await export_session(engine, "default:telegram:42")))
    [item] = doc["followups"]["items"]
    assert item["text"] == "notary" and item["source_seqs"] == [1]
    assert doc["followups"]["prefs"]["timezone"] == "Asia/Tokyo"
    (tmp_path / "other").mkdir()
    async with temp_engine(db_kind, tmp_path / "other") as other:
        report = await import_session(other, doc)
        assert report.followups == 1
        [copy] = await store.listed(other, Owner(USER, "default"))
        assert copy.text == "notary" and copy.timezone == "Asia/Tokyo"
        assert (await store.get_prefs(other, Owner(USER, "default"))).timezone == "Asia/Tokyo"
        assert await export_session(other, "default:telegram:42") == doc
        bad = json.loads(json.dumps(doc))
        bad["followups"]["items"][0]["source_seqs"] = [99]
        bad["session"]["id"] = "default:telegram:42:1"
        with pytest.raises(InvalidArgument, match="cites no message 99"):
            await import_session(other, bad)
