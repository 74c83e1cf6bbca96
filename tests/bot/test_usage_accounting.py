"""Usage accounting end to end: the bot (build_services, lcm on SQLite) against the fake
OpenAI server, which reports usage the way mnemo estimates a request. Every model call
becomes one row in `usage_records`, with the tokens reported (or estimated, flagged),
kind, model, user, agent and session; /memory status shows today's and this month's;
limits and the background spend guard act on them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from bot.app.services import Services, build_services
from bot.conversation.commands import handle_command
from bot.runtime import metrics
from memory.contract.types import Session
from memory.storage.prices import format_cost
from memory.storage.usage import usage_records
from memory.text.tokens import estimate_tokens, request_tokens
from tests.bot.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI, error, text, tool_call

S = Session("default:telegram:42", "default", 42, "telegram")
ADMIN = Session("default:telegram:7", "default", 7, "telegram")


@pytest.fixture
async def services_for(llm_server: FakeOpenAI, tmp_path: Path) -> AsyncIterator[Any]:
    made: list[Services] = []

    async def build(**sections: dict[str, Any]) -> Services:
        sections.setdefault("memory", {})
        sections["memory"] = {"provider": "lcm", **sections["memory"]}
        settings = make_settings(
            llm_server,
            tmp_path / "data",
            database={"url": f"sqlite+aiosqlite:///{tmp_path / 'm.db'}"},
            **sections,
        )
        services = await build_services(settings)
        made.append(services)
        return services

    yield build
    for services in made:
        await services.close()


async def rows(services: Services) -> list[Any]:
    async with services.engine.connect() as conn:
        return list(
            (await conn.execute(sa.select(usage_records).order_by(usage_records.c.at))).all()
        )


async def status(services: Services, session: Session = S) -> str:
    return await handle_command(services.conversations, session, "memory", "status", is_admin=False)


async def test_a_turn_with_a_tool_round_is_recorded_call_by_call(
    services_for: Any, llm_server: FakeOpenAI
) -> None:
    services = await services_for(
        llm={"model": "acct-model", "prices": {"acct-model": {"input": 1.0, "output": 2.0}}}
    )
    llm_server.cached_tokens = 5
    llm_server.push(tool_call("memory", {"action": "status"}), text("All is well with you."))
    before = metrics.sample(
        "mnemo_llm_tokens_total", {"kind": "chat", "model": "acct-model", "type": "cached_prompt"}
    )
    reply = await services.conversations.chat(S, "how is my memory doing?")
    assert reply.text == "All is well with you." and not reply.error
    first, second = llm_server.requests
    stored = await rows(services)
    assert [(r.kind, r.model, r.user_id, r.agent_id, r.session_id) for r in stored] == [
        ("chat", "acct-model", 42, "default", S.id)
    ] * 2
    expected = [
        (
            request_tokens(first["messages"], first["tools"])[0],
            5,
            estimate_tokens('memory{"action": "status"}'),
        ),
        (
            request_tokens(second["messages"], second["tools"])[0],
            5,
            estimate_tokens("All is well with you."),
        ),
    ]
    assert [(r.prompt_tokens, r.cached_tokens, r.completion_tokens) for r in stored] == expected
    assert not any(r.estimated for r in stored)
    after = metrics.sample(
        "mnemo_llm_tokens_total", {"kind": "chat", "model": "acct-model", "type": "cached_prompt"}
    )
    assert after - before == 10
    total = sum(p + c for p, _, c in expected)
    shown = await status(services)
    assert f"today {total:,} tokens" in shown and "of them 10 cached" in shown
    cost = sum((p - 5) * 1.0 + 5 * 1.0 + c * 2.0 for p, _, c in expected) / 1e6
    assert f"about {format_cost(cost)} at the configured prices" in shown
    assert f"this month {total:,} tokens" in shown


async def test_a_server_without_usage_gets_estimates_flagged(
    services_for: Any, llm_server: FakeOpenAI
) -> None:
    services = await services_for()
    llm_server.report_usage = False
    await services.conversations.chat(S, "Привет! 你好")
    [row] = await rows(services)
    request = llm_server.requests[0]
    assert (
        row.estimated
        and row.prompt_tokens == request_tokens(request["messages"], request["tools"])[0]
    )
    assert row.completion_tokens == estimate_tokens("echo: Привет! 你好")
    assert "partly estimated" in await status(services)


async def test_a_failed_turn_still_records_what_was_spent(
    services_for: Any, llm_server: FakeOpenAI
) -> None:
    services = await services_for(llm={"max_retries": 0})
    llm_server.push(tool_call("memory", {"action": "status"}), error(400))
    reply = await services.conversations.chat(S, "this will fail")
    assert reply.error
    [row] = await rows(services)  # the first round was answered, and paid for
    assert row.kind == "chat" and row.completion_tokens > 0


async def test_over_the_daily_limit_the_message_is_stored_not_answered(
    services_for: Any, llm_server: FakeOpenAI
) -> None:
    services = await services_for(limits={"tokens_per_day": 50}, telegram={"admin_ids": [7]})
    await services.conversations.chat(S, "first message, answered")
    assert sum(r.prompt_tokens + r.completion_tokens for r in await rows(services)) >= 50
    sent = len(llm_server.requests)
    limited = metrics.sample("mnemo_limited_turns_total")
    reply = await services.conversations.chat(S, "second message, over the limit")
    assert metrics.sample("mnemo_limited_turns_total") == limited + 1
    assert reply.error and reply.limited
    assert "today's 50 tokens" in reply.text and "at 00:00 UTC" in reply.text
    assert len(llm_server.requests) == sent  # the model was not called
    history = await services.provider.load_history(S.id)
    assert history[-1].content == "second message, over the limit"  # kept
    assert "of 50" in await status(services)
    # An admin is exempt.
    for _ in range(3):
        assert not (await services.conversations.chat(ADMIN, "admin talks a lot")).error


async def test_summaries_are_recorded_with_their_compaction_and_the_guard_defers(
    services_for: Any, llm_server: FakeOpenAI
) -> None:
    services = await services_for(
        memory={"budget_tokens": 4000, "lcm": {"leaf_chunk_size": 2}},
        compaction={"max_tokens": 60, "keep_tail": 2},
        limits={"background": {"calls_per_user": 1}},
    )
    deferred_before = metrics.sample("mnemo_background_deferred_total", {"kind": "summary"})
    for i in range(6):
        await services.conversations.chat(S, f"message number {i} with some words in it")
        await services.conversations.drain()
    summaries = [r for r in await rows(services) if r.kind == "summary"]
    # One compaction (its calls: the fake's long echo escalates), then the guard (1 call
    # per user per hour, asked before each compaction) put the next ones off.
    assert len(summaries) >= 1
    assert await services.provider.needs_compaction(S, 60)
    assert all((r.user_id, r.session_id) == (42, S.id) for r in summaries)
    deferred = metrics.sample("mnemo_background_deferred_total", {"kind": "summary"})
    assert deferred - deferred_before >= 1
    assert "Background summary put off" in await status(services)
    summary_calls = [r for r in llm_server.requests if "tools" not in r]
    assert len(summary_calls) == len(summaries)  # every summary request has its row


async def test_calibration_follows_the_server(services_for: Any, llm_server: FakeOpenAI) -> None:
    services = await services_for(llm={"model": "scaled-model"})
    llm_server.prompt_scale = 1.5  # this server's tokenizer counts half again as much
    await services.conversations.chat(S, "hello there")
    calibration = services.llm.calibration
    assert calibration.factor("scaled-model") == pytest.approx(1.5, rel=0.02)
    assert calibration.scaled_budget("scaled-model", 4000) == pytest.approx(2667, abs=30)


@pytest.mark.parametrize(("scale", "compacted"), [(1.0, False), (2.0, True)])
async def test_the_compaction_threshold_is_in_the_servers_tokens(
    services_for: Any, llm_server: FakeOpenAI, scale: float, compacted: bool
) -> None:
    """About 42 estimated tokens of context against `compaction.max_tokens: 60`: under
    it as estimated, over it on a server that counts twice as many."""
    services = await services_for(
        memory={"lcm": {"leaf_chunk_size": 2}}, compaction={"max_tokens": 60, "keep_tail": 2}
    )
    llm_server.prompt_scale = scale
    for i in range(2):
        await services.conversations.chat(S, f"message number {i} with some words in it")
        await services.conversations.drain()
    assert 30 < (await services.provider.stats(S)).token_count < 60  # what was said
    summaries = [r for r in await rows(services) if r.kind == "summary"]
    assert bool(summaries) is compacted


async def test_an_answer_that_could_not_be_stored_still_has_its_usage(
    services_for: Any, llm_server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows ride in the answer's append; when that append rolls back, they are
    written on their own (the tokens were spent)."""
    services = await services_for()
    await services.conversations.chat(S, "first")
    assert len(await rows(services)) == 1
    from memory.storage.usage import Ledger

    async def broken_write(self: Ledger, conn: Any) -> None:
        await conn.execute(sa.insert(usage_records), [r.values() for r in self.unsettled()])
        raise RuntimeError("the disk filled up mid-append")

    monkeypatch.setattr(Ledger, "write", broken_write)
    reply = await services.conversations.chat(S, "second")
    assert reply.error and "saving the answer" in reply.text
    stored = await rows(services)
    assert len(stored) == 2 and len({r.id for r in stored}) == 2  # once each, not lost
    history = await services.provider.load_history(S.id)
    assert [m.content for m in history][-1] == "second"  # the answer rolled back
