"""Export and import carry the facts with their evidence (memory/transfer), on SQLite and
PostgreSQL: byte-equal round trips, sources re-linked to the imported messages, and a
source in a conversation the target lacks said in the report."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.capabilities import ProviderContext
from memory.contract.errors import InvalidArgument
from memory.contract.facts import FactOp
from memory.contract.registry import create_provider
from memory.contract.types import Message, Session
from memory.storage.history import conversations, messages
from memory.testing.databases import temp_engine
from memory.transfer.session import export_session, import_session, render_markdown
from tests.fakes.summarizer import KeepingSummarizer

U, A = 9, "default"
ONE = Session("tg-9", A, U)
TWO = Session("tg-9#2", A, U)


def _provider(engine: AsyncEngine, tmp_path: Path):  # type: ignore[no-untyped-def]
    return create_provider(
        "lcm", ProviderContext(engine=engine, summarizer=KeepingSummarizer(), data_dir=tmp_path)
    )


async def _ids(engine: AsyncEngine, session: Session) -> list[int]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(messages.c.id)
            .join(conversations, conversations.c.id == messages.c.conversation_id)
            .where(conversations.c.session_id == session.id)
            .order_by(messages.c.seq)
        )
        return [int(i) for i in rows.scalars()]


async def test_facts_and_their_sources_survive_a_round_trip(
    engine: AsyncEngine, db_kind: str, tmp_path: Path
) -> None:
    src = _provider(engine, tmp_path)
    march = datetime(2026, 3, 1, tzinfo=UTC)
    await src.append(ONE, Message("user", "I live in London", created_at=march))
    await src.append(TWO, Message("user", "moved to Berlin"))
    [london] = await _ids(engine, ONE)
    [berlin] = await _ids(engine, TWO)
    await src.apply_facts(U, A, [FactOp("set", "home city", "London", [london])])
    june = datetime(2026, 6, 1, tzinfo=UTC)
    await src.apply_facts(
        U, A, [FactOp("set", "home city", "Berlin", [berlin, london], valid_from=june)]
    )
    doc = await export_session(engine, ONE.id, src)
    facts = doc["user_memory"]["facts"]
    assert [(f["value"], f["state"]) for f in facts] == [
        ("London", "superseded"),
        ("Berlin", "current"),
    ]
    assert facts[0]["evidence"] == [{"session_id": ONE.id, "seq": 1}]
    assert "home city: Berlin (current" in render_markdown(doc)
    text = json.dumps(doc)

    async with temp_engine(db_kind, tmp_path) as target:
        dst = _provider(target, tmp_path / "t")
        report = await import_session(target, json.loads(text), dst)
        # Berlin's source in the second conversation is not in this database (yet).
        assert any("1 fact source" in n for n in report.notes)
        [imported] = await _ids(target, ONE)
        [now] = await dst.current_facts(U, A)
        assert (now.value, now.evidence) == ("Berlin", (imported,))
        [old] = await dst.facts_as_of(U, A, march)
        assert (old.value, old.evidence, old.valid_from) == ("London", (imported,), march)
        again = await export_session(target, ONE.id, dst)
        assert again["user_memory"]["facts"][0] == facts[0]
        await dst.close()
    await src.close()


async def test_a_malformed_fact_is_refused_before_any_write(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    src = _provider(engine, tmp_path)
    await src.append(ONE, Message("user", "hello"))
    await src.apply_facts(U, A, [FactOp("set", "pet", "cat")])
    doc = await export_session(engine, ONE.id)
    await src.close()
    doc["session"]["id"] = "tg-other"
    for bad in ({"state": "maybe"}, {"value": ""}, {"evidence": [{"seq": 1}]}):
        broken = json.loads(json.dumps(doc))
        broken["user_memory"]["facts"][0].update(bad)
        with pytest.raises(InvalidArgument, match="facts"):
            await import_session(engine, broken)
    async with engine.connect() as conn:
        assert (
            await conn.scalar(
                sa.select(conversations.c.id).where(conversations.c.session_id == "tg-other")
            )
            is None
        )
    twice = json.loads(json.dumps(doc))
    twice["user_memory"]["facts"].append({**twice["user_memory"]["facts"][0], "id": "f_two"})
    with pytest.raises(InvalidArgument, match="two current facts have the same key"):
        await import_session(engine, twice)
    # An export of an older version (no facts) still imports.
    del doc["user_memory"]["facts"]
    await import_session(engine, doc)
