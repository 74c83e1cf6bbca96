"""The shared stores (memory/storage/stores.py) on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import re

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.capabilities import (
    ChangelogReader,
    ChangelogWriter,
    ConstraintStore,
    ProfileStore,
    SessionSnapshotStore,
    VersionedConstraintStore,
    VersionedProfileStore,
)
from memory.contract.context import with_change_source, with_session_id
from memory.contract.errors import Conflict, InvalidArgument, NotFound, StoreCorrupt
from memory.contract.facts import FactStore
from memory.contract.types import ChangeEntry, ChangeSource
from memory.storage.stores import MAX_CONSTRAINT_CHARS, SharedStores, state_table

U, A = 42, "default"


class Stores(SharedStores):
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine


@pytest.fixture
def stores(engine: AsyncEngine) -> Stores:
    return Stores(engine)


def test_mixin_implements_every_store_protocol(engine: AsyncEngine) -> None:
    s = Stores(engine)
    for proto in (
        ProfileStore,
        ConstraintStore,
        VersionedProfileStore,
        VersionedConstraintStore,
        ChangelogReader,
        ChangelogWriter,
        SessionSnapshotStore,
        FactStore,
    ):
        assert isinstance(s, proto), proto.__name__


async def test_empty_owner_reads_as_nothing(stores: Stores) -> None:
    assert await stores.get_profile(U, A) == ""
    assert await stores.get_soul(U, A) == ""
    assert await stores.get_constraints(U, A) == []
    assert await stores.memory_version(U, A) == 0
    assert await stores.read_changelog(U, A) == []


async def test_profile_and_soul_share_one_version_counter(stores: Stores) -> None:
    assert await stores.set_profile(U, A, "likes tea") == 1
    assert await stores.set_soul(U, A, "calm and precise") == 2
    assert await stores.set_profile(U, A, "likes green tea") == 3
    assert await stores.get_profile(U, A) == "likes green tea"
    assert await stores.get_soul(U, A) == "calm and precise"
    assert await stores.memory_version(U, A) == 3


async def test_changelog_rows_record_every_write(stores: Stores) -> None:
    await stores.set_profile(U, A, "v1")  # default source: agent, no session
    with with_change_source(ChangeSource.USER), with_session_id("tg:7"):
        await stores.set_profile(U, A, "v2")
    with with_change_source("reflect"):
        await stores.set_profile(U, A, "")

    rows = await stores.read_changelog(U, A)
    assert [r.action for r in rows] == ["delete", "update", "create"]
    assert [r.source for r in rows] == ["reflect", "user", "agent"]
    assert [r.session_id for r in rows] == ["", "tg:7", ""]
    newest = rows[0]
    assert (newest.version_before, newest.version_after) == (2, 3)
    assert (newest.before_text, newest.after_text) == ("v2", "")
    assert newest.scope == "profile" and newest.user_id == U and newest.agent_id == A
    assert newest.created_at is not None and newest.created_at.tzinfo is not None
    assert newest.id is not None and newest.id > rows[1].id


async def test_changelog_scope_filter_and_limit(stores: Stores) -> None:
    await stores.set_profile(U, A, "p")
    await stores.set_soul(U, A, "s")
    await stores.add_constraint(U, A, "never swear")
    await stores.set_soul(U, A, "s2")
    assert [r.after_text for r in await stores.read_changelog(U, A, scope="soul")] == ["s2", "s"]
    assert len(await stores.read_changelog(U, A, limit=2)) == 2
    assert len(await stores.read_changelog(U, A, limit=0)) == 4
    assert await stores.read_changelog(U, A, scope="compaction") == []


async def test_constraints_add_list_remove(stores: Stores) -> None:
    entries = await stores.add_constraint(U, A, "  answer in French  ")
    assert len(entries) == 1
    first = entries[0]
    assert re.fullmatch(r"c_[0-9a-f]{8}", first.id)
    assert first.text == "answer in French"
    assert first.created_at.endswith("+00:00")
    entries = await stores.add_constraint(U, A, "no emoji")
    assert [e.text for e in entries] == ["answer in French", "no emoji"]
    assert entries[0].id != entries[1].id
    assert await stores.get_constraints(U, A) == entries

    left = await stores.remove_constraint(U, A, first.id)
    assert [e.text for e in left] == ["no emoji"]
    assert await stores.get_constraints(U, A) == left

    rows = await stores.read_changelog(U, A, scope="constraint")
    assert [r.action for r in rows] == ["delete", "create", "create"]
    # Constraint rows carry the whole list as JSON, before and after.
    assert "answer in French" in rows[0].before_text
    assert "answer in French" not in rows[0].after_text


async def test_bad_constraint_input_is_refused_and_writes_nothing(stores: Stores) -> None:
    await stores.add_constraint(U, A, "keep it short")
    for bad in ("", "   \n\t", "x" * (MAX_CONSTRAINT_CHARS + 1)):
        with pytest.raises(InvalidArgument):
            await stores.add_constraint(U, A, bad)
    with pytest.raises(NotFound):
        await stores.remove_constraint(U, A, "c_00000000")
    with pytest.raises(InvalidArgument):
        await stores.remove_constraint(U, A, "  ")
    assert await stores.memory_version(U, A) == 1
    assert len(await stores.read_changelog(U, A)) == 1
    assert [e.text for e in await stores.get_constraints(U, A)] == ["keep it short"]
    assert len((await stores.add_constraint(U, A, "y" * MAX_CONSTRAINT_CHARS))[-1].text) == (
        MAX_CONSTRAINT_CHARS
    )


async def test_bad_owner_is_refused(stores: Stores) -> None:
    with pytest.raises(InvalidArgument):
        await stores.set_profile(U, "", "x")
    with pytest.raises(InvalidArgument):
        await stores.get_profile("42", A)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        await stores.set_soul(U, "a" * 129, "x")


async def test_unstorable_characters_are_replaced_not_fatal(stores: Stores) -> None:
    await stores.set_profile(U, A, "nul\x00here")
    assert await stores.get_profile(U, A) == "nul\ufffdhere"


async def test_corrupt_constraints_raise_store_corrupt(stores: Stores) -> None:
    await stores.set_profile(U, A, "x")
    async with stores.engine.begin() as conn:
        await conn.execute(sa.update(state_table).values(constraints="{not json"))
    with pytest.raises(StoreCorrupt):
        await stores.get_constraints(U, A)
    with pytest.raises(StoreCorrupt):
        await stores.add_constraint(U, A, "z")
    assert await stores.memory_version(U, A) == 1


async def test_versioned_reads_reconstruct_each_version(stores: Stores) -> None:
    await stores.set_profile(U, A, "p1")  # v1
    await stores.set_soul(U, A, "s1")  # v2
    cs = await stores.add_constraint(U, A, "rule one")  # v3
    await stores.set_profile(U, A, "p2")  # v4
    await stores.remove_constraint(U, A, cs[0].id)  # v5

    assert [await stores.get_profile_at(U, A, v) for v in (1, 2, 3, 4, 5)] == [
        "p1",
        "p1",
        "p1",
        "p2",
        "p2",
    ]
    assert await stores.get_soul_at(U, A, 1) == ""
    assert await stores.get_soul_at(U, A, 2) == "s1"
    assert await stores.get_constraints_at(U, A, 2) == []
    assert [c.text for c in await stores.get_constraints_at(U, A, 4)] == ["rule one"]
    assert await stores.get_constraints_at(U, A, 5) == []
    # <= 0 is "current"; beyond the current version reads as the current text.
    assert await stores.get_profile_at(U, A, 0) == "p2"
    assert await stores.get_soul_at(U, A, -1) == "s1"
    assert await stores.get_profile_at(U, A, 99) == "p2"
    with pytest.raises(InvalidArgument):
        await stores.get_profile_at(U, A, "3")  # type: ignore[arg-type]


async def test_rollback_writes_a_new_version(stores: Stores) -> None:
    await stores.set_profile(U, A, "old")  # v1
    await stores.set_profile(U, A, "new")  # v2
    with with_change_source(ChangeSource.USER):
        assert await stores.rollback(U, A, "profile", 1) == 3
    assert await stores.get_profile(U, A) == "old"
    assert await stores.get_profile_at(U, A, 2) == "new"  # history is not rewritten
    row = (await stores.read_changelog(U, A, limit=1))[0]
    assert (row.action, row.source, row.before_text, row.after_text) == (
        "update",
        "user",
        "new",
        "old",
    )
    assert (row.version_before, row.version_after) == (2, 3)


async def test_rollback_of_constraints_restores_the_list(stores: Stores) -> None:
    await stores.add_constraint(U, A, "a")  # v1
    await stores.add_constraint(U, A, "b")  # v2
    await stores.rollback(U, A, "constraint", 1)
    assert [c.text for c in await stores.get_constraints(U, A)] == ["a"]


async def test_rollback_refuses_bad_arguments(stores: Stores) -> None:
    await stores.set_profile(U, A, "x")
    for scope, version in (("profile", 0), ("profile", -2), ("profile", 2), ("mood", 1)):
        with pytest.raises(InvalidArgument):
            await stores.rollback(U, A, scope, version)
    assert await stores.memory_version(U, A) == 1


async def test_write_changelog_records_without_bumping_the_version(stores: Stores) -> None:
    await stores.set_profile(U, A, "x")
    with with_change_source(ChangeSource.SYSTEM), with_session_id("s-9"):
        await stores.write_changelog(
            ChangeEntry(
                user_id=U,
                agent_id=A,
                scope="compaction",
                action="compact",
                source="",
                after_text="12 messages -> 1 summary",
            )
        )
    assert await stores.memory_version(U, A) == 1
    row = (await stores.read_changelog(U, A, scope="compaction"))[0]
    assert (row.action, row.source, row.session_id) == ("compact", "system", "s-9")
    assert (row.version_before, row.version_after) == (1, 1)
    assert row.after_text == "12 messages -> 1 summary"
    # Rows of other scopes never confuse versioned reads.
    assert await stores.get_profile_at(U, A, 1) == "x"


async def test_write_changelog_refuses_store_scopes_and_bad_sources(stores: Stores) -> None:
    for scope in ("profile", "soul", "constraint", ""):
        with pytest.raises(InvalidArgument):
            await stores.write_changelog(
                ChangeEntry(user_id=U, agent_id=A, scope=scope, action="update", source="agent")
            )
    with pytest.raises(InvalidArgument):
        await stores.write_changelog(
            ChangeEntry(user_id=U, agent_id=A, scope="compaction", action="compact", source="x")
        )
    assert await stores.read_changelog(U, A) == []


async def test_owners_are_independent(stores: Stores) -> None:
    await stores.set_profile(1, A, "one")
    await stores.set_profile(2, A, "two")
    await stores.set_profile(1, "other", "one-other")
    await stores.add_constraint(2, A, "rule")
    assert await stores.get_profile(1, A) == "one"
    assert await stores.get_profile(2, A) == "two"
    assert await stores.get_profile(1, "other") == "one-other"
    assert await stores.memory_version(1, A) == 1
    assert await stores.memory_version(2, A) == 2
    assert await stores.get_constraints(1, A) == []
    assert len(await stores.read_changelog(1, A)) == 1


async def test_snapshots_freeze_and_advance(stores: Stores) -> None:
    await stores.set_profile(U, A, "before")  # v1
    snap = await stores.get_or_create_snapshot("sess-a", U, A)
    assert (snap.session_id, snap.user_id, snap.agent_id, snap.version) == ("sess-a", U, A, 1)
    assert snap.updated_at is not None and snap.updated_at.tzinfo is not None

    await stores.set_profile(U, A, "after")  # v2
    frozen = await stores.get_or_create_snapshot("sess-a", U, A)
    assert frozen.version == 1
    assert await stores.get_profile_at(U, A, frozen.version) == "before"
    assert (await stores.get_or_create_snapshot("sess-b", U, A)).version == 2

    await stores.advance_snapshot("sess-a", U, A)
    assert (await stores.get_or_create_snapshot("sess-a", U, A)).version == 2


async def test_advance_creates_a_missing_snapshot(stores: Stores) -> None:
    await stores.set_soul(U, A, "s")
    await stores.advance_snapshot("fresh", U, A)
    assert (await stores.get_or_create_snapshot("fresh", U, A)).version == 1


async def test_snapshot_of_another_owner_is_a_conflict(stores: Stores) -> None:
    await stores.get_or_create_snapshot("shared-id", 1, A)
    with pytest.raises(Conflict):
        await stores.get_or_create_snapshot("shared-id", 2, A)
    with pytest.raises(Conflict):
        await stores.advance_snapshot("shared-id", 1, "other-agent")
    with pytest.raises(InvalidArgument):
        await stores.get_or_create_snapshot("", 1, A)


async def test_concurrent_writes_lose_nothing(stores: Stores) -> None:
    """The acceptance figure: 50 concurrent profile writes -> version 50, 50 rows."""
    versions = await asyncio.gather(*(stores.set_profile(U, A, f"p{i}") for i in range(50)))
    assert sorted(versions) == list(range(1, 51))
    assert await stores.memory_version(U, A) == 50
    rows = await stores.read_changelog(U, A, limit=0)
    assert len(rows) == 50
    # Each row starts where the previous one ended: no write read a stale row.
    chain = sorted(rows, key=lambda r: r.version_after or 0)
    for prev, row in zip(chain, chain[1:], strict=False):
        assert row.version_before == prev.version_after
        assert row.before_text == prev.after_text
    assert await stores.get_profile(U, A) == chain[-1].after_text


async def test_concurrent_mixed_writes_and_owners(stores: Stores) -> None:
    jobs = []
    for i in range(10):
        jobs.append(stores.set_profile(1, A, f"p{i}"))
        jobs.append(stores.add_constraint(1, A, f"rule {i}"))
        jobs.append(stores.set_soul(2, A, f"s{i}"))
    await asyncio.gather(*jobs)
    assert await stores.memory_version(1, A) == 20
    assert await stores.memory_version(2, A) == 10
    assert len(await stores.get_constraints(1, A)) == 10
    assert await stores.get_soul(1, A) == ""
