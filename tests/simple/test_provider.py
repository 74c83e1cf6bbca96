"""The simple provider over a real database (SQLite and PostgreSQL): handoff compaction,
assemble from the latest marker, search, notes scoping and the review context."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.compaction.summarizer import StaticSummarizer, SummarizerError
from memory.contract.capabilities import ProviderContext, capabilities_of
from memory.contract.errors import Conflict, InvalidArgument, NotFound
from memory.contract.registry import create_provider
from memory.contract.types import (
    Message,
    NoteKind,
    SearchMode,
    SearchQuery,
    SearchScope,
    Session,
    SummarizeOptions,
    ToolCall,
)
from plugins.simple import SimpleProvider

S = Session("telegram:42", "bot", 42, "telegram")
OTHER = Session("telegram:43", "bot", 43, "telegram")
SUMMARY = "## Goal\nPlan a trip to Lisbon.\n## Next Steps\nBook flights."


def _msgs(n: int, start: int = 0) -> list[Message]:
    return [
        Message("user" if i % 2 == 0 else "assistant", f"message {i} " + "word " * 42)
        for i in range(start, start + n)
    ]


def _provider(engine: AsyncEngine, tmp_path: Path, summarizer=None, keep_tail: int = 4):
    ctx = ProviderContext(
        engine=engine,
        summarizer=summarizer or StaticSummarizer(SUMMARY),
        agent_id="bot",
        config={"store_dir": str(tmp_path / "mem"), "keep_tail": keep_tail},
    )
    return create_provider("simple", ctx)


async def test_registered_with_every_capability(engine: AsyncEngine, tmp_path: Path) -> None:
    provider = _provider(engine, tmp_path)
    assert isinstance(provider, SimpleProvider)
    assert set(capabilities_of(provider)) == {
        "Compactor",
        "Searcher",
        "ProfileStore",
        "ConstraintStore",
        "VersionedProfileStore",
        "VersionedConstraintStore",
        "ChangelogReader",
        "ChangelogWriter",
        "SessionSnapshotStore",
        "SessionManager",
        "Reviewer",
        "NoteStore",
        "EmbeddingSources",
        "Forgetter",
        "MessageReader",
        "AnswerOrigins",
        "FactStore",
    }
    await provider.close()
    await provider.close()  # idempotent


async def test_assemble_without_marker_respects_budget_and_fresh_tail(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    provider = _provider(engine, tmp_path)
    assert await provider.assemble(S, 1000, 4) == []
    msgs = _msgs(10)  # 50 tokens each
    await provider.append(S, *msgs)
    assert [m.content for m in await provider.assemble(S, 10_000, 2)] == [m.content for m in msgs]
    assert [m.content for m in await provider.assemble(S, 150, 2)] == [m.content for m in msgs[-3:]]
    # The fresh tail is kept even over budget.
    assert [m.content for m in await provider.assemble(S, 1, 4)] == [m.content for m in msgs[-4:]]


async def test_compaction_writes_marker_and_archive_and_assemble_replays_it(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    summarizer = StaticSummarizer(SUMMARY)
    provider = _provider(engine, tmp_path, summarizer, keep_tail=4)
    await provider.append(S, *_msgs(10))
    before = await provider.stats(S)

    result = await provider.compact(S)
    assert result.changed and result.messages_compacted == 6 and result.summary == SUMMARY
    assert result.tokens_before == before.context_tokens > result.tokens_after
    text, opts = summarizer.calls[0]
    assert opts.handoff and opts.previous == "" and opts.target_tokens > 0
    assert "message 0 " in text and "message 5 " in text and "message 6 " not in text

    archive = await provider.note_get(S, "archive-telegram-42-1")
    assert archive.kind == NoteKind.ARCHIVE and archive.content == SUMMARY

    context = await provider.assemble(S, 10_000, 2)
    assert [m.role for m in context[:2]] == ["user", "assistant"]
    assert SUMMARY in context[0].content and "archive-telegram-42-1" in context[0].content
    assert [m.content for m in context[2:]] == [m.content for m in _msgs(4, start=6)]

    stats = await provider.stats(S)
    assert (stats.message_count, stats.summary_count) == (10, 1)
    assert stats.context_tokens == result.tokens_after
    # History is lossless: every message is still stored.
    assert len(await provider.load_history(S.id)) == 10


async def test_repeated_compaction_carries_the_previous_summary(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    summarizer = StaticSummarizer(SUMMARY)
    provider = _provider(engine, tmp_path, summarizer, keep_tail=4)
    await provider.append(S, *_msgs(10))
    await provider.compact(S)
    # Nothing new beyond the kept tail: a zero result, no LLM call.
    again = await provider.compact(S)
    assert not again.changed and again.summary == "" and len(summarizer.calls) == 1

    await provider.append(S, *_msgs(5, start=10))
    summarizer.text = "## Goal\nSecond summary."
    second = await provider.compact(S)
    assert second.messages_compacted == 5
    text, opts = summarizer.calls[-1]
    assert opts.previous == SUMMARY
    assert "message 6 " in text and "message 10 " in text and "message 11 " not in text

    names = {e.name: e.kind for e in await provider.note_list(S)}
    assert names == {
        "archive-telegram-42-1": NoteKind.ARCHIVE,
        "archive-telegram-42-2": NoteKind.ARCHIVE,
    }
    context = await provider.assemble(S, 10_000, 0)
    assert "Second summary." in context[0].content and SUMMARY not in context[0].content
    assert [m.content for m in context[2:]] == [m.content for m in _msgs(4, start=11)]
    assert (await provider.stats(S)).summary_count == 2


@pytest.mark.parametrize("failure", [SummarizerError("llm down"), RuntimeError("boom")])
async def test_failing_or_empty_summary_leaves_history_untouched(
    engine: AsyncEngine, tmp_path: Path, failure: Exception
) -> None:
    provider = _provider(engine, tmp_path, StaticSummarizer(fail=failure), keep_tail=2)
    await provider.append(S, *_msgs(6))
    before = await provider.assemble(S, 10_000, 2)
    with pytest.raises(type(failure)):
        await provider.compact(S)
    empty = _provider(engine, tmp_path, StaticSummarizer("   \n"), keep_tail=2)
    with pytest.raises(SummarizerError, match="empty"):
        await empty.compact(S)
    assert await provider.assemble(S, 10_000, 2) == before
    assert (await provider.stats(S)).summary_count == 0
    assert await provider.note_list(S) == []


async def test_compaction_racing_another_process_is_a_conflict(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    # Two provider instances stand for two replicas: while the first waits for its
    # summary, the second compacts the same session. The first must not stack a
    # second marker over a range that changed; it removes its archive and says so.
    other = _provider(engine, tmp_path, StaticSummarizer("## Goal\nFrom the other replica."))

    class RacingSummarizer:
        async def summarize(self, text: str, opts: SummarizeOptions) -> str:
            await other.compact(S)
            return SUMMARY

    provider = _provider(engine, tmp_path, RacingSummarizer())
    await provider.append(S, *_msgs(10))
    with pytest.raises(Conflict):
        await provider.compact(S)
    assert [e.content for e in await provider.note_list(S)] == ["## Goal\nFrom the other replica."]
    assert (await provider.stats(S)).summary_count == 1


async def test_kept_tail_never_starts_with_an_orphaned_tool_result(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    provider = _provider(engine, tmp_path, keep_tail=2)
    call = Message("assistant", "", tool_calls=[ToolCall("c1", "memory", "{}")])
    result = Message("tool", "ok", tool_call_id="c1", name="memory")
    await provider.append(S, *_msgs(4), call, result, result, Message("assistant", "done"))
    outcome = await provider.compact(S)
    assert outcome.messages_compacted == 4  # the cut moved back to the call
    context = await provider.assemble(S, 10_000, 1)
    assert [m.role for m in context[2:]] == ["assistant", "tool", "tool", "assistant"]
    # A budget cut inside the group drops the orphaned results instead.
    cut = await provider.assemble(S, 1, 1)
    assert [m.content for m in cut] == ["done"]


async def test_needs_compaction(engine: AsyncEngine, tmp_path: Path) -> None:
    provider = _provider(engine, tmp_path, keep_tail=4)
    assert not await provider.needs_compaction(S, 10)  # unknown session
    await provider.append(S, *_msgs(4))  # 200 tokens, all in the kept tail
    assert not await provider.needs_compaction(S, 10)
    await provider.append(S, *_msgs(4, start=4))
    assert await provider.needs_compaction(S, 300)
    assert not await provider.needs_compaction(S, 1000)
    assert not await provider.needs_compaction(S, -1)
    await provider.compact(S)
    assert not await provider.needs_compaction(S, 300)


async def test_search_notes_archives_and_messages(engine: AsyncEngine, tmp_path: Path) -> None:
    provider = _provider(engine, tmp_path, keep_tail=2)
    await provider.append(S, Message("user", "100% sure: use snake_case for C++ files"))
    await provider.append(S, Message("user", "plain text about 100 things"), *_msgs(3))
    await provider.compact(S)  # archive holds SUMMARY (Lisbon)
    await provider.note_add(S, "travel", "Lisbon in May, window seat")

    hits = await provider.search(S, SearchQuery("lisbon flights", limit=5))
    assert [(h.source_type, h.source_id) for h in hits] == [
        ("archive", "archive-telegram-42-1"),
        ("note", "travel"),
    ]
    assert hits[0].score > hits[1].score > 0
    archives = await provider.search(S, SearchQuery("lisbon", scope=SearchScope.SUMMARIES))
    assert [h.source_type for h in archives] == ["archive"]

    # Substring search over the history treats LIKE metacharacters literally.
    for needle in ("100%", "snake_case", "C++"):
        found = await provider.search(
            S, SearchQuery(needle, scope=SearchScope.MESSAGES, mode=SearchMode.SUBSTRING)
        )
        assert [h.content for h in found] == ["100% sure: use snake_case for C++ files"]
    assert await provider.search(S, SearchQuery("%", scope=SearchScope.MESSAGES)) != []
    assert await provider.search(S, SearchQuery("50%", scope=SearchScope.MESSAGES)) == []
    assert await provider.search(S, SearchQuery("   ")) == []
    with pytest.raises(InvalidArgument):
        await provider.search(S, SearchQuery("x", mode="fuzzy"))  # type: ignore[arg-type]


async def test_users_never_see_each_others_notes_archives_or_messages(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    provider = _provider(engine, tmp_path, keep_tail=1)
    await provider.append(S, *_msgs(3))
    await provider.compact(S)
    await provider.note_add(S, "diary", "secret Lisbon plans")
    await provider.append(OTHER, Message("user", "hello"))

    for query in (SearchQuery("lisbon"), SearchQuery("message", mode=SearchMode.SUBSTRING)):
        assert await provider.search(OTHER, query) == []
    assert await provider.note_search(OTHER, "lisbon secret") == []
    assert await provider.note_list(OTHER) == []
    for name in ("diary", "archive-telegram-42-1"):
        with pytest.raises(NotFound):
            await provider.note_get(OTHER, name)
    # Search spans the user's sessions with this agent, nobody else's.
    later = Session("telegram:42:new", "bot", 42, "telegram")
    found = await provider.search(later, SearchQuery("message 0", mode=SearchMode.SUBSTRING))
    assert [h.source_type for h in found] == ["message"]
    other_agent = Session("x", "other-bot", 42, "telegram")
    assert await provider.search(other_agent, SearchQuery("lisbon")) == []
    # The same name is free in the other user's memory.
    await provider.note_add(OTHER, "diary", "their own")
    assert (await provider.note_get(S, "diary")).content == "secret Lisbon plans"


async def test_note_store_operations(engine: AsyncEngine, tmp_path: Path) -> None:
    provider = _provider(engine, tmp_path)
    note = await provider.note_add(S, "todo", "buy milk")
    await provider.note_alias(S, "todo", "tasks")
    await provider.note_rename(S, "tasks", "chores")
    written = await provider.note_write(S, "chores", "buy bread")
    assert (written.id, written.name, written.aliases, written.content) == (
        note.id,
        "chores",
        ["tasks"],
        "buy bread",
    )
    with pytest.raises(Conflict):
        await provider.note_add(S, "TASKS", "dup")
    await provider.note_remove(S, "tasks")
    with pytest.raises(NotFound):
        await provider.note_get(S, "chores")
    assert (tmp_path / "mem" / "bot" / "42.mem").exists()


async def test_review_context(engine: AsyncEngine, tmp_path: Path) -> None:
    provider = _provider(engine, tmp_path, keep_tail=2)
    assert await provider.build_review_context(S, None) == ""
    msgs = _msgs(5)
    await provider.append(S, *msgs)
    await provider.compact(S)
    review = await provider.build_review_context(S, None)
    assert review.startswith("<background>") and SUMMARY in review
    assert "message 3 " in review and "message 2 " not in review  # after the marker only
    since = msgs[-1].created_at - timedelta(microseconds=1)
    assert "message 4 " in await provider.build_review_context(S, since)
    assert await provider.build_review_context(S, msgs[-1].created_at + timedelta(seconds=1)) == ""


async def test_a_large_backlog_is_compacted_in_bounded_steps(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    summarizer = StaticSummarizer(SUMMARY)
    ctx = ProviderContext(engine=engine, summarizer=summarizer, agent_id="bot")
    provider = SimpleProvider(ctx, store_dir=tmp_path / "mem", keep_tail=2, max_source_tokens=120)
    await provider.append(S, *_msgs(10))  # 50 tokens each
    first = await provider.compact(S)
    assert first.messages_compacted == 2  # 100 tokens fit, a third would not
    assert "message 1 " in summarizer.calls[-1][0] and "message 2 " not in summarizer.calls[-1][0]
    steps = [first.messages_compacted]
    while (result := await provider.compact(S)).changed:
        steps.append(result.messages_compacted)
    assert steps == [2, 2, 2, 2]  # 8 summarised, the kept tail of 2 untouched
    context = await provider.assemble(S, 10_000, 0)
    assert [m.content for m in context[2:]] == [m.content for m in _msgs(2, start=8)]


async def test_compaction_and_its_changelog_row_commit_together(
    engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memory.contract.context import with_change_source
    from memory.contract.types import ChangeSource, CompactionMode, Scope

    provider = _provider(engine, tmp_path, keep_tail=2)
    await provider.append(S, *_msgs(6))
    before = await provider.assemble(S, 10_000, 2)

    async def broken(conn, entry) -> None:
        raise RuntimeError("changelog unavailable")

    monkeypatch.setattr(provider, "record_changelog", broken)
    with pytest.raises(RuntimeError):
        await provider.compact(S, CompactionMode.FULL)
    assert await provider.assemble(S, 10_000, 2) == before
    assert await provider.note_list(S) == []
    monkeypatch.undo()

    with with_change_source(ChangeSource.USER):
        await provider.compact(S, CompactionMode.FULL)
    [row] = await provider.read_changelog(S.user_id, S.agent_id, Scope.COMPACTION)
    assert (row.source, row.session_id, row.after_text) == ("user", S.id, SUMMARY)
