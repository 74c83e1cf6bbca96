"""The parts of group consent below the bot, on both databases: a member's messages and
the turns answering them are what `forget mine` selects (nobody else's, nothing of another
memory), opt-outs are per (group, agent, member), and a session's export keeps who wrote
each message."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.consent import optouts
from memory.consent.mine import member_messages
from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.contract.types import Message, Origin, Owner, Session, ToolCall
from memory.storage.history import messages, origins
from memory.transfer.session import export_session, import_session
from tests.fakes.summarizer import KeepingSummarizer

GROUP = -1005
ALICE, BOB = 11, 12


def said(who: int, text: str, n: int) -> Message:
    return Message("user", f"[{who}] {text}", origin=Origin("telegram", GROUP, n, None, who))


def turn(who: int, text: str, n: int) -> list[Message]:
    """A member's message and the bot's answer, with a tool call in between."""
    call = ToolCall(id=f"c{n}", name="memory", arguments='{"action": "search"}')
    return [
        said(who, text, n),
        Message("assistant", "", tool_calls=[call]),
        Message("tool", "no hits", tool_call_id=f"c{n}", name="memory"),
        Message("assistant", f"answer to {text}"),
    ]


async def test_forget_mine_selects_a_members_turns_only(engine: AsyncEngine) -> None:
    provider = create_provider(
        "lcm", ProviderContext(engine=engine, summarizer=KeepingSummarizer(), config={})
    )
    group = Session(f"default:telegram:{GROUP}", "default", GROUP, "telegram")
    topic = Session(f"default:telegram:{GROUP}:7", "default", GROUP, "telegram")
    private = Session(f"default:telegram:{ALICE}", "default", ALICE, "telegram")
    await provider.append(group, *turn(ALICE, "a1", 1), *turn(BOB, "b1", 2))
    await provider.append(group, said(BOB, "b2 unanswered", 3), *turn(ALICE, "a2", 4))
    await provider.append(topic, Message("assistant", "topic opened"), *turn(ALICE, "a3", 5))
    await provider.append(private, *turn(ALICE, "private", 6))

    async with engine.connect() as conn:
        found = await member_messages(conn, Owner(GROUP, "default"), ALICE)
        rows = await conn.execute(
            sa.select(messages.c.id, messages.c.content).where(messages.c.id.in_(found))
        )
        texts = sorted(r.content for r in rows)
        assert len(found) == 12  # three turns of four messages
        assert [t for t in texts if t.startswith("[")] == [f"[{ALICE}] a{i}" for i in (1, 2, 3)]
        assert "answer to a3" in texts and not any("b1" in t or "b2" in t for t in texts)
        # Her private memory is another scope; Bob's selection is his alone.
        assert await member_messages(conn, Owner(GROUP, "other-agent"), ALICE) == []
        bobs = await member_messages(conn, Owner(GROUP, "default"), BOB)
        assert len(bobs) == 5 and not set(bobs) & set(found)
    await provider.close()


async def test_optouts_are_per_group_agent_and_member(engine: AsyncEngine) -> None:
    here, there = Owner(GROUP, "default"), Owner(GROUP - 1, "default")
    assert not await optouts.opted_out(engine, here, ALICE)
    assert await optouts.opt_out(engine, here, ALICE)
    assert not await optouts.opt_out(engine, here, ALICE)  # once
    assert await optouts.opted_out(engine, here, ALICE)
    assert not await optouts.opted_out(engine, here, BOB)
    assert not await optouts.opted_out(engine, there, ALICE)
    assert not await optouts.opted_out(engine, Owner(GROUP, "other"), ALICE)
    assert await optouts.opt_in(engine, here, ALICE)
    assert not await optouts.opt_in(engine, here, ALICE)
    assert not await optouts.opted_out(engine, here, ALICE)


async def test_an_export_keeps_who_wrote_each_message(engine: AsyncEngine) -> None:
    provider = create_provider(
        "lcm", ProviderContext(engine=engine, summarizer=KeepingSummarizer(), config={})
    )
    group = Session(f"default:telegram:{GROUP}", "default", GROUP, "telegram")
    await provider.append(group, *turn(ALICE, "a1", 1), *turn(BOB, "b1", 2))
    doc = await export_session(engine, group.id, provider)
    senders = [m["origin"].get("sender_id") for m in doc["messages"] if "origin" in m]
    assert senders == [ALICE, BOB]
    async with engine.begin() as conn:  # imported again, under another session id
        await conn.execute(origins.delete())
    doc["session"]["id"] = group.id + ":copy"
    await import_session(engine, doc, provider)
    async with engine.connect() as conn:
        rows = await conn.execute(sa.select(origins.c.sender_id).order_by(origins.c.sender_id))
        assert list(rows.scalars()) == [ALICE, BOB]
    await provider.close()
