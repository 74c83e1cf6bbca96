"""The memory tool's fact actions and `/memory facts` through a real provider, on SQLite
and PostgreSQL: what a fact may cite (its conversation, this turn's memory results; the
turn's own message by default), the cap's request to merge, `as_of`, and the model's and
people's renderings."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.actions.commands import run_memory_command
from memory.actions.provenance import returned_refs
from memory.actions.spec import FrontEnd
from memory.actions.tool import run_tool
from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.contract.types import ChangeSource, Message, Session
from tests.fakes.summarizer import KeepingSummarizer
from tests.memory.test_facts import said

U, A = 7, "default"
HERE = Session("tg-7#2", A, U)
EARLIER = Session("tg-7", A, U)
MARCH = datetime(2026, 3, 2, 9, tzinfo=UTC)
JUNE = datetime(2026, 6, 10, 9, tzinfo=UTC)


@pytest.fixture
async def provider(engine: AsyncEngine, tmp_path: Path):  # type: ignore[no-untyped-def]
    p = create_provider(
        "lcm",
        ProviderContext(
            engine=engine, summarizer=KeepingSummarizer(), data_dir=tmp_path, max_facts=2
        ),
    )
    yield p
    await p.close()


async def tool(provider, front: FrontEnd, **args: object) -> str:  # type: ignore[no-untyped-def]
    return await run_tool(provider, HERE, args, source=ChangeSource.AGENT, front=front)


async def test_a_fact_cites_the_turn_s_message_unless_it_names_others(provider) -> None:  # type: ignore[no-untyped-def]
    [old] = await said(provider, EARLIER, ("I grew up in Leeds, now London", MARCH))
    [own] = await said(provider, HERE, ("I moved to Berlin", JUNE))
    turn = FrontEnd(in_turn=True)
    out = await tool(provider, turn, action="fact_set", key="Home City", value="Berlin")
    assert out == f"recorded home city: Berlin (version 1); sources: message {own}"
    [fact] = await provider.current_facts(U, A)
    assert fact.evidence == (own,) and fact.valid_from == JUNE and fact.source == "agent"
    # A message of another conversation is cited only once a memory call returned it.
    out = await tool(provider, turn, action="fact_set", key="home city", value="berlin",
                     message_ids=[old])  # fmt: skip
    assert out.startswith("already known: source added to home city: Berlin")
    assert (
        f"not cited (neither in this conversation nor returned by this turn's memory calls): {old}"
        in out
    )
    hits = await tool(provider, turn, action="search", text="Leeds")
    assert f"[message {old}]" in hits and str(old) in turn.citable
    out = await tool(provider, turn, action="fact_set", key="grew up in", value="Leeds",
                     message_ids=[str(old)])  # fmt: skip
    assert out == f"recorded grew up in: Leeds (version 3); sources: message {old}"
    # Another user's message id is never stored, even when named.
    [theirs] = await said(provider, Session("tg-8", A, 8), ("I live in Rome", JUNE))
    turn.citable.add(str(theirs))
    out = await tool(provider, turn, action="fact_set", key="grew up in", value="Leeds",
                     message_ids=[theirs])  # fmt: skip
    assert f"not cited (not in this memory): {theirs}" in out


async def test_the_cap_asks_the_model_to_merge(provider) -> None:  # type: ignore[no-untyped-def]
    await said(provider, HERE, ("cat Tom, nurse", MARCH))
    turn = FrontEnd(in_turn=True)
    await tool(provider, turn, action="fact_set", key="pet", value="a cat")
    await tool(provider, turn, action="fact_set", key="pet name", value="Tom")
    out = await tool(provider, turn, action="fact_set", key="job", value="nurse")
    assert out.startswith("error: this memory already holds 2 current facts") and "merge" in out
    out = await tool(
        provider, turn, action="fact_merge", keys=["pet name"], key="pet", value="a cat, Tom"
    )
    assert out.startswith("pet name, pet merged into pet: a cat, Tom")
    assert (await tool(provider, turn, action="fact_set", key="job", value="nurse")).startswith(
        "recorded job: nurse"
    )
    bad = await tool(provider, turn, action="fact_merge", keys="pet", key="x", value="y")
    assert bad == "error: keys must be a list of 1 to 20 fact keys"


async def test_fact_list_as_of_and_its_sources_are_citable(provider) -> None:  # type: ignore[no-untyped-def]
    london, berlin = await said(provider, HERE, ("London", MARCH), ("Berlin now", JUNE))
    turn = FrontEnd(in_turn=True)
    await tool(provider, turn, action="fact_set", key="home city", value="London",
               message_ids=[london])  # fmt: skip
    await tool(provider, turn, action="fact_set", key="home city", value="Berlin",
               message_ids=[berlin])  # fmt: skip
    out = await tool(provider, turn, action="fact_list", as_of="2026-04-01")
    assert out == (
        "1 fact(s) true on 2026-04-01:\n"
        f"home city: London (since 2026-03-02, until 2026-06-10, superseded); sources: message {london}"
    )
    assert [r.id for r in returned_refs("fact_list", out)] == [str(london)]
    now = await tool(provider, turn, action="fact_list")
    assert now.startswith("1 fact(s) current:\nhome city: Berlin (since 2026-06-10)")
    assert await tool(provider, turn, action="fact_list", topic="diet") == (
        "no facts current about “diet”"
    )
    assert (await tool(provider, turn, action="fact_list", as_of="March")).startswith(
        "error: as_of must be a date like 2026-03-01"
    )
    out = await tool(provider, turn, action="fact_retract", key="home city")
    assert out.startswith("retracted home city: Berlin")
    assert await tool(provider, turn, action="fact_retract", key="home city") == (
        "not found: no current fact under 'home city' to retract"
    )
    # People's view, and the history says what each change did.
    people = await run_memory_command(provider, HERE, "facts 2026-04-01", is_admin=False)
    assert people == (
        "What I hold about you on 01 Apr 2026:\n"
        f"• home city: London, since 02 Mar 2026 until 10 Jun 2026 (sources: {london})"
    )
    assert await run_memory_command(provider, HERE, "facts", is_admin=False) == (
        "I hold no facts about you."
    )
    history = await run_memory_command(provider, HERE, "history", is_admin=False)
    assert "fact delete by agent" in history and "home city: Berlin retracted" in history
    assert "home city: Berlin (was London)" in history


async def test_facts_in_the_prompt_follow_the_profile_snapshot(provider) -> None:  # type: ignore[no-untyped-def]
    await provider.append(HERE, Message("user", "I live in Oslo", created_at=MARCH))
    await provider.set_profile(U, A, "Likes fjords.")
    snap = await provider.get_or_create_snapshot(HERE.id, U, A)
    await tool(provider, FrontEnd(in_turn=True), action="fact_set", key="home city", value="Oslo")
    # The model's own write waits for the next snapshot move, as profile writes do.
    assert await provider.get_profile_at(U, A, snap.version) == "Likes fjords."
    assert await provider.get_profile(U, A) == (
        "- home city: Oslo (since 2026-03)\n\nLikes fjords."
    )


async def test_people_record_and_retract_facts_themselves(provider) -> None:  # type: ignore[no-untyped-def]
    async def cmd(words: str) -> str:
        return await run_memory_command(provider, HERE, words, is_admin=False)

    assert await cmd("fact home city: London") == "Noted: home city: London."
    assert await cmd("fact Home City: Berlin") == "Noted: home city: Berlin (was London)."
    assert await cmd("fact home city: berlin") == "I knew that already: home city: Berlin."
    [fact] = await provider.current_facts(U, A)
    assert (fact.source, fact.evidence, fact.session_id) == ("user", (), HERE.id)
    assert await cmd("unfact home city") == "No longer true: home city: Berlin."
    assert await cmd("unfact home city") == (
        "No current fact under “home city”; /memory facts lists them."
    )
    assert (await cmd("fact no colon here")).startswith("Usage: /memory fact <key>: <value>")
    # A person's write reaches the conversation at once: its snapshot moved.
    snap = await provider.get_or_create_snapshot(HERE.id, U, A)
    assert snap.version == await provider.memory_version(U, A) == 4
