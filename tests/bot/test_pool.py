"""The pool against the reference provider and a real local OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.conversation.service import Conversations
from memory.compaction.summarizer import StaticSummarizer
from memory.contract.errors import Unsupported
from memory.contract.types import ChangeSource, Message, Session
from tests.bot.conftest import GatedSummarizer, PoolFactory, sql_statements
from tests.fakes.openai_server import FakeOpenAI, error, gated, text, tool_call

ALICE = Session(id="default:test:1", user_id=1, channel="test")
BOB = Session(id="default:test:2", user_id=2, channel="test")


def roles(msgs) -> list[str]:
    return [m.role for m in msgs]


async def test_turn_stores_every_message_and_prompts_with_memory(
    engine: AsyncEngine, make_pool: PoolFactory, llm_server: FakeOpenAI, tmp_path: Path
):
    data = tmp_path / "data"
    data.mkdir()
    (data / "Soul.md").write_text("You are a pirate.")
    (data / "USER.md").write_text("The user is called Alice.")
    pool = make_pool(engine)
    await pool.provider.add_constraint(1, "default", "Never use emoji.")
    llm_server.push(tool_call("memory", {"action": "constraint_list"}), text("Arr, hello Alice."))
    deltas: list[str] = []

    async def on_delta(so_far: str) -> None:
        deltas.append(so_far)

    reply = await pool.chat(ALICE, "hello", on_delta=on_delta)
    assert reply.text == "Arr, hello Alice." and not reply.error
    assert deltas[-1] == reply.text
    history = await pool.provider.load_history(ALICE.id)
    assert roles(history) == ["user", "assistant", "tool", "assistant"]
    assert history[0].content == "hello"
    assert history[1].tool_calls[0].name == "memory"
    assert "Never use emoji." in history[2].content
    assert history[2].tool_call_id == history[1].tool_calls[0].id
    system = llm_server.requests[0]["messages"][0]
    assert system["role"] == "system"
    prompt = system["content"]
    assert prompt.startswith(pool.settings.agent.system_prompt)
    memory_block = prompt[prompt.index("<memory>") :]
    for expected in (
        "You are a pirate.",
        "The user is called Alice.",
        "Never use emoji.",
        "</memory>",
    ):
        assert expected in memory_block
    assert llm_server.requests[0]["messages"][-1] == {"role": "user", "content": "hello"}
    assert llm_server.requests[0]["tools"][0]["function"]["name"] == "memory"
    # The identity files were seeded as a `system` change, once.
    log = await pool.provider.read_changelog(1, "default")
    assert {(e.scope, e.source) for e in log if e.scope != "constraint"} == {
        ("soul", "system"),
        ("profile", "system"),
    }


async def test_final_llm_failure_keeps_the_user_message_and_no_half_turn(
    sqlite_engine: AsyncEngine, make_pool: PoolFactory, llm_server: FakeOpenAI
):
    pool = make_pool(sqlite_engine)
    # One tool round succeeds, then the model fails on every attempt (max_retries=2).
    llm_server.push(tool_call("memory", {"action": "status"}), *[error(500)] * 3)
    reply = await pool.chat(ALICE, "are you there?")
    assert reply.error and "HTTP 500" in reply.text and "\n" not in reply.text
    history = await pool.provider.load_history(ALICE.id)
    assert roles(history) == ["user"] and history[0].content == "are you there?"
    # The next turn works and answers the kept message with it: one user turn, as
    # strict chat templates demand; the stored history keeps both messages.
    reply = await pool.chat(ALICE, "hello again")
    assert reply.text == "echo: are you there?\n\nhello again"
    assert roles(await pool.provider.load_history(ALICE.id)) == ["user", "user", "assistant"]
    sent = [m["content"] for m in llm_server.requests[-1]["messages"][1:]]
    assert sent == ["are you there?\n\nhello again"]


async def test_tool_writes_are_tagged_agent_and_reach_the_prompt_at_the_next_compaction(
    sqlite_engine: AsyncEngine, make_pool: PoolFactory, llm_server: FakeOpenAI
):
    pool = make_pool(sqlite_engine, summarizer=StaticSummarizer("they talked about tea"))
    llm_server.push(
        tool_call("memory", {"action": "profile_update", "content": "Likes green tea."}),
        text("Noted."),
    )
    assert (await pool.chat(ALICE, "I like green tea")).text == "Noted."
    [entry] = await pool.provider.read_changelog(1, "default", "profile")
    assert entry.source == ChangeSource.AGENT and entry.session_id == ALICE.id
    # The write does not break the cached prefix: the next request starts with the whole
    # previous one (system prompt included); the model has the write as its tool result.
    previous = llm_server.requests[-1]["messages"]
    await pool.chat(ALICE, "what do I like?")
    assert llm_server.requests[-1]["messages"][: len(previous)] == previous
    assert "Likes green tea." not in llm_server.requests[-1]["messages"][0]["content"]
    # A compaction rewrites the prompt's start anyway: the profile joins it there.
    assert (await pool.compact(ALICE)).changed
    await pool.chat(ALICE, "and now?")
    assert "Likes green tea." in llm_server.requests[-1]["messages"][0]["content"]


async def test_new_starts_at_the_current_memory(
    sqlite_engine: AsyncEngine, make_pool: PoolFactory, llm_server: FakeOpenAI
):
    pool = make_pool(sqlite_engine)
    llm_server.push(
        tool_call("memory", {"action": "profile_update", "content": "Likes green tea."}),
        text("Noted."),
    )
    await pool.chat(ALICE, "I like green tea")
    await pool.chat(ALICE, "hello")
    assert "Likes green tea." not in llm_server.requests[-1]["messages"][0]["content"]
    fresh = await pool.new_session(ALICE)  # /new
    await pool.chat(fresh, "hello again")
    assert "Likes green tea." in llm_server.requests[-1]["messages"][0]["content"]


async def test_a_session_reads_memory_at_its_snapshot_version(
    sqlite_engine: AsyncEngine, make_pool: PoolFactory, llm_server: FakeOpenAI
):
    pool = make_pool(sqlite_engine)
    await pool.chat(ALICE, "first")
    await pool.provider.set_profile(1, "default", "Changed elsewhere.")  # e.g. reflect
    await pool.chat(ALICE, "second")
    assert "Changed elsewhere." not in llm_server.requests[-1]["messages"][0]["content"]
    other = Session(id="default:test:1:other", user_id=1, channel="test")
    await pool.chat(other, "new conversation")
    assert "Changed elsewhere." in llm_server.requests[-1]["messages"][0]["content"]


async def test_one_serving_process_reads_a_snapshot_once_until_a_compaction_moves_it(
    sqlite_engine: AsyncEngine, make_pool: PoolFactory, llm_server: FakeOpenAI
):
    pool = make_pool(sqlite_engine, summarizer=StaticSummarizer("they talked"))
    await pool.chat(ALICE, "first")
    with sql_statements(sqlite_engine) as statements:
        await pool.chat(ALICE, "second")
        assert not [s for s in statements if "session_snapshots" in s]
        # The turn's own memory write leaves the snapshot (and the prompt) alone ...
        llm_server.push(
            tool_call("memory", {"action": "constraint_add", "text": "Answer in haiku."}),
            text("Noted."),
        )
        await pool.chat(ALICE, "always answer in haiku")
        statements.clear()
        await pool.chat(ALICE, "third")
        assert not [s for s in statements if "session_snapshots" in s]
        assert "Answer in haiku." not in llm_server.requests[-1]["messages"][0]["content"]
        # ... until a compaction moves it: the next turn reads it again.
        assert (await pool.compact(ALICE)).changed
        statements.clear()
        await pool.chat(ALICE, "fourth")
        assert [s for s in statements if "session_snapshots" in s]
        assert "Answer in haiku." in llm_server.requests[-1]["messages"][0]["content"]


async def test_sessions_run_in_parallel_and_one_session_serialises(
    sqlite_engine: AsyncEngine, make_pool: PoolFactory, llm_server: FakeOpenAI
):
    pool = make_pool(sqlite_engine)
    gate = asyncio.Event()
    llm_server.push(*[gated(gate, text(f"answer {i}")) for i in range(3)])
    a1 = asyncio.create_task(pool.chat(ALICE, "a1"))
    await llm_server.wait_for_requests(1)
    a2 = asyncio.create_task(pool.chat(ALICE, "a2"))
    b1 = asyncio.create_task(pool.chat(BOB, "b1"))
    # Bob's turn reaches the model while Alice's first is still held there...
    await llm_server.wait_for_requests(2)
    assert llm_server.in_flight == 2
    assert llm_server.requests[1]["messages"][-1]["content"] == "b1"
    # ...while Alice's second waits for her first (it has not even stored its message).
    for _ in range(50):
        await asyncio.sleep(0)
    assert len(llm_server.requests) == 2
    assert [m.content for m in await pool.provider.load_history(ALICE.id)] == ["a1"]
    gate.set()
    await asyncio.gather(a1, a2, b1)
    history = await pool.provider.load_history(ALICE.id)
    assert roles(history) == ["user", "assistant", "user", "assistant"]
    assert [history[0].content, history[2].content] == ["a1", "a2"]


async def test_auto_compaction_runs_after_the_reply_without_holding_the_session(
    sqlite_engine: AsyncEngine, make_pool: PoolFactory
):
    summarizer = GatedSummarizer()
    pool = make_pool(
        sqlite_engine, summarizer=summarizer, compaction={"max_tokens": 10, "keep_tail": 2}
    )
    long = "tell me about the sea " * 5
    assert not (await pool.chat(ALICE, long)).error
    await pool.drain()  # two messages, all in the kept tail: nothing to compact yet
    assert summarizer.calls == 0
    reply = await pool.chat(ALICE, long)
    assert reply.text.startswith("echo:")  # the reply is here...
    await summarizer.started.wait()  # ...while the compaction it triggered still waits
    assert len(pool.background_tasks) == 1
    # The session is not locked by the slow summarizer: another turn completes.
    assert not (await pool.chat(ALICE, "still there?")).error
    assert (await pool.provider.stats(ALICE)).summary_count == 0
    summarizer.release.set()
    await pool.drain()
    stats = await pool.provider.stats(ALICE)
    assert stats.summary_count == 1 and stats.message_count == 6
    assert not pool.background_tasks


async def test_failed_auto_compaction_warns_and_changes_nothing(
    sqlite_engine: AsyncEngine, make_pool: PoolFactory, caplog: pytest.LogCaptureFixture
):
    summarizer = GatedSummarizer(fail=True)
    summarizer.release.set()
    pool = make_pool(
        sqlite_engine, summarizer=summarizer, compaction={"max_tokens": 10, "keep_tail": 2}
    )
    with caplog.at_level(logging.WARNING, logger="bot.conversation.service"):
        for i in range(3):
            assert not (await pool.chat(ALICE, f"message number {i} " * 5)).error
            await pool.drain()
    assert summarizer.calls >= 1
    assert any("automatic compaction" in r.getMessage() for r in caplog.records)
    stats = await pool.provider.stats(ALICE)
    assert stats.summary_count == 0 and stats.message_count == 6


async def test_disabled_auto_compaction_never_runs(
    sqlite_engine: AsyncEngine, make_pool: PoolFactory
):
    summarizer = GatedSummarizer()
    pool = make_pool(sqlite_engine, summarizer=summarizer, compaction={"max_tokens": -1})
    for i in range(3):
        await pool.chat(ALICE, f"long message {i} " * 10)
    assert not pool.background_tasks and summarizer.calls == 0


async def test_compact_now_and_without_a_compactor(
    sqlite_engine: AsyncEngine, make_pool: PoolFactory
):
    summarizer = GatedSummarizer()
    summarizer.release.set()
    pool = make_pool(sqlite_engine, summarizer=summarizer)
    for i in range(3):
        await pool.chat(ALICE, f"message {i}")
    result = await pool.compact(ALICE)
    assert result.messages_compacted == 4 and result.leaf_summaries_created == 1
    plain = make_pool(sqlite_engine, compactor=False)
    with pytest.raises(Unsupported):
        await plain.compact(ALICE)


async def test_new_session_rotates_and_survives_a_restart(
    sqlite_engine: AsyncEngine, make_pool: PoolFactory
):
    pool = make_pool(sqlite_engine)
    base = ALICE
    assert await pool.current_session(base) == base
    await pool.chat(base, "in the first conversation")
    nxt = await pool.new_session(base)
    assert nxt.id == f"{base.id}#1" and nxt.user_id == base.user_id
    assert await pool.current_session(base) == nxt
    assert (await pool.provider.load_info(base.id)).archived
    # A fresh pool over the same store (a restart) finds the same live session, even
    # before anything was said in it.
    again = make_pool(sqlite_engine, provider=pool.provider)
    assert await again.current_session(base) == nxt
    await again.chat(nxt, "in the second conversation")
    assert [m.content for m in await pool.provider.load_history(nxt.id)][0] == (
        "in the second conversation"
    )
    assert (await again.new_session(base)).id == f"{base.id}#2"
    assert await make_pool(sqlite_engine, provider=pool.provider).current_session(base) == (
        Session(id=f"{base.id}#2", user_id=1, channel="test")
    )


async def test_idle_slots_are_reaped(sqlite_engine: AsyncEngine, make_pool: PoolFactory):
    now = [0.0]
    template = make_pool(sqlite_engine)
    pool = Conversations(
        template.provider, template.llm, template.settings, idle_s=60, clock=lambda: now[0]
    )
    await pool.chat(ALICE, "hi")
    await pool.chat(BOB, "hi")
    assert pool.active_sessions == 2
    now[0] = 30.0
    await pool.chat(BOB, "still here")
    now[0] = 70.0
    assert pool.reap_idle() == 1 and pool.active_sessions == 1  # Alice's went, Bob's stays


async def test_close_cancels_a_stuck_background_compaction(
    sqlite_engine: AsyncEngine, make_pool: PoolFactory
):
    summarizer = GatedSummarizer()  # never released
    pool = make_pool(
        sqlite_engine, summarizer=summarizer, compaction={"max_tokens": 10, "keep_tail": 2}
    )
    await pool.chat(ALICE, "one " * 20)
    await pool.chat(ALICE, "two " * 20)
    await summarizer.started.wait()
    [task] = pool.background_tasks
    await pool.close(timeout_s=0.01)
    assert task.cancelled()
    assert (await pool.provider.stats(ALICE)).summary_count == 0
    with pytest.raises(RuntimeError, match="closed"):
        await pool.chat(ALICE, "after close")


async def test_empty_message_is_refused_and_nothing_stored(
    sqlite_engine: AsyncEngine, make_pool: PoolFactory, llm_server: FakeOpenAI
):
    pool = make_pool(sqlite_engine)
    reply = await pool.chat(ALICE, "   ")
    assert reply.error and not llm_server.requests
    assert await pool.provider.load_history(ALICE.id) == []


async def test_a_failing_stream_callback_does_not_break_the_turn(
    sqlite_engine: AsyncEngine, make_pool: PoolFactory, llm_server: FakeOpenAI
):
    pool = make_pool(sqlite_engine)
    calls = 0

    async def broken(_text: str) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("message to edit not found")

    llm_server.push(text("a reply long enough to stream in several deltas"))
    reply = await pool.chat(ALICE, "hi", on_delta=broken)
    assert reply.text == "a reply long enough to stream in several deltas" and not reply.error
    assert calls == 1  # given up after the first failure
    assert roles(await pool.provider.load_history(ALICE.id)) == ["user", "assistant"]


async def test_build_services_wires_a_registered_provider(llm_server: FakeOpenAI, tmp_path: Path):
    from bot.app.services import build_services
    from tests.bot.conftest import make_settings

    settings = make_settings(
        llm_server,
        tmp_path / "data",
        memory={"provider": "lcm"},
        database={"url": f"sqlite+aiosqlite:///{tmp_path / 'm.db'}"},
    )
    services = await build_services(settings)
    try:
        assert services.provider.name == "lcm"
        for i in range(3):
            assert (
                await services.conversations.chat(ALICE, f"message {i}")
            ).text == f"echo: message {i}"
        history = await services.provider.load_history(ALICE.id)
        assert [m.content for m in history][-2:] == ["message 2", "echo: message 2"]
    finally:
        await services.close()
        await services.close()  # idempotent


@pytest.mark.parametrize("failing_call", [1, 2])
async def test_a_memory_failure_is_told_plainly_without_exception_names(
    sqlite_engine: AsyncEngine,
    make_pool: PoolFactory,
    llm_server: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    failing_call: int,
):
    from sqlalchemy.exc import OperationalError

    pool = make_pool(sqlite_engine)
    append = pool.provider.append
    calls = 0

    async def flaky_append(session: Session, *messages, options=None):
        nonlocal calls
        calls += 1
        if calls == failing_call:  # 1: the user's message, 2: the answer
            raise OperationalError("INSERT", {}, Exception("disk I/O error"))
        return await append(session, *messages, options=options)

    monkeypatch.setattr(pool.provider, "append", flaky_append)
    reply = await pool.chat(ALICE, "hello")
    assert reply.error and "OperationalError" not in reply.text and "(" not in reply.text
    kept = roles(await pool.provider.load_history(ALICE.id))
    if failing_call == 1:
        assert "NOT saved" in reply.text and kept == [] and not llm_server.requests
    else:
        assert "while saving the answer" in reply.text and "is saved" in reply.text
        assert kept == ["user"]
    # the traceback is in the log instead
    assert any(r.exc_info and r.exc_info[0] is OperationalError for r in caplog.records)


async def test_identity_seeding_is_remembered_for_a_bounded_number_of_users(
    sqlite_engine: AsyncEngine, make_pool: PoolFactory, monkeypatch: pytest.MonkeyPatch
):
    import bot.conversation.turns

    seeded: list[int] = []
    seed = bot.conversation.turns.seed_identity

    async def counting_seed(provider, data_dir, user_id, agent_id):
        seeded.append(user_id)
        return await seed(provider, data_dir, user_id, agent_id)

    monkeypatch.setattr(bot.conversation.turns, "seed_identity", counting_seed)
    monkeypatch.setattr(bot.conversation.turns, "SEEDED_CACHE_SIZE", 2)
    pool = make_pool(sqlite_engine)
    users = [Session(id=f"default:test:{u}", user_id=u, channel="test") for u in (1, 2, 3)]
    for session in [*users, users[2], users[1], users[0]]:
        assert not (await pool.chat(session, "hi")).error
    # 3 and 2 were remembered; 1 was evicted by 3 (at most two kept) and seeded again
    assert seeded == [1, 2, 3, 1]


async def test_cached_live_session_costs_no_read_on_sqlite(
    sqlite_engine: AsyncEngine, make_pool: PoolFactory
):
    pool = make_pool(sqlite_engine)
    await pool.chat(await pool.current_session(ALICE), "hi")
    with sql_statements(sqlite_engine) as statements:
        # One serving process per SQLite file: its own /new is the only one there is.
        assert await pool.current_session(ALICE) == ALICE
        assert statements == []
        nxt = await pool.new_session(ALICE)
        assert await pool.current_session(ALICE) == nxt


@pytest.fixture
def lcm_replica(
    make_pool: PoolFactory, llm_server: FakeOpenAI, tmp_path: Path
) -> Callable[[AsyncEngine], Conversations]:
    """Pools on one engine with lcm, as replicas of one bot would be."""
    from memory.contract.capabilities import ProviderContext
    from memory.contract.registry import create_provider
    from tests.bot.conftest import make_settings

    config = make_settings(llm_server, tmp_path / "data").provider_config()

    def replica(engine: AsyncEngine) -> Conversations:
        ctx = ProviderContext(
            engine=engine,
            summarizer=GatedSummarizer(),
            agent_id="default",
            data_dir=tmp_path / "data",
            config=config,
        )
        return make_pool(engine, provider=create_provider("lcm", ctx))

    return replica


async def test_new_on_one_replica_is_seen_by_another_at_one_read_per_turn(
    engine: AsyncEngine, db_kind: str, lcm_replica: Callable[[AsyncEngine], Conversations]
):
    if db_kind == "sqlite":
        pytest.skip("replicas share PostgreSQL; one process serves a SQLite file")

    a, b = lcm_replica(engine), lcm_replica(engine)
    await b.chat(await b.current_session(ALICE), "before /new")  # b caches ALICE itself
    with sql_statements(engine) as statements:
        assert await b.current_session(ALICE) == ALICE
        # the check of a cached live session: one read
        reads = [s for s in statements if s not in ("BEGIN", "COMMIT", "ROLLBACK")]
        assert len(reads) == 1 and "FROM conversations" in reads[0], statements
        nxt = await a.new_session(ALICE)
        assert await b.current_session(ALICE) == nxt
    await b.chat(await b.current_session(ALICE), "after /new")
    assert [m.content for m in await b.provider.load_history(nxt.id)] == [
        "after /new",
        "echo: after /new",
    ]
    assert [m.content for m in await b.provider.load_history(ALICE.id)] == [
        "before /new",
        "echo: before /new",
    ]


async def test_a_message_resolved_before_a_new_on_another_replica_lands_in_the_new_one(
    engine: AsyncEngine, lcm_replica: Callable[[AsyncEngine], Conversations]
):
    a, b = lcm_replica(engine), lcm_replica(engine)
    await b.chat(await b.current_session(ALICE), "before /new")
    # B's channel resolves the live session (checked live), then A's /new commits, then
    # B's turn appends: the race the per-turn check alone leaves open.
    resolved = await b.current_session(ALICE)
    assert resolved == ALICE
    nxt = await a.new_session(ALICE)
    reply = await b.chat(resolved, "after /new")
    assert not reply.error and reply.text == "echo: after /new"
    assert [m.content for m in await b.provider.load_history(nxt.id)] == [
        "after /new",
        "echo: after /new",
    ]
    assert [m.content for m in await b.provider.load_history(ALICE.id)] == [
        "before /new",
        "echo: before /new",
    ]
    assert (await b.provider.load_info(ALICE.id)).archived
    assert await b.current_session(ALICE) == nxt  # B's cache follows
    # The next message goes straight to the live session, once.
    await b.chat(await b.current_session(ALICE), "again")
    assert [m.content for m in await a.provider.load_history(nxt.id)] == [
        "after /new",
        "echo: after /new",
        "again",
        "echo: again",
    ]


async def test_resume_answers_only_a_live_conversation_that_ends_with_its_user(
    engine: AsyncEngine, lcm_replica: Callable[[AsyncEngine], Conversations], llm_server: FakeOpenAI
):
    pool = lcm_replica(engine)  # on memory.storage.history, which refuses appends to the archived
    await pool.chat(ALICE, "hello")
    assert await pool.resume(ALICE) is None  # answered: nothing owed
    await pool.provider.append(ALICE, Message(role="user", content="still there?"))
    reply = await pool.resume(ALICE)  # stored, cut off before the answer
    assert reply is not None and reply.text == "echo: still there?"
    assert roles(await pool.provider.load_history(ALICE.id))[-2:] == ["user", "assistant"]

    await pool.provider.append(ALICE, Message(role="user", content="and now?"))
    await pool.new_session(ALICE)  # the user moved on before a restart
    asked = len(llm_server.requests)
    assert await pool.resume(ALICE) is None
    history = await pool.provider.load_history(ALICE.id)
    assert history[-1].content == "and now?"  # nothing appended to the old one
    assert len(llm_server.requests) == asked + 1  # (the model was asked, then dropped)
