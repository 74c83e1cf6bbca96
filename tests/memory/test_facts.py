"""The fact store (memory/facts/) through a provider, on SQLite and PostgreSQL:
supersession with both intervals, restatements, retractions, evidence kept in scope, the
cap and merging, reverts, versioned and valid-time reads, the profile's text, forget and
erase."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.capabilities import CAPABILITIES, ProviderContext
from memory.contract.errors import Conflict, InvalidArgument, NotFound
from memory.contract.facts import FactCapReached, FactOp, FactStore
from memory.contract.options import WriteOptions
from memory.contract.registry import create_provider
from memory.contract.types import ChangeSource, Message, Session
from memory.facts.models import facts as fact_rows
from memory.storage import forgetting as fg
from memory.storage.history import conversations, messages
from tests.fakes.summarizer import KeepingSummarizer

U, A = 7, "default"
S = Session("tg-7", A, U)
OTHER = Session("tg-8", A, 8)
MARCH = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
JUNE = datetime(2026, 6, 10, 9, 0, tzinfo=UTC)
AUGUST = datetime(2026, 8, 20, 9, 0, tzinfo=UTC)
REFLECT = WriteOptions(ChangeSource.REFLECT, "tg-7")


@pytest.fixture(params=["lcm", "simple"])
async def provider(request: pytest.FixtureRequest, engine: AsyncEngine, tmp_path: Path):  # type: ignore[no-untyped-def]
    p = create_provider(
        request.param,
        ProviderContext(
            engine=engine,
            summarizer=KeepingSummarizer(),
            data_dir=tmp_path,
            config={"store_dir": str(tmp_path / "mem")},
            max_facts=3,
        ),
    )
    yield p
    await p.close()


async def said(provider, session: Session, *texts: tuple[str, datetime]) -> list[int]:  # type: ignore[no-untyped-def]
    """Append user messages at the given dates; their history ids."""
    await provider.append(session, *(Message("user", t, created_at=d) for t, d in texts))
    async with fg.engine_of(provider).connect() as conn:
        ids = await conn.execute(
            sa.select(messages.c.id)
            .join(conversations, conversations.c.id == messages.c.conversation_id)
            .where(conversations.c.session_id == session.id)
            .order_by(messages.c.id)
        )
        return [int(i) for i in ids.scalars()][-len(texts) :]


async def test_supersession_keeps_both_intervals_and_sources(provider) -> None:  # type: ignore[no-untyped-def]
    assert isinstance(provider, FactStore) and "FactStore" in CAPABILITIES
    london, berlin = await said(provider, S, ("I live in London", MARCH), ("moved to Berlin", JUNE))
    [made] = await provider.apply_facts(
        U, A, [FactOp("set", " Home  City", "London", [london])], REFLECT
    )
    assert made.action == "created" and made.fact.key == "home city"
    assert made.fact.valid_from == MARCH and made.fact.evidence == (london,)
    v1 = made.version
    [moved] = await provider.apply_facts(U, A, [FactOp("set", "home city", "Berlin", [berlin])])
    assert moved.action == "superseded" and moved.version == v1 + 1
    [old] = moved.closed
    assert (old.state, old.valid_to, old.version_to, old.replaced_by) == (
        "superseded",
        JUNE,
        v1 + 1,
        moved.fact.id,
    )
    assert old.evidence == (london,) and moved.fact.evidence == (berlin,)
    assert [f.value for f in await provider.current_facts(U, A)] == ["Berlin"]
    assert [f.value for f in await provider.facts_at(U, A, v1)] == ["London"]
    assert [f.value for f in await provider.facts_as_of(U, A, MARCH + timedelta(days=30))] == [
        "London"
    ]
    assert [f.value for f in await provider.facts_as_of(U, A, AUGUST)] == ["Berlin"]
    assert await provider.facts_as_of(U, A, MARCH - timedelta(days=1)) == []
    history = await provider.fact_history(U, A, "city")
    assert [(f.value, f.state) for f in history] == [
        ("London", "superseded"),
        ("Berlin", "current"),
    ]
    rows = await provider.read_changelog(U, A, scope="fact")
    assert [(r.action, r.source, r.version_after) for r in rows] == [
        ("update", "agent", v1 + 1),
        ("create", "reflect", v1),
    ]
    assert '"London"' in rows[0].before_text and '"Berlin"' in rows[0].after_text
    assert moved.changelog_id == rows[0].id


async def test_a_restatement_adds_evidence_not_a_copy(provider) -> None:  # type: ignore[no-untyped-def]
    a, b = await said(provider, S, ("I'm a nurse", MARCH), ("As a nurse, I...", JUNE))
    await provider.apply_facts(U, A, [FactOp("set", "job", "nurse", [a])])
    [again] = await provider.apply_facts(U, A, [FactOp("set", "Job", "Nurse.", [b])])
    assert again.action == "restated"
    [fact] = await provider.current_facts(U, A)
    assert fact.evidence == (a, b) and fact.valid_from == MARCH
    assert len(await provider.fact_history(U, A)) == 1


async def test_a_retraction_closes_the_fact_at_its_message(provider) -> None:  # type: ignore[no-untyped-def]
    a, b = await said(provider, S, ("I'm vegetarian", MARCH), ("not vegetarian any more", JUNE))
    await provider.apply_facts(U, A, [FactOp("set", "diet", "vegetarian", [a])])
    [gone] = await provider.apply_facts(U, A, [FactOp("retract", "diet", message_ids=[b])])
    assert (gone.action, gone.fact.state, gone.fact.valid_to) == ("retracted", "retracted", JUNE)
    assert await provider.current_facts(U, A) == []
    assert [f.value for f in await provider.facts_as_of(U, A, MARCH)] == ["vegetarian"]
    with pytest.raises(NotFound):
        await provider.apply_facts(U, A, [FactOp("retract", "diet")])


async def test_ids_outside_the_users_memory_are_dropped(provider) -> None:  # type: ignore[no-untyped-def]
    [mine] = await said(provider, S, ("I live in Oslo", MARCH))
    [theirs] = await said(provider, OTHER, ("I live in Rome", JUNE))
    [made] = await provider.apply_facts(
        U, A, [FactOp("set", "home city", "Oslo", [mine, theirs, 10**12])]
    )
    assert made.fact.evidence == (mine,)
    assert made.dropped_ids == (theirs, 10**12)
    assert made.fact.valid_from == MARCH  # the other user's date never counts
    with pytest.raises(InvalidArgument):
        await provider.apply_facts(U, A, [FactOp("set", "x", "y", ["12"])])  # type: ignore[list-item]


async def test_bad_input_is_refused_and_nothing_is_written(provider) -> None:  # type: ignore[no-untyped-def]
    await provider.apply_facts(U, A, [FactOp("set", "pet", "cat")])
    version = await provider.memory_version(U, A)
    for ops in (
        [FactOp("set", "pet", "dog"), FactOp("set", "", "x")],
        [FactOp("set", "pet", "dog"), FactOp("set", "k" * 65, "x")],
        [FactOp("set", "pet", "dog"), FactOp("set", "k", "v" * 501)],
        [FactOp("set", "pet", "dog"), FactOp("forget", "k")],
        [FactOp("set", "pet", "dog"), FactOp("retract", "nothing here")],
        [],
    ):
        with pytest.raises((InvalidArgument, NotFound)):
            await provider.apply_facts(U, A, ops)
    assert await provider.memory_version(U, A) == version
    assert [f.value for f in await provider.current_facts(U, A)] == ["cat"]


async def test_the_cap_asks_for_a_merge_which_makes_room(provider) -> None:  # type: ignore[no-untyped-def]
    await provider.apply_facts(
        U,
        A,
        [
            FactOp("set", "pet", "cat"),
            FactOp("set", "pet name", "Tom"),
            FactOp("set", "job", "nurse"),
        ],
    )
    with pytest.raises(FactCapReached, match="merge"):
        await provider.apply_facts(U, A, [FactOp("set", "sport", "chess")])
    assert len(await provider.current_facts(U, A)) == 3
    [merged] = await provider.apply_facts(
        U, A, [FactOp("merge", "pet", "a cat named Tom", merged_keys=["pet name"])]
    )
    assert merged.action == "merged" and {f.key for f in merged.closed} == {"pet", "pet name"}
    assert all(f.replaced_by == merged.fact.id for f in merged.closed)
    await provider.apply_facts(U, A, [FactOp("set", "sport", "chess")])
    assert [f.key for f in await provider.current_facts(U, A)] == ["job", "pet", "sport"]
    # A batch may stay within the cap by merging first.
    await provider.apply_facts(U, A, [FactOp("set", "pet", "a cat named Tom")])  # restated


async def test_revert_reopens_what_a_change_closed_as_a_new_version(provider) -> None:  # type: ignore[no-untyped-def]
    london, berlin = await said(provider, S, ("London", MARCH), ("Berlin", JUNE))
    [first] = await provider.apply_facts(U, A, [FactOp("set", "home city", "London", [london])])
    [moved] = await provider.apply_facts(U, A, [FactOp("set", "home city", "Berlin", [berlin])])
    before_revert = await provider.memory_version(U, A)
    undone = await provider.revert_fact_change(
        U, A, moved.changelog_id, WriteOptions(ChangeSource.USER, "tg-7")
    )
    assert {c.action for c in undone} == {"reverted", "reopened"}
    [now] = await provider.current_facts(U, A)
    assert (now.value, now.valid_from, now.evidence) == ("London", MARCH, (london,))
    # Every earlier version reads as it did; no date finds London twice or Berlin at all.
    assert [f.value for f in await provider.facts_at(U, A, first.version)] == ["London"]
    assert [f.value for f in await provider.facts_at(U, A, before_revert)] == ["Berlin"]
    assert [f.value for f in await provider.facts_as_of(U, A, AUGUST)] == ["London"]
    assert [f.value for f in await provider.facts_as_of(U, A, MARCH)] == ["London"]
    rows = await provider.read_changelog(U, A, scope="fact", limit=1)
    assert rows[0].source == "user" and rows[0].version_after == before_revert + 1
    # The change is undone once: its facts moved on.
    with pytest.raises(Conflict):
        await provider.revert_fact_change(U, A, moved.changelog_id)
    # Reverting the revert brings Berlin back.
    await provider.revert_fact_change(U, A, rows[0].id)
    assert [f.value for f in await provider.current_facts(U, A)] == ["Berlin"]
    with pytest.raises(NotFound):
        await provider.revert_fact_change(8, A, moved.changelog_id)  # another user's
    history = [(f.value, f.state) for f in await provider.fact_history(U, A)]
    assert history.count(("Berlin", "current")) == 1


async def test_revert_of_a_restatement_unlinks_its_evidence(provider) -> None:  # type: ignore[no-untyped-def]
    a, b = await said(provider, S, ("nurse", MARCH), ("still a nurse", JUNE))
    await provider.apply_facts(U, A, [FactOp("set", "job", "nurse", [a])])
    [again] = await provider.apply_facts(U, A, [FactOp("set", "job", "nurse", [b])])
    await provider.revert_fact_change(U, A, again.changelog_id)
    [fact] = await provider.current_facts(U, A)
    assert fact.evidence == (a,)


async def test_revert_of_a_restatement_leaves_what_later_ones_added(provider) -> None:  # type: ignore[no-untyped-def]
    a, b, c = await said(provider, S, ("nurse", MARCH), ("a nurse", JUNE), ("nurse!", AUGUST))
    await provider.apply_facts(U, A, [FactOp("set", "job", "nurse", [a])])
    [first] = await provider.apply_facts(U, A, [FactOp("set", "job", "nurse", [b])])
    await provider.apply_facts(U, A, [FactOp("set", "job", "nurse", [c])])
    # The revert acts on what its row shows: b, not c (another change, kept).
    await provider.revert_fact_change(U, A, first.changelog_id)
    [fact] = await provider.current_facts(U, A)
    assert fact.evidence == (a, c)


async def test_the_profile_renders_facts_then_free_text_per_version(provider) -> None:  # type: ignore[no-untyped-def]
    [london] = await said(provider, S, ("London", MARCH))
    await provider.set_profile(U, A, "Likes long walks.")
    [made] = await provider.apply_facts(U, A, [FactOp("set", "home city", "London", [london])])
    await provider.apply_facts(U, A, [FactOp("set", "age", "41", valid_from=JUNE)])
    profile = await provider.get_profile(U, A)
    assert profile == (
        "- age: 41 (since 2026-06)\n- home city: London (since 2026-03)\n\nLikes long walks."
    )
    assert await provider.get_profile_at(U, A, made.version) == (
        "- home city: London (since 2026-03)\n\nLikes long walks."
    )
    # A text read and written back keeps the facts out of the free text.
    await provider.set_profile(U, A, profile + "\nPrefers tea.")
    assert await provider.get_profile(U, A) == (
        "- age: 41 (since 2026-06)\n- home city: London (since 2026-03)\n\n"
        "Likes long walks.\nPrefers tea."
    )
    # Reading a version is stable however later writes go.
    at = await provider.get_profile_at(U, A, made.version)
    await provider.apply_facts(U, A, [FactOp("set", "home city", "Paris")])
    assert await provider.get_profile_at(U, A, made.version) == at


async def test_forget_removes_a_fact_only_the_message_supported(provider) -> None:  # type: ignore[no-untyped-def]
    london, berlin, again = await said(
        provider, S, ("London", MARCH), ("moved to Berlin", JUNE), ("Berlin is great", AUGUST)
    )
    await provider.apply_facts(U, A, [FactOp("set", "home city", "London", [london])])
    await provider.apply_facts(U, A, [FactOp("set", "home city", "Berlin", [berlin])])
    await provider.apply_facts(U, A, [FactOp("set", "job", "nurse")])  # no evidence: stays
    owner = fg.Owner(U, A)
    await provider.apply_facts(U, A, [FactOp("set", "home city", "Berlin", [again])])
    await fg.forget(provider, owner, [berlin])
    [city, _job] = await provider.current_facts(U, A)
    assert (city.value, city.evidence) == ("Berlin", (again,))  # another message holds it
    frozen = await provider.get_or_create_snapshot(S.id, U, A)
    assert "Berlin" in await provider.get_profile_at(U, A, frozen.version)
    await fg.forget(provider, owner, [again])
    # The session's snapshot moved: a prompt cached per version cannot keep Berlin.
    moved = await provider.get_or_create_snapshot(S.id, U, A)
    assert moved.version == frozen.version + 1
    assert "Berlin" not in await provider.get_profile_at(U, A, frozen.version)
    # Berlin rested on the forgotten messages alone: gone, and London is current again.
    current = await provider.current_facts(U, A)
    assert [(f.key, f.value) for f in current] == [("home city", "London"), ("job", "nurse")]
    assert current[0].valid_to is None and current[0].replaced_by is None
    assert [f.value for f in await provider.fact_history(U, A, "city")] == ["London"]
    assert "Berlin" not in await provider.get_profile(U, A)


async def test_forgetting_a_retractions_message_makes_the_fact_current_again(provider) -> None:  # type: ignore[no-untyped-def]
    veg, unsaid, other = await said(
        provider, S, ("I'm vegetarian", MARCH), ("not vegetarian any more", JUNE), ("hi", JUNE)
    )
    await provider.apply_facts(U, A, [FactOp("set", "diet", "vegetarian", [veg])])
    await provider.apply_facts(U, A, [FactOp("retract", "diet", message_ids=[unsaid])])
    # Recorded without a source, retracted on a message: the message alone retracted it.
    await provider.apply_facts(U, A, [FactOp("set", "pet", "cat")])
    await provider.apply_facts(U, A, [FactOp("retract", "pet", message_ids=[unsaid])])
    # A retraction citing nothing is not touched by any forget.
    await provider.apply_facts(U, A, [FactOp("set", "sport", "chess")])
    await provider.apply_facts(U, A, [FactOp("retract", "sport")])
    assert await provider.current_facts(U, A) == []
    owner = fg.Owner(U, A)
    preview = await fg.preview_of(provider, owner, [unsaid])
    assert preview.dependents.facts == []
    assert preview.dependents.facts_back == ["diet: vegetarian", "pet: cat"]
    frozen = await provider.get_or_create_snapshot(S.id, U, A)
    await fg.forget(provider, owner, [unsaid, other])
    # The retraction never happened: the facts are current again, from the start.
    diet, pet = await provider.current_facts(U, A)
    assert (diet.key, diet.value, diet.evidence, diet.valid_from) == (
        "diet",
        "vegetarian",
        (veg,),
        MARCH,
    )
    assert (diet.valid_to, diet.version_to, diet.replaced_by) == (None, None, None)
    assert (pet.key, pet.value, pet.evidence) == ("pet", "cat", ())
    later = datetime.now(UTC) + timedelta(days=1)
    assert [f.value for f in await provider.facts_as_of(U, A, later)] == ["vegetarian", "cat"]
    [sport] = await provider.fact_history(U, A, "sport")
    assert sport.state == "retracted"
    # Prompts move on: the owner has a new version and the snapshot follows it.
    moved = await provider.get_or_create_snapshot(S.id, U, A)
    assert moved.version == frozen.version + 1
    assert "- diet: vegetarian" in await provider.get_profile_at(U, A, moved.version)


async def test_an_unsaid_retraction_yields_to_what_the_key_got_since(provider) -> None:  # type: ignore[no-untyped-def]
    london, left, paris, berlin, gone = await said(
        provider,
        S,
        ("London", MARCH),
        ("left London", JUNE),
        ("Paris now", AUGUST),
        ("Berlin", MARCH),
        ("left Berlin", JUNE),
    )
    await provider.apply_facts(U, A, [FactOp("set", "home city", "London", [london])])
    await provider.apply_facts(U, A, [FactOp("retract", "home city", message_ids=[left])])
    [now] = await provider.apply_facts(U, A, [FactOp("set", "home city", "Paris", [paris])])
    await fg.forget(provider, fg.Owner(U, A), [left])
    # As if never said: London held until Paris replaced it.
    old, new = await provider.fact_history(U, A, "city")
    assert (old.value, old.state, old.valid_to, old.replaced_by) == (
        "London",
        "superseded",
        AUGUST,
        now.fact.id,
    )
    assert old.version_to == new.version_from and (new.value, new.state) == ("Paris", "current")
    # A fact that goes with the retraction of what replaced it: the first is current again.
    await provider.apply_facts(U, A, [FactOp("set", "job", "cook", [london])])
    await provider.apply_facts(U, A, [FactOp("set", "job", "baker", [berlin])])
    await provider.apply_facts(U, A, [FactOp("retract", "job", message_ids=[gone])])
    await fg.forget(provider, fg.Owner(U, A), [berlin, gone])
    job = [f for f in await provider.current_facts(U, A) if f.key == "job"]
    assert [(f.value, f.valid_to, f.evidence) for f in job] == [("cook", None, (london,))]


async def test_a_revert_of_a_retraction_copies_what_said_it_not_what_unsaid_it(provider) -> None:  # type: ignore[no-untyped-def]
    veg, unsaid = await said(provider, S, ("vegetarian", MARCH), ("not any more", JUNE))
    await provider.apply_facts(U, A, [FactOp("set", "diet", "vegetarian", [veg])])
    [gone] = await provider.apply_facts(U, A, [FactOp("retract", "diet", message_ids=[unsaid])])
    assert gone.fact.evidence == (veg, unsaid)  # the timeline shows both
    await provider.revert_fact_change(U, A, gone.changelog_id)
    [back] = await provider.current_facts(U, A)
    assert back.evidence == (veg,)
    # Forgetting the retraction's message now changes nothing: the revert undid it.
    await fg.forget(provider, fg.Owner(U, A), [unsaid])
    assert [f.id for f in await provider.current_facts(U, A)] == [back.id]


async def test_erase_removes_every_fact(provider) -> None:  # type: ignore[no-untyped-def]
    [m] = await said(provider, S, ("London", MARCH))
    await provider.apply_facts(U, A, [FactOp("set", "home city", "London", [m])])
    await provider.apply_facts(U, A, [FactOp("set", "job", "nurse")])
    await fg.erase(provider, fg.Owner(U, A), "test")
    assert await provider.fact_history(U, A) == []
    assert await provider.get_profile(U, A) == ""


async def test_concurrent_writes_on_one_key_leave_one_current_fact(provider) -> None:  # type: ignore[no-untyped-def]
    await asyncio.gather(
        *(provider.apply_facts(U, A, [FactOp("set", "home city", f"City {i}")]) for i in range(6))
    )
    [current] = await provider.current_facts(U, A)
    history = await provider.fact_history(U, A)
    assert len(history) == 6 and sum(f.state == "current" for f in history) == 1
    # Each superseded one names the next; following the chain ends at the current one.
    by_id = {f.id: f for f in history}
    ends = {f.replaced_by for f in history if f.replaced_by}
    assert current.id in ends and all(by_id[e] for e in ends)


async def test_the_database_refuses_two_current_facts_on_a_key(provider) -> None:  # type: ignore[no-untyped-def]
    await provider.apply_facts(U, A, [FactOp("set", "pet", "cat")])
    async with fg.engine_of(provider).connect() as conn:
        row = (await conn.execute(sa.select(fact_rows).limit(1))).mappings().one()
    with pytest.raises(sa.exc.IntegrityError):
        async with fg.engine_of(provider).begin() as conn:
            await conn.execute(sa.insert(fact_rows).values({**row, "id": "f_copy"}))
