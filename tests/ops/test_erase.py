"""`mnemo memory erase`: one user's whole memory (two sessions, notes, profile versions,
changelog, snapshots, owed Telegram answers, parked updates), leaving one content-free
changelog row; and retention by hand (`--older-than`, `--dry-run` first). The first
erasure runs the real command line; the rest call the same function in-process."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from bot.channels.telegram.delivery.handled import telegram_updates
from bot.channels.telegram.delivery.inbox import telegram_inbox
from bot.ops.erase import erase
from memory.compaction.summarizer import TruncatingSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.contract.types import Message, NoteKind, Session, utcnow
from memory.storage.db import create_engine
from memory.storage.history import conversations, messages
from memory.storage.stores import changelog_table, snapshot_table, state_table
from tests.fakes.openai_server import FakeOpenAI
from tests.ops.conftest import ALICE, GROUP, make_settings, populate
from tests.ops.test_operator import _doctor

REPO = Path(__file__).resolve().parents[2]
ALICE_LATER = Session("tg:alice#1", "default", ALICE.user_id, "telegram")
SECRET = "Zalicesecret"


async def _rows(url: str, query: sa.Select) -> list[sa.Row]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return list(await conn.execute(query))
    finally:
        await engine.dispose()


async def _alice_extras(settings, tmp_path: Path, provider: str) -> None:  # type: ignore[no-untyped-def]
    """A second session, a note (simple), a parked update and an owed answer."""
    engine = create_engine(settings.database.url)
    try:
        ctx = ProviderContext(
            engine=engine,
            summarizer=TruncatingSummarizer(),
            config=settings.provider_config(),
        )
        p = create_provider(provider, ctx)
        await p.append(ALICE_LATER, Message("user", f"later: {SECRET}", created_at=utcnow()))
        if provider == "simple":
            await p.note_add(ALICE_LATER, "secret", f"note of {SECRET}", NoteKind.NOTE)
        await p.close()
        now = utcnow()
        payload = {"update_id": 11, "message": {"chat": {"id": ALICE.user_id}, "text": SECRET}}
        other = {"update_id": 12, "message": {"chat": {"id": GROUP.user_id}, "text": "hi"}}
        async with engine.begin() as conn:
            await conn.execute(
                sa.insert(telegram_inbox),
                [
                    {
                        "bot_id": 7,
                        "update_id": 11,
                        "payload": json.dumps(payload),
                        "parked_at": now,
                    },
                    {"bot_id": 7, "update_id": 12, "payload": json.dumps(other), "parked_at": now},
                ],
            )
            await conn.execute(
                sa.insert(telegram_updates).values(
                    bot_id=7,
                    update_id=8,
                    handled_at=now,
                    session_id=f"default:{ALICE_LATER.id}",
                    user_id=ALICE.user_id,
                    chat_id=ALICE.user_id,
                    undelivered=True,
                    answer=f"owed: {SECRET}",
                )
            )
    finally:
        await engine.dispose()


async def _mnemo(config: Path, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        "--config",
        str(config),
        *args,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    return proc.returncode or 0, (out + err).decode()


@pytest.mark.parametrize("provider", ["lcm", "simple"])
async def test_erase_a_user(db_url: str, tmp_path: Path, provider: str) -> None:
    settings = make_settings(db_url.replace("default:", ""), tmp_path, provider=provider)
    await populate(settings, tmp_path)
    await _alice_extras(settings, tmp_path, provider)
    # `default:` sessions only: the agent of ALICE's telegram row is "default".
    out = io.StringIO()
    assert await erase(settings, ALICE.user_id, None, None, True, out) == 0
    assert "would erase user 1001 agent default: 2 session(s), 25 message(s)" in out.getvalue()
    assert await _rows(db_url, sa.select(conversations.c.id).where(conversations.c.user_id == 1001))

    if provider == "lcm" and db_url.startswith("sqlite"):  # once through the real command line
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump(json.loads(settings.model_dump_json())))
        code, printed = await _mnemo(config, "memory", "erase", "--user", "1001")
        assert code == 0, printed
    else:
        out = io.StringIO()
        assert await erase(settings, ALICE.user_id, None, None, False, out) == 0
        printed = out.getvalue()
    assert "erased user 1001 agent default: 2 session(s), 25 message(s)" in printed
    assert "1 unread Telegram update(s), 1 owed Telegram answer(s)" in printed
    if provider == "simple":
        assert "1 note(s)" in printed
        assert not (tmp_path / "notes" / "default" / "1001.mem").exists()

    alice = conversations.c.user_id == ALICE.user_id
    assert await _rows(db_url, sa.select(conversations.c.id).where(alice)) == []
    assert await _rows(db_url, sa.select(state_table).where(state_table.c.user_id == 1001)) == []
    assert (
        await _rows(db_url, sa.select(snapshot_table).where(snapshot_table.c.user_id == 1001)) == []
    )
    [row] = await _rows(
        db_url, sa.select(changelog_table).where(changelog_table.c.user_id == ALICE.user_id)
    )
    assert row.scope == "erasure" and row.source == "system" and row.before_text == ""
    assert "an operator" in row.after_text and SECRET not in row.after_text
    [owed] = await _rows(db_url, sa.select(telegram_updates))
    assert owed.answer is None and not owed.undelivered
    assert [r.update_id for r in await _rows(db_url, sa.select(telegram_inbox))] == [12]
    # The group's memory is untouched.
    group = await _rows(
        db_url,
        sa.select(messages.c.id)
        .join(conversations, conversations.c.id == messages.c.conversation_id)
        .where(conversations.c.user_id == GROUP.user_id),
    )
    assert len(group) == 12
    code, doctor = await _doctor(settings)
    assert code == 0, doctor


async def test_retention_by_hand(db_url: str, tmp_path: Path) -> None:
    async with FakeOpenAI() as llm:
        settings = make_settings(db_url, tmp_path, provider="lcm", llm_url=llm.base_url)
        await populate(settings, tmp_path)  # messages of 2026-03-01
        await _alice_extras(settings, tmp_path, "lcm")  # one of today
        out = io.StringIO()
        assert await erase(settings, None, None, "90d", True, out) == 0
        text = out.getvalue()
        assert "user 1001 agent default: 24 message(s)" in text
        assert "user -5002 agent default: 12 message(s)" in text
        assert "would forget 36 message(s) of 2 owner(s)" in text
        assert len(await _rows(db_url, sa.select(messages.c.id))) == 37  # a dry run

        out = io.StringIO()
        assert await erase(settings, None, None, "90d", False, out) == 0
        assert out.getvalue().startswith("36 message(s) forgotten"), out.getvalue()
        [left] = await _rows(db_url, sa.select(messages.c.content))
        assert left.content == f"later: {SECRET}"
        code, doctor = await _doctor(settings)
        assert code == 0, doctor
        assert await erase(settings, None, None, "ninety", True, io.StringIO()) == 2
        assert await erase(settings, 1, None, "90d", True, io.StringIO()) == 2
