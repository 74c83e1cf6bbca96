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
from memory.storage import forgetting as fg
from memory.storage.history import conversations, messages
from memory.testing.databases import temp_engine
from memory.transfer.memory_export import export_memory, import_memory, memory_content
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


async def test_an_imported_change_reverts_on_the_importing_databases_messages(
    engine: AsyncEngine, db_kind: str, tmp_path: Path
) -> None:
    src = _provider(engine, tmp_path)
    await src.append(ONE, Message("user", "I'm a nurse"), Message("user", "still a nurse"))
    await src.append(TWO, Message("user", "a nurse, yes"))
    first, again = await _ids(engine, ONE)
    [other] = await _ids(engine, TWO)
    await src.apply_facts(U, A, [FactOp("set", "job", "nurse", [first])])
    [restated] = await src.apply_facts(U, A, [FactOp("set", "job", "nurse", [again])])
    await src.apply_facts(U, A, [FactOp("set", "diet", "fish", [again])])
    await src.apply_facts(U, A, [FactOp("retract", "diet", message_ids=[other])])
    doc = await export_memory(engine, U, A, src)
    # Ids are the database's: the export names the messages by conversation and seq.
    log = [json.loads(c["after_text"]) for c in doc["sections"]["memory"]["changelog"]]
    assert log[1][0]["evidence"] == [
        {"session_id": ONE.id, "seq": 1},
        {"session_id": ONE.id, "seq": 2},
    ]
    diet = doc["sections"]["memory"]["facts"][-1]
    assert diet["evidence"] == [
        {"session_id": ONE.id, "seq": 2},
        {"session_id": TWO.id, "seq": 1, "role": "retraction"},
    ]
    text = json.dumps(doc)

    async with temp_engine(db_kind, tmp_path) as target:
        dst = _provider(target, tmp_path / "t")
        # Someone else's messages first: this database's ids are not the export's.
        await dst.append(Session("tg-1", A, 1), *(Message("user", f"m{i}") for i in range(5)))
        await import_memory(target, json.loads(text), dst)
        here = await _ids(target, ONE)
        [there] = await _ids(target, TWO)
        assert set(here).isdisjoint({first, again})
        [job, _diet] = await dst.fact_history(U, A)
        assert job.evidence == tuple(here)
        rows = await dst.read_changelog(U, A, scope="fact", limit=10)
        by_version = {r.version_after: r for r in rows}
        row = by_version[restated.version]
        assert json.loads(row.after_text)[0]["evidence"] == here
        # The restatement's revert unlinks its own source here, nothing else.
        await dst.revert_fact_change(U, A, row.id)
        [now] = await dst.current_facts(U, A)
        assert (now.value, now.evidence) == ("nurse", (here[0],))
        # The retraction's source is this database's message too.
        retract = json.loads(rows[0].after_text)[0]
        assert (retract["state"], retract["evidence"]) == ("retracted", [here[1], there])
        # It came as a retraction's: forgetting it here undoes the retraction.
        await fg.forget(dst, fg.Owner(U, A), [there])
        diet = [f for f in await dst.current_facts(U, A) if f.key == "diet"]
        assert [(f.value, f.evidence) for f in diet] == [("fish", (here[1],))]
        await dst.close()

    (tmp_path / "again").mkdir()
    async with temp_engine(db_kind, tmp_path / "again") as target:
        dst = _provider(target, tmp_path / "u")
        await dst.append(Session("tg-1", A, 1), Message("user", "m"))
        await import_memory(target, json.loads(text), dst)
        # Exported again: the same document, byte for byte.
        copy = await export_memory(target, U, A, dst)
        assert json.dumps(memory_content(copy)) == json.dumps(memory_content(doc))
        await dst.close()
    await src.close()


async def test_an_export_made_before_references_imports_without_its_ids(
    engine: AsyncEngine, db_kind: str, tmp_path: Path
) -> None:
    src = _provider(engine, tmp_path)
    await src.append(ONE, Message("user", "I'm a nurse"), Message("user", "still a nurse"))
    first, again = await _ids(engine, ONE)
    await src.apply_facts(U, A, [FactOp("set", "job", "nurse", [first])])
    await src.apply_facts(U, A, [FactOp("set", "job", "nurse", [again])])
    doc = await export_memory(engine, U, A, src)
    await src.close()
    # As an export made before: the change history names the exporting database's ids.
    for c in doc["sections"]["memory"]["changelog"]:
        for k in ("before_text", "after_text"):
            items = json.loads(c[k])
            for f in items:
                f["evidence"] = [first + 100, again + 100][: len(f["evidence"])]
            c[k] = json.dumps(items, ensure_ascii=False)
    async with temp_engine(db_kind, tmp_path) as target:
        dst = _provider(target, tmp_path / "t")
        report = await import_memory(target, doc, dst)
        assert any("4 source(s) in the fact change history" in n for n in report.notes)
        assert "were kept" not in report.memory
        rows = await dst.read_changelog(U, A, scope="fact", limit=10)
        assert all(f["evidence"] == [] for r in rows for f in json.loads(r.after_text))
        # Nothing it shows was added: the revert leaves the fact's sources alone.
        await dst.revert_fact_change(U, A, rows[0].id)
        [now] = await dst.current_facts(U, A)
        assert len(now.evidence) == 2
        await dst.close()


async def test_an_import_into_another_persons_memory_keeps_the_sources(
    engine: AsyncEngine, db_kind: str, tmp_path: Path
) -> None:
    src = _provider(engine, tmp_path)
    mine = Session(f"{A}:telegram:{U}", A, U, "telegram")
    await src.append(mine, Message("user", "I'm a nurse"), Message("user", "still a nurse"))
    first, again = await _ids(engine, mine)
    await src.apply_facts(U, A, [FactOp("set", "job", "nurse", [first])])
    [restated] = await src.apply_facts(U, A, [FactOp("set", "job", "nurse", [again])])
    doc = await export_memory(engine, U, A, src)
    await src.close()
    async with temp_engine(db_kind, tmp_path) as target:
        dst = _provider(target, tmp_path / "t")
        await import_memory(target, doc, dst, retarget=(77, A))
        theirs = await _ids(target, Session(f"{A}:telegram:77", A, 77, "telegram"))
        # The sessions were renamed for the new owner; the sources follow them.
        [job] = await dst.current_facts(77, A)
        assert job.evidence == tuple(theirs)
        rows = await dst.read_changelog(77, A, scope="fact", limit=10)
        row = next(r for r in rows if r.version_after == restated.version)
        assert json.loads(row.after_text)[0]["evidence"] == theirs
        await dst.revert_fact_change(77, A, row.id)
        [now] = await dst.current_facts(77, A)
        assert now.evidence == (theirs[0],)
        await dst.close()
