"""The conformance kit: the provider contract (memory/contract/capabilities.py) as pytest tests
any provider runs.

Use it by subclassing `ProviderConformance` in a test module (the class name must start
with `Test`) and overriding the `provider` fixture::

    from memory.testing.conformance import ProviderConformance

    class TestLcm(ProviderConformance):
        @pytest.fixture
        async def provider(self, engine, tmp_path, summarizer):
            p = create(ProviderContext(engine=engine, summarizer=summarizer,
                                       data_dir=tmp_path, config={"keep_tail": 4}))
            yield p
            await p.close()

`engine` is the fixture of tests/conftest.py (SQLite and PostgreSQL); `summarizer` is the
kit's deterministic summarizer (override it to pass your own). Capability tests skip when
the provider lacks the capability. Compaction tests append `compaction_messages`
messages of about 60 tokens each: configure the provider (keep_tail, chunk sizes) so
that this is enough to compact.

The duties a caller passes on append and store writes (`AppendOptions`, `WriteOptions`;
see memory/contract/capabilities.py) have tests of their own: live-only appends, the hook run in
the append's transaction, the source and session recorded by every store write.

Search scope: a session searches its user's memory (all their conversations with the
agent), so the kit asserts that
another *user's* messages never come back, not that another session of the same user's
are hidden.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from memory.compaction.summarizer import TruncatingSummarizer
from memory.contract.append_hook import AppendHook
from memory.contract.capabilities import (
    ChangelogReader,
    ChangelogWriter,
    Compactor,
    ConstraintStore,
    Explorer,
    Forgetter,
    MessageReader,
    NoteStore,
    ProfileStore,
    Provider,
    Reviewer,
    Searcher,
    SessionManager,
    SessionSnapshotStore,
    Summarizer,
    VersionedConstraintStore,
    VersionedProfileStore,
)
from memory.contract.context import with_change_source, with_session_id
from memory.contract.errors import Conflict, InvalidArgument, NotFound, SessionArchived
from memory.contract.facts import FactOp, FactStore
from memory.contract.options import AppendOptions, WriteOptions
from memory.contract.tracing import capability, unwrap
from memory.contract.types import (
    ChangeEntry,
    ChangeSource,
    CompactionMode,
    ListOptions,
    Message,
    SearchMode,
    SearchQuery,
    SearchScope,
    Session,
    SessionInfo,
    SummarizeOptions,
    ToolCall,
    as_utc,
    utcnow,
)
from memory.storage import forgetting as fg
from memory.text.sanitize import storable
from memory.text.tokens import message_tokens

# The word every summary of the kit's summarizer starts with: how the kit finds summaries.
SUMMARY_MARKER = "kitsummary"

HOSTILE_PATTERNS = [
    '"',
    "'",
    "%",
    "_",
    "*",
    "-",
    "C++",
    "NEAR",
    "AND OR NOT",
    '"unbalanced',
    "a AND (b OR",
    "col:value",
    "^start$",
    "\\",
    "🙂 emoji 🎉",
    "x" * 10_000,
    "nul\x00byte",
    "",
    "   ",
]


class KitSummarizer:
    """Deterministic: the source cut to its target, prefixed with `SUMMARY_MARKER`."""

    def __init__(self) -> None:
        self._inner = TruncatingSummarizer()
        self.calls = 0

    async def summarize(self, text: str, opts: SummarizeOptions) -> str:
        self.calls += 1
        # On a line of its own, so a structured (handoff) summary keeps its headings.
        return f"{SUMMARY_MARKER}\n{await self._inner.summarize(text, opts)}"


def shape(msg: Message) -> tuple[Any, ...]:
    """What must survive a round trip exactly (timestamps may be re-stamped)."""
    calls = tuple((c.id, c.name, c.arguments) for c in msg.tool_calls)
    return (str(msg.role), msg.content, calls, msg.tool_call_id, msg.name)


def shapes(msgs: Sequence[Message]) -> list[tuple[Any, ...]]:
    return [shape(m) for m in msgs]


def tool_exchange(tag: str) -> list[Message]:
    """A user turn with two tool calls answered, then the final answer."""
    return [
        Message(role="user", content=f"{tag}: weather in Paris and Rome?"),
        Message(
            role="assistant",
            content="",
            tool_calls=[
                ToolCall(id=f"{tag}-1", name="weather", arguments='{"city": "Paris"}'),
                ToolCall(id=f"{tag}-2", name="weather", arguments='{"city": "Rome", "u": "°C"}'),
            ],
        ),
        Message(role="tool", content='{"t": 12}', tool_call_id=f"{tag}-1", name="weather"),
        Message(role="tool", content='{"t": 19}', tool_call_id=f"{tag}-2", name="weather"),
        Message(role="assistant", content=f"{tag}: Paris 12 °C, Rome 19 °C."),
    ]


def filler(i: int, word: str = "") -> Message:
    """A message of about 60 tokens, distinct per `i`."""
    body = f"message {i} {word} " + " ".join(f"w{i}x{j}" for j in range(40))
    return Message(role="user" if i % 2 == 0 else "assistant", content=body[:240])


def assert_no_orphan_tool_results(msgs: Sequence[Message]) -> None:
    answered: set[str] = set()
    for m in msgs:
        answered.update(c.id for c in m.tool_calls)
        if m.role == "tool":
            assert m.tool_call_id in answered, (
                f"tool result {m.tool_call_id!r} without its assistant tool call: "
                "OpenAI-compatible APIs reject such a context"
            )


class ProviderConformance:
    """Base class of a provider's conformance tests; see the module docstring."""

    compaction_messages = 40
    agent_id = "default"
    user_id = 1001
    other_user_id = 2002

    # -- fixtures ---------------------------------------------------------------

    @pytest.fixture
    def summarizer(self) -> Summarizer:
        return KitSummarizer()

    @pytest.fixture
    async def provider(self) -> AsyncIterator[Provider]:
        raise NotImplementedError(f"{type(self).__name__} must override the `provider` fixture")
        yield  # pragma: no cover - makes this an async generator like the overrides

    # -- helpers ----------------------------------------------------------------

    def session(self, user_id: int | None = None, label: str = "s") -> Session:
        return Session(
            id=f"{label}-{uuid.uuid4().hex[:10]}",
            agent_id=self.agent_id,
            user_id=self.user_id if user_id is None else user_id,
            channel="test",
        )

    @staticmethod
    def require(provider: Provider, capability: type) -> Any:
        if not isinstance(unwrap(provider), capability):
            pytest.skip(f"provider is not a {capability.__name__}")
        return provider

    async def everything(self, provider: Provider, session: Session) -> list[Message]:
        return await provider.assemble(session, 10**9, 10**6)

    async def summary_ids(self, provider: Provider, session: Session) -> list[str]:
        """Ids of the summaries of `session`'s user; found through search by default
        (the kit's summarizer marks every summary). Override if that cannot work."""
        if not isinstance(provider, Searcher):
            pytest.skip("finding a summary id needs Searcher (or override summary_ids)")
        hits = await provider.search(
            session, SearchQuery(SUMMARY_MARKER, scope=SearchScope.SUMMARIES, limit=50)
        )
        return [h.source_id for h in hits if h.source_type == "summary"]

    async def compacted_session(self, provider: Provider, word: str = "") -> Session:
        s = self.session(label="compact")
        await provider.bootstrap(s)
        await provider.append(s, *(filler(i, word) for i in range(self.compaction_messages)))
        if not isinstance(provider, Compactor):  # every caller requires it first
            pytest.skip("provider is not a Compactor")
        result = await provider.compact(s, CompactionMode.FULL)
        assert result.changed, f"{self.compaction_messages} messages gave nothing to compact"
        return s

    # == core contract ==========================================================

    async def test_bootstrap_twice_is_fine(self, provider: Provider) -> None:
        s = self.session()
        await provider.bootstrap(s)
        await provider.bootstrap(s)
        await provider.append(s, Message(role="user", content="hello"))
        await provider.bootstrap(s)
        assert shapes(await self.everything(provider, s)) == shapes(
            [Message(role="user", content="hello")]
        )

    async def test_append_order_and_tool_calls_round_trip(self, provider: Provider) -> None:
        s = self.session()
        await provider.bootstrap(s)
        first, second = tool_exchange("a"), tool_exchange("b")
        await provider.append(s, *first)
        await provider.append(s, *second[:2])
        await provider.append(s, *second[2:])
        assert shapes(await self.everything(provider, s)) == shapes(first + second)
        if isinstance(provider, SessionManager):
            history = await provider.load_history(s.id)
            assert shapes(history) == shapes(first + second)

    async def test_assemble_fills_budget_newest_first(self, provider: Provider) -> None:
        s = self.session()
        await provider.bootstrap(s)
        msgs = [filler(i) for i in range(10)]
        await provider.append(s, *msgs)
        budget = sum(message_tokens(m) for m in msgs[-4:]) + message_tokens(msgs[0]) // 2
        out = await provider.assemble(s, budget, 2)
        assert sum(message_tokens(m) for m in out) <= budget
        k = len(out)
        assert k >= 3, "older messages that fit the budget were left out"
        assert shapes(out) == shapes(msgs[-k:]), "not the newest messages, in order"

    async def test_fresh_tail_is_kept_over_budget(self, provider: Provider) -> None:
        s = self.session()
        await provider.bootstrap(s)
        msgs = [filler(i) for i in range(8)]
        await provider.append(s, *msgs)
        assert shapes(await provider.assemble(s, 10, 3)) == shapes(msgs[-3:])
        assert shapes(await provider.assemble(s, 0, 1)) == shapes(msgs[-1:])

    async def test_assemble_never_orphans_tool_results(self, provider: Provider) -> None:
        s = self.session()
        await provider.bootstrap(s)
        await provider.append(s, *[filler(i) for i in range(4)], *tool_exchange("t"))
        for tail in (1, 2, 3, 4):
            out = await provider.assemble(s, 1, tail)
            assert_no_orphan_tool_results(out)
            assert shapes(out[-tail:]) == shapes(tool_exchange("t")[-tail:])

    async def test_stats_of_unknown_session_are_zero(self, provider: Provider) -> None:
        stats = await provider.stats(self.session(label="never-seen"))
        assert (stats.message_count, stats.token_count, stats.summary_count) == (0, 0, 0)

    async def test_stats_count_messages(self, provider: Provider) -> None:
        s = self.session()
        await provider.bootstrap(s)
        await provider.append(s, *tool_exchange("x"))
        stats = await provider.stats(s)
        assert stats.message_count == 5
        assert stats.token_count > 0
        assert stats.oldest_at is not None and stats.newest_at is not None
        assert stats.oldest_at <= stats.newest_at

    async def test_close_is_idempotent(self, provider: Provider) -> None:
        await provider.close()
        await provider.close()

    async def test_concurrent_appends_all_land_in_call_order(self, provider: Provider) -> None:
        s = self.session()
        await provider.bootstrap(s)

        async def writer(t: int) -> None:
            for call in range(3):
                await provider.append(
                    s,
                    Message(role="user", content=f"t{t} c{call} m0"),
                    Message(role="assistant", content=f"t{t} c{call} m1"),
                )

        await asyncio.gather(*(writer(t) for t in range(8)))
        contents = [m.content for m in await self.everything(provider, s)]
        assert len(contents) == 8 * 3 * 2
        for t in range(8):
            mine = [c for c in contents if c.startswith(f"t{t} ")]
            assert mine == [f"t{t} c{c} m{m}" for c in range(3) for m in range(2)]
        # One call is one transaction: its two messages are adjacent.
        for i, c in enumerate(contents):
            if c.endswith(" m0"):
                assert contents[i + 1] == c[:-1] + "1"

    async def test_sessions_are_isolated(self, provider: Provider) -> None:
        a, b = self.session(label="a"), self.session(label="b")
        await provider.bootstrap(a)
        await provider.bootstrap(b)
        await provider.append(a, Message(role="user", content="only in a"))
        await provider.append(b, Message(role="user", content="only in b"))
        assert [m.content for m in await self.everything(provider, a)] == ["only in a"]
        assert [m.content for m in await self.everything(provider, b)] == ["only in b"]
        assert (await provider.stats(a)).message_count == 1

    # == duties passed on append (memory/contract/options.py) ============================

    async def test_append_with_live_only_refuses_an_archived_session(
        self, provider: Provider
    ) -> None:
        manager = self.require(provider, SessionManager)
        s = self.session()
        await provider.bootstrap(s)
        await provider.append(s, Message(role="user", content="before"))
        info = await manager.load_info(s.id)
        await manager.save_info(dataclasses.replace(info, archived=True))
        with pytest.raises(SessionArchived):
            await provider.append(
                s, Message(role="user", content="refused"), options=AppendOptions(live_only=True)
            )
        assert [m.content for m in await manager.load_history(s.id)] == ["before"]
        # Without live_only an archived session is appended to (imports, tools).
        await provider.append(s, Message(role="user", content="kept"))
        live = self.session(label="live")
        await provider.bootstrap(live)
        await provider.append(
            live, Message(role="user", content="new"), options=AppendOptions(live_only=True)
        )
        assert [m.content for m in await self.everything(provider, live)] == ["new"]

    async def test_append_hook_runs_once_inside_the_append_transaction(
        self, provider: Provider
    ) -> None:
        seen: list[bool] = []

        async def write(conn: AsyncConnection) -> None:
            await conn.execute(sa.text("SELECT 1"))
            seen.append(conn.in_transaction())

        s = self.session()
        await provider.bootstrap(s)
        hook = AppendHook(write)
        await provider.append(
            s, Message(role="user", content="hi"), Message(role="assistant", content="hello"),
            options=AppendOptions(hook=hook),
        )  # fmt: skip
        assert seen == [True] and hook.ran
        assert [m.content for m in await self.everything(provider, s)] == ["hi", "hello"]

    async def test_append_hook_failure_rolls_the_append_back(self, provider: Provider) -> None:
        class HookFailed(Exception):
            pass

        async def write(conn: AsyncConnection) -> None:
            raise HookFailed("the channel's record could not be written")

        s = self.session()
        await provider.bootstrap(s)
        await provider.append(s, Message(role="user", content="before"))
        hook = AppendHook(write)
        with pytest.raises(HookFailed):
            await provider.append(
                s, Message(role="user", content="lost"), options=AppendOptions(hook=hook)
            )
        assert not hook.ran
        assert [m.content for m in await self.everything(provider, s)] == ["before"]
        assert (await provider.stats(s)).message_count == 1

    # == Compactor ==============================================================

    async def test_compaction_with_nothing_to_do_reports_zero(self, provider: Provider) -> None:
        if not isinstance(provider, Compactor):
            pytest.skip("provider is not a Compactor")
        s = self.session()
        await provider.bootstrap(s)
        await provider.append(s, Message(role="user", content="hi"))
        result = await provider.compact(s, CompactionMode.FULL)
        assert not result.changed
        assert (result.leaf_summaries_created, result.messages_compacted) == (0, 0)
        assert result.tokens_after <= result.tokens_before

    async def test_compaction_shrinks_context_and_loses_nothing(self, provider: Provider) -> None:
        if not isinstance(provider, Compactor):
            pytest.skip("provider is not a Compactor")
        s = self.session()
        await provider.bootstrap(s)
        msgs = [filler(i) for i in range(self.compaction_messages)]
        await provider.append(s, *msgs)
        assert await provider.needs_compaction(s, 100)
        result = await provider.compact(s, CompactionMode.FULL)
        assert result.changed
        assert result.messages_compacted > 0
        assert 0 < result.tokens_after < result.tokens_before
        out = await self.everything(provider, s)
        assert shape(out[-1]) == shape(msgs[-1])
        assert sum(message_tokens(m) for m in out) < sum(message_tokens(m) for m in msgs)
        if isinstance(provider, SessionManager):
            history = await provider.load_history(s.id)
            assert shapes(history) == shapes(msgs)
        stats = await provider.stats(s)
        assert stats.message_count == len(msgs)

    async def test_needs_compaction_follows_threshold(self, provider: Provider) -> None:
        if not isinstance(provider, Compactor):
            pytest.skip("provider is not a Compactor")
        s = self.session()
        await provider.bootstrap(s)
        await provider.append(s, *(filler(i) for i in range(6)))
        assert await provider.needs_compaction(s, 50)
        assert not await provider.needs_compaction(s, 10**9)

    # == Searcher ===============================================================

    async def test_search_finds_an_appended_word(self, provider: Provider) -> None:
        if not isinstance(provider, Searcher):
            pytest.skip("provider is not a Searcher")
        s = self.session()
        await provider.bootstrap(s)
        await provider.append(
            s,
            Message(role="user", content="the quokka smiled at the camera"),
            Message(role="assistant", content="cute animal"),
        )
        for mode, text in ((SearchMode.FULL_TEXT, "quokka"), (SearchMode.SUBSTRING, "uokk")):
            hits = await provider.search(s, SearchQuery(text, mode=mode))
            assert any("quokka" in h.content for h in hits), mode
            assert all(h.source_type in {"message", "summary", "note", "archive"} for h in hits)

    async def test_a_question_finds_a_message_sharing_some_of_its_words(
        self, provider: Provider
    ) -> None:
        """Ranked search is natural language: any of the question's words may match (stop
        words aside), the message sharing more of them ranks first, and every hit has
        its time."""
        if not isinstance(provider, Searcher):
            pytest.skip("provider is not a Searcher")
        s = self.session()
        await provider.bootstrap(s)
        await provider.append(
            s,
            Message(role="user", content="we adopted a beagle puppy named Biscuit"),
            Message(role="assistant", content="lovely, beagles are friendly"),
            Message(role="user", content="the weather was grey all week"),
        )
        question = "When did Caroline adopt her puppy and what is its name?"
        for mode in (SearchMode.FULL_TEXT, SearchMode.HYBRID):
            hits = await provider.search(s, SearchQuery(question, mode=mode))
            assert hits and "Biscuit" in hits[0].content, mode
            assert all(h.timestamp is not None for h in hits), mode
            assert not any("weather" in h.content for h in hits), mode

    async def test_text_without_words_is_found_literally(self, provider: Provider) -> None:
        """A query with nothing a ranked index can hold (an emoji, `%`, only stop words)
        is looked up as written rather than finding nothing."""
        if not isinstance(provider, Searcher):
            pytest.skip("provider is not a Searcher")
        s = self.session()
        await provider.bootstrap(s)
        await provider.append(
            s,
            Message(role="user", content="my favourite animal 🐙 and 100% sure"),
            Message(role="user", content="who are you?"),
        )
        for mode in (SearchMode.FULL_TEXT, SearchMode.HYBRID):
            for text, expected in (("🐙", "🐙"), ("%", "100%"), ("who are you", "who are")):
                hits = await provider.search(s, SearchQuery(text, mode=mode))
                assert any(expected in h.content for h in hits), (mode, text)

    async def test_tool_results_are_not_search_hits(self, provider: Provider) -> None:
        """Earlier searches' results (tool messages) never crowd out what was said, and
        the tool calls (assistant messages with no text) are no hits either."""
        if not isinstance(provider, Searcher):
            pytest.skip("provider is not a Searcher")
        s = self.session()
        await provider.bootstrap(s)
        call = ToolCall(id="c1", name="memory", arguments='{"action": "search"}')
        await provider.append(
            s,
            Message(role="user", content="the capybara is my favourite"),
            Message(role="assistant", content="", tool_calls=[call]),
            Message(
                role="tool", content="1 result: capybara capybara", tool_call_id="c1", name="memory"
            ),
            Message(role="assistant", content="noted"),
        )
        for mode in SearchMode:
            hits = await provider.search(s, SearchQuery("capybara", mode=mode))
            assert any(h.content == "the capybara is my favourite" for h in hits), mode
            assert not any("1 result" in h.content for h in hits), mode
            # The tool-call row has no text of its own: no hit, though the message before
            # it (its context in the index) holds the word.
            reader = capability(provider, MessageReader)
            for hit in hits:
                if reader is not None and hit.source_type == "message":
                    found = await reader.read_message(s, hit.source_id)
                    assert found.message.content.strip(), (mode, found.message)

    async def test_the_turn_in_progress_is_not_a_hit(self, provider: Provider) -> None:
        """A search made while a turn is answered (`in_turn`: the model's memory tool)
        never finds the question being answered nor anything stored after it; the same
        search outside a turn does; other conversations' last messages are found."""
        if not isinstance(provider, Searcher):
            pytest.skip("provider is not a Searcher")
        s, other = self.session(), self.session(label="other")
        for each in (s, other):
            await provider.bootstrap(each)
        await provider.append(
            other, Message(role="user", content="is an axolotl a fish, asked elsewhere?")
        )
        await provider.append(
            s,
            Message(role="user", content="my axolotl is called Pink"),
            Message(role="assistant", content="Pink is a fine axolotl name"),
            Message(role="user", content="what is my axolotl called?"),
            Message(role="assistant", content="let me look up your axolotl"),
        )
        turn = ("what is my axolotl", "let me look up")
        for mode in SearchMode:
            asked = await provider.search(s, SearchQuery("axolotl", mode=mode, in_turn=True))
            found = [h.content for h in asked]
            assert not [c for c in found if c.startswith(turn)], mode
            assert any("called Pink" in c for c in found), mode
            assert any("asked elsewhere" in c for c in found), mode
            plain = await provider.search(s, SearchQuery("axolotl", mode=mode))
            assert any(h.content.startswith(turn[0]) for h in plain), mode
            limited = SearchQuery("axolotl", mode=mode, limit=3, in_turn=True)
            assert len(await provider.search(s, limited)) == 3, mode

    async def test_substring_search_is_literal(self, provider: Provider) -> None:
        if not isinstance(provider, Searcher):
            pytest.skip("provider is not a Searcher")
        s = self.session()
        await provider.bootstrap(s)
        texts = ["I am 100% sure", "I am 100x sure", "snake_case name", "snakeXcase name"]
        texts += ["I write C++ daily", "I write C daily"]
        await provider.append(s, *(Message(role="user", content=t) for t in texts))

        async def found(pattern: str) -> set[str]:
            q = SearchQuery(pattern, scope=SearchScope.MESSAGES, mode=SearchMode.SUBSTRING)
            hits = await provider.search(s, q)
            return {t for t in texts for h in hits if t in h.content}

        assert await found("0% s") == {"I am 100% sure"}
        assert await found("e_c") == {"snake_case name"}
        assert await found("C++") == {"I write C++ daily"}

    async def test_hostile_patterns_never_raise(self, provider: Provider) -> None:
        if not isinstance(provider, Searcher):
            pytest.skip("provider is not a Searcher")
        s = self.session()
        await provider.bootstrap(s)
        await provider.append(
            s,
            Message(role="user", content='she said "hi" -- 50% off_C++ NEAR AND OR NOT 🙂'),
        )
        for mode in SearchMode:
            for pattern in HOSTILE_PATTERNS:
                hits = await provider.search(s, SearchQuery(pattern, mode=mode))
                assert isinstance(hits, list), (mode, pattern[:20])

    async def test_search_never_returns_another_users_messages(self, provider: Provider) -> None:
        if not isinstance(provider, Searcher):
            pytest.skip("provider is not a Searcher")
        mine, theirs = self.session(), self.session(self.other_user_id)
        for s in (mine, theirs):
            await provider.bootstrap(s)
        await provider.append(theirs, Message(role="user", content="secret platypus plans"))
        await provider.append(mine, Message(role="user", content="nothing to see"))
        for mode, text in ((SearchMode.FULL_TEXT, "platypus"), (SearchMode.SUBSTRING, "platyp")):
            assert await provider.search(mine, SearchQuery(text, mode=mode)) == []
        hits = await provider.search(theirs, SearchQuery("platypus"))
        assert hits, "the owner finds their own message"

    async def test_search_respects_limit(self, provider: Provider) -> None:
        if not isinstance(provider, Searcher):
            pytest.skip("provider is not a Searcher")
        s = self.session()
        await provider.bootstrap(s)
        await provider.append(s, *(Message(role="user", content=f"wombat {i}") for i in range(6)))
        for mode in SearchMode:
            hits = await provider.search(s, SearchQuery("wombat", limit=2, mode=mode))
            assert len(hits) == 2, mode

    async def test_ranking_does_not_depend_on_limit(self, provider: Provider) -> None:
        """The first n results of a search for m > n are the search for n, in every mode:
        a page is the head of a longer page. The history has ties (identical messages
        sent at one time) and times out of their append order (as imports store them),
        where a tie broken one way by the index and another by the merge would show."""
        if not isinstance(provider, Searcher):
            pytest.skip("provider is not a Searcher")
        s = self.session()
        await provider.bootstrap(s)
        start = utcnow() - timedelta(days=30)
        texts = [
            *(["the otter swam in the river"] * 12),
            *(f"otter sighting number {i} near the old mill" for i in range(12)),
            *(["a river otter, another otter, otters everywhere"] * 6),
            *(f"mill pond {i}, no animals today" for i in range(12)),
        ]
        await provider.append(
            s,
            *(
                # Every third message is older than the one before it; four share a time.
                Message(role="user", content=t, created_at=start + timedelta(hours=i // 4 - i % 3))
                for i, t in enumerate(texts)
            ),
        )
        await provider.append(s, Message(role="assistant", content="otters and mills noted"))
        if isinstance(provider, NoteStore):
            await provider.note_add(s, "otters", "an otter in the river by the mill")
        queries = [
            (SearchMode.FULL_TEXT, "where did the otter swim in the river?"),
            (SearchMode.FULL_TEXT, "mill"),
            (SearchMode.HYBRID, "otter river mill"),
            (SearchMode.SUBSTRING, "otter"),
            (SearchMode.FULL_TEXT, "🙂 otter%"),
        ]
        for mode, text in queries:
            everything = await provider.search(s, SearchQuery(text, mode=mode, limit=200))
            keys = [(h.source_type, h.source_id) for h in everything]
            assert len(keys) > 12, (mode, text)
            for n in (1, 2, 5, 11, 20, len(keys) - 1):
                page = await provider.search(s, SearchQuery(text, mode=mode, limit=n))
                assert [(h.source_type, h.source_id) for h in page] == keys[:n], (mode, text, n)

    async def test_search_within_dates(self, provider: Provider) -> None:
        """`since` (inclusive) and `before` (exclusive) keep a search to a date range,
        in every mode, ranked within it (a match outside never takes a place); a range
        that holds nothing finds nothing; since not before before is refused."""
        if not isinstance(provider, Searcher):
            pytest.skip("provider is not a Searcher")
        s = self.session()
        await provider.bootstrap(s)
        march = utcnow().replace(microsecond=0) - timedelta(days=90)
        dated = [
            (march - timedelta(days=30), "we decided the budget: ten pounds, decided twice"),
            (march, "we decided to paint the kitchen blue"),
            (march + timedelta(days=3), "we decided on a dog called Rex"),
            (march + timedelta(days=40), "we decided we decided we decided: sell the car"),
        ]
        await provider.append(
            s, *(Message(role="user", content=t, created_at=at) for at, t in dated)
        )
        since, before = march, march + timedelta(days=30)
        for mode in SearchMode:
            text = "decided"
            q = SearchQuery(text, SearchScope.MESSAGES, 1, mode, since=since, before=before)
            first = await provider.search(s, q)
            assert len(first) == 1 and first[0].timestamp is not None, mode
            assert since <= as_utc(first[0].timestamp) < before, mode
            q = dataclasses.replace(q, limit=20)
            found = {h.content for h in await provider.search(s, q)}
            assert found == {dated[1][1], dated[2][1]}, (mode, found)
            after = await provider.search(s, dataclasses.replace(q, since=before, before=None))
            assert {h.content for h in after} == {dated[3][1]}, mode
            upto = await provider.search(s, dataclasses.replace(q, since=None, before=since))
            assert {h.content for h in upto} == {dated[0][1]}, mode
            empty = dataclasses.replace(q, since=march + timedelta(days=10), before=before)
            assert await provider.search(s, empty) == [], mode
            with pytest.raises(InvalidArgument):
                await provider.search(s, dataclasses.replace(q, since=before, before=since))
        if isinstance(provider, NoteStore):  # a searched note is dated by when it was written
            await provider.note_add(s, "plans", "we decided on plans today")
            for mode in SearchMode:
                q = SearchQuery("decided", SearchScope.BOTH, 20, mode)
                if "plans" not in {h.source_id for h in await provider.search(s, q)}:
                    continue  # its search does not reach notes
                q = dataclasses.replace(q, since=since, before=before)
                assert {h.source_type for h in await provider.search(s, q)} == {"message"}
                today = dataclasses.replace(q, since=utcnow() - timedelta(days=1), before=None)
                assert [h.source_id for h in await provider.search(s, today)] == ["plans"]

    # == Explorer ===============================================================

    async def test_explorer_unknown_id_is_not_found(self, provider: Provider) -> None:
        if not isinstance(provider, Explorer):
            pytest.skip("provider is not a Explorer")
        s = self.session()
        await provider.bootstrap(s)
        for sid in ("no-such-summary", "sum_ffffffffffff", "", "' OR 1=1 --"):
            with pytest.raises(NotFound):
                await provider.describe(sid, s)
            with pytest.raises(NotFound):
                await provider.expand(sid, 1000, s)

    async def test_explorer_hides_other_users_summaries(self, provider: Provider) -> None:
        if not isinstance(provider, Explorer):
            pytest.skip("provider is not a Explorer")
        if not isinstance(provider, Compactor):
            pytest.skip("provider is not a Compactor")
        owner = await self.compacted_session(provider)
        ids = await self.summary_ids(provider, owner)
        assert ids, "compaction made no summary the kit can find"
        stranger = self.session(self.other_user_id, label="stranger")
        await provider.bootstrap(stranger)
        for sid in ids:
            described = await provider.describe(sid, owner)
            assert described.summary_id == sid and described.content
            expanded = await provider.expand(sid, 10**6, owner)
            assert expanded.messages or expanded.children
            with pytest.raises(NotFound):
                await provider.describe(sid, stranger)
            with pytest.raises(NotFound):
                await provider.expand(sid, 10**6, stranger)

    # == shared stores ==========================================================

    async def test_profile_and_soul_round_trip(self, provider: Provider) -> None:
        p = self.require(provider, ProfileStore)
        u, a = self.user_id, self.agent_id
        v1 = await p.set_profile(u, a, "likes tea")
        v2 = await p.set_soul(u, a, "patient")
        assert v2 > v1 > 0
        assert await p.get_profile(u, a) == "likes tea"
        assert await p.get_soul(u, a) == "patient"
        assert await p.get_profile(self.other_user_id, a) == ""
        await p.set_profile(u, a, "")
        assert await p.get_profile(u, a) == ""

    async def test_constraints_round_trip(self, provider: Provider) -> None:
        p = self.require(provider, ConstraintStore)
        u, a = self.user_id, self.agent_id
        listed = await p.add_constraint(u, a, "never use emoji")
        listed = await p.add_constraint(u, a, "answer in French")
        assert [c.text for c in listed] == ["never use emoji", "answer in French"]
        assert len({c.id for c in listed}) == 2 and all(c.created_at for c in listed)
        left = await p.remove_constraint(u, a, listed[0].id)
        assert [c.text for c in left] == ["answer in French"]
        assert [c.text for c in await p.get_constraints(u, a)] == ["answer in French"]
        assert await p.get_constraints(self.other_user_id, a) == []
        with pytest.raises(NotFound):
            await p.remove_constraint(u, a, listed[0].id)
        for bad in ("", "   ", "x" * 2001):
            with pytest.raises(InvalidArgument):
                await p.add_constraint(u, a, bad)
        assert len(await p.get_constraints(u, a)) == 1

    async def test_versioned_reads_and_rollback(self, provider: Provider) -> None:
        p = self.require(provider, VersionedProfileStore)
        self.require(provider, ProfileStore)
        u, a = self.user_id, self.agent_id
        assert await p.memory_version(u, a) == 0
        v1 = await p.set_profile(u, a, "first")
        v2 = await p.set_soul(u, a, "soul")
        v3 = await p.set_profile(u, a, "second")
        assert await p.memory_version(u, a) == v3
        assert await p.get_profile_at(u, a, v1) == "first"
        assert await p.get_profile_at(u, a, v2) == "first"
        assert await p.get_soul_at(u, a, v1) == ""
        assert await p.get_profile_at(u, a, 0) == "second"  # <= 0: current
        v4 = await p.rollback(u, a, "profile", v1)
        assert v4 == v3 + 1
        assert await p.get_profile(u, a) == "first"
        assert await p.get_profile_at(u, a, v3) == "second"

    async def test_versioned_constraints(self, provider: Provider) -> None:
        p = self.require(provider, VersionedConstraintStore)
        self.require(provider, ConstraintStore)
        self.require(provider, VersionedProfileStore)
        u, a = self.user_id, self.agent_id
        await p.add_constraint(u, a, "rule one")
        v1 = await p.memory_version(u, a)
        await p.add_constraint(u, a, "rule two")
        assert [c.text for c in await p.get_constraints_at(u, a, v1)] == ["rule one"]
        assert len(await p.get_constraints_at(u, a, 0)) == 2

    async def test_changelog_rows_carry_source_and_session(self, provider: Provider) -> None:
        p = self.require(provider, ChangelogReader)
        self.require(provider, ProfileStore)
        u, a = self.user_id, self.agent_id
        await p.set_profile(u, a, "by the agent")
        with with_change_source(ChangeSource.REFLECT), with_session_id("sess-42"):
            await p.set_profile(u, a, "by reflect")
        rows = await p.read_changelog(u, a, "profile", 10)
        assert [r.after_text for r in rows] == ["by reflect", "by the agent"]
        assert (rows[0].source, rows[0].session_id) == ("reflect", "sess-42")
        assert (rows[0].before_text, rows[0].scope) == ("by the agent", "profile")
        assert rows[1].source == "agent"
        assert rows[0].version_after == (rows[0].version_before or 0) + 1
        assert await p.read_changelog(self.other_user_id, a) == []
        assert len(await p.read_changelog(u, a, "profile", 1)) == 1

    async def test_every_store_write_records_the_source_and_session_passed(
        self, provider: Provider
    ) -> None:
        p = self.require(provider, ChangelogReader)
        self.require(provider, ProfileStore)
        self.require(provider, ConstraintStore)
        self.require(provider, VersionedProfileStore)
        u, a = self.user_id, self.agent_id
        passed = {
            "profile": WriteOptions(ChangeSource.REFLECT, "sess-p"),
            "soul": WriteOptions(ChangeSource.USER, "sess-s"),
            "constraint": WriteOptions(ChangeSource.SYSTEM, "sess-c"),
        }
        # (the context says otherwise: the options passed win)
        with with_change_source(ChangeSource.AGENT), with_session_id("from-context"):
            await p.set_profile(u, a, "one", options=passed["profile"])
            await p.set_profile(u, a, "two", options=passed["profile"])
            await p.rollback(u, a, "profile", 1, options=passed["profile"])
            await p.set_soul(u, a, "calm", options=passed["soul"])
            [c] = await p.add_constraint(u, a, "be brief", options=passed["constraint"])
            await p.remove_constraint(u, a, c.id, options=passed["constraint"])
        rows = await p.read_changelog(u, a, "", 0)
        assert len(rows) == 6
        for row in rows:
            want = passed[row.scope]
            assert (row.source, row.session_id) == (want.source, want.session_id), row

    async def test_changelog_writer_does_not_bump_version(self, provider: Provider) -> None:
        p = self.require(provider, ChangelogWriter)
        self.require(provider, ChangelogReader)
        self.require(provider, VersionedProfileStore)
        u, a = self.user_id, self.agent_id
        before = await p.memory_version(u, a)
        await p.write_changelog(
            ChangeEntry(
                user_id=u, agent_id=a, scope="compaction", action="compact", source="system",
                after_text="compacted",
            )
        )  # fmt: skip
        assert await p.memory_version(u, a) == before
        rows = await p.read_changelog(u, a, "compaction", 5)
        assert any(r.after_text == "compacted" and r.source == "system" for r in rows)

    async def test_snapshots_are_frozen_per_session(self, provider: Provider) -> None:
        p = self.require(provider, SessionSnapshotStore)
        self.require(provider, ProfileStore)
        self.require(provider, VersionedProfileStore)
        u, a = self.user_id, self.agent_id
        await p.set_profile(u, a, "old")
        snap_a = await p.get_or_create_snapshot("session-a", u, a)
        await p.set_profile(u, a, "new")
        again = await p.get_or_create_snapshot("session-a", u, a)
        assert again.version == snap_a.version
        assert await p.get_profile_at(u, a, again.version) == "old"
        snap_b = await p.get_or_create_snapshot("session-b", u, a)
        assert await p.get_profile_at(u, a, snap_b.version) == "new"
        await p.advance_snapshot("session-a", u, a)
        advanced = await p.get_or_create_snapshot("session-a", u, a)
        assert await p.get_profile_at(u, a, advanced.version) == "new"

    async def test_a_compaction_moves_the_sessions_snapshot(self, provider: Provider) -> None:
        # The compaction rewrites the prompt's start anyway, so the session's view of
        # profile, soul and rules catches up there (the model server's cache is lost once).
        p = self.require(provider, SessionSnapshotStore)
        self.require(provider, Compactor)
        self.require(provider, VersionedProfileStore)
        s = self.session(label="snap")
        await p.bootstrap(s)
        await p.set_profile(s.user_id, s.agent_id, "before")
        pinned = await p.get_or_create_snapshot(s.id, s.user_id, s.agent_id)
        await p.set_profile(s.user_id, s.agent_id, "after")
        assert (await p.get_or_create_snapshot(s.id, s.user_id, s.agent_id)) == pinned
        await p.append(s, *(filler(i) for i in range(self.compaction_messages)))
        assert (await p.compact(s, CompactionMode.FULL)).changed
        moved = await p.get_or_create_snapshot(s.id, s.user_id, s.agent_id)
        assert await p.get_profile_at(s.user_id, s.agent_id, moved.version) == "after"

    # == SessionManager =========================================================

    async def test_session_manager_info_and_history(self, provider: Provider) -> None:
        p = self.require(provider, SessionManager)
        s = self.session()
        await provider.bootstrap(s)
        await provider.append(s, *tool_exchange("h"))
        info = SessionInfo(
            id=s.id, agent_id=s.agent_id, user_id=s.user_id, channel=s.channel,
            title="weather talk", created_at=utcnow(), last_active=utcnow(),
        )  # fmt: skip
        await p.save_info(info)
        loaded = await p.load_info(s.id)
        assert (loaded.id, loaded.user_id, loaded.agent_id, loaded.title) == (
            s.id, s.user_id, s.agent_id, "weather talk",
        )  # fmt: skip
        listed = await p.list_info(ListOptions(user_id=s.user_id))
        assert s.id in [i.id for i in listed]
        assert s.id not in [i.id for i in await p.list_info(ListOptions(user_id=-5))]
        await p.save_info(SessionInfo(id=s.id, agent_id=s.agent_id, user_id=s.user_id,
                                      channel=s.channel, title="archived", archived=True))  # fmt: skip
        assert s.id not in [i.id for i in await p.list_info(ListOptions(user_id=s.user_id))]
        assert s.id in [
            i.id for i in await p.list_info(ListOptions(user_id=s.user_id, include_archived=True))
        ]
        assert shapes(await p.load_history(s.id)) == shapes(tool_exchange("h"))
        with pytest.raises(NotFound):
            await p.load_info("no-such-session")

    # == Reviewer ===============================================================

    async def test_reviewer(self, provider: Provider) -> None:
        p = self.require(provider, Reviewer)
        s = self.session()
        await provider.bootstrap(s)
        assert await p.build_review_context(s, None) == ""
        await provider.append(s, Message(role="user", content="my cat is called Miso"))
        since = utcnow()
        await asyncio.sleep(0.01)  # distinct timestamps even on a coarse clock
        await provider.append(s, Message(role="user", content="I moved to Oslo"))
        assert "Miso" in await p.build_review_context(s, None)
        recent = await p.build_review_context(s, since)
        assert "Oslo" in recent and "Miso" not in recent
        assert await p.build_review_context(s, utcnow()) == ""

    # == NoteStore ==============================================================

    async def test_notes_operations(self, provider: Provider) -> None:
        p = self.require(provider, NoteStore)
        s = self.session()
        added = await p.note_add(s, "groceries", "milk, eggs, saffron")
        assert (added.name, added.content) == ("groceries", "milk, eggs, saffron")
        await p.note_alias(s, "groceries", "shopping")
        assert (await p.note_get(s, "shopping")).name == "groceries"
        renamed = await p.note_rename(s, "groceries", "errands")
        assert renamed.name == "errands" and renamed.id == added.id
        with pytest.raises(NotFound):
            await p.note_get(s, "groceries")
        assert (await p.note_get(s, "shopping")).name == "errands"
        await p.note_write(s, "shopping", "milk, eggs, saffron, rice")
        assert (await p.note_get(s, "errands")).content.endswith("rice")
        hits = await p.note_search(s, "saffron")
        assert [h.entry.name for h in hits] == ["errands"] and hits[0].score > 0
        assert [e.name for e in await p.note_list(s)] == ["errands"]
        await p.note_remove(s, "errands")
        for name in ("errands", "shopping"):
            with pytest.raises(NotFound):
                await p.note_get(s, name)
        assert await p.note_list(s) == []

    async def test_notes_conflicts_and_unknown_names(self, provider: Provider) -> None:
        p = self.require(provider, NoteStore)
        s = self.session()
        await p.note_add(s, "plan", "step one")
        await p.note_add(s, "ideas", "a rocket")
        with pytest.raises(Conflict):
            await p.note_add(s, "plan", "again")
        with pytest.raises(Conflict):
            await p.note_alias(s, "ideas", "plan")
        with pytest.raises(Conflict):
            await p.note_rename(s, "ideas", "plan")
        for op in (
            p.note_get(s, "nope"),
            p.note_write(s, "nope", "x"),
            p.note_rename(s, "nope", "other"),
            p.note_alias(s, "nope", "other"),
            p.note_remove(s, "nope"),
        ):
            with pytest.raises(NotFound):
                await op
        assert (await p.note_get(s, "plan")).content == "step one"

    async def test_notes_are_private_to_their_user(self, provider: Provider) -> None:
        p = self.require(provider, NoteStore)
        mine, theirs = self.session(), self.session(self.other_user_id)
        await p.note_add(theirs, "diary", "secret narwhal")
        with pytest.raises(NotFound):
            await p.note_get(mine, "diary")
        assert await p.note_search(mine, "narwhal") == []
        assert await p.note_list(mine) == []
        await p.note_add(mine, "diary", "my own")  # same name, other user: no conflict
        assert (await p.note_get(theirs, "diary")).content == "secret narwhal"

    # == FactStore ===============================================================

    async def cited(self, provider: Provider, session: Session, text: str) -> list[int]:
        """Append `text` as a user message of `session`; the ids a fact may cite for it
        (found as a forget finds it: needs Forgetter, else the fact cites nothing)."""
        await provider.bootstrap(session)
        await provider.append(session, Message("user", text))
        if not isinstance(unwrap(provider), Forgetter):
            return []
        owner = fg.Owner(session.user_id, session.agent_id)
        return [i.id for i in (await fg.preview(provider, owner, text)).items]

    async def test_a_new_value_supersedes_closing_both_intervals(self, provider: Provider) -> None:
        p = self.require(provider, FactStore)
        u, a = self.user_id, self.agent_id
        s = self.session()
        first = await self.cited(provider, s, "I live in Lisbonkit")
        second = await self.cited(provider, s, "moved to Portokit now")
        [made] = await p.apply_facts(u, a, [FactOp("set", "Home City", "Lisbon", first)])
        [moved] = await p.apply_facts(u, a, [FactOp("set", "home  city", "Porto", second)])
        assert moved.action == "superseded" and moved.version == made.version + 1
        [old] = moved.closed
        assert old.state == "superseded" and old.replaced_by == moved.fact.id
        assert old.valid_to == moved.fact.valid_from and old.version_to == moved.version
        assert old.evidence == tuple(first) and moved.fact.evidence == tuple(second)
        assert [f.value for f in await p.current_facts(u, a)] == ["Porto"]
        assert [f.value for f in await p.facts_at(u, a, made.version)] == ["Lisbon"]
        assert [f.value for f in await p.facts_as_of(u, a, old.valid_from)] == ["Lisbon"]
        assert await p.current_facts(self.other_user_id, a) == []
        if isinstance(p, ChangelogReader):
            [row] = await p.read_changelog(u, a, scope="fact", limit=1)
            assert row.id == moved.changelog_id and row.version_after == moved.version
        if isinstance(p, ProfileStore):
            assert "home city: Porto" in await p.get_profile(u, a)
            assert "Lisbon" not in await p.get_profile(u, a)

    async def test_a_restatement_is_merged_and_a_retraction_closes(
        self, provider: Provider
    ) -> None:
        p = self.require(provider, FactStore)
        u, a = self.user_id, self.agent_id
        s = self.session()
        one = await self.cited(provider, s, "I am vegetariankit")
        two = await self.cited(provider, s, "still vegetariankit here")
        three = await self.cited(provider, s, "no longer vegetariankit")
        await p.apply_facts(u, a, [FactOp("set", "diet", "vegetarian", one)])
        [again] = await p.apply_facts(u, a, [FactOp("set", "diet", "Vegetarian", two)])
        assert again.action == "restated"
        assert again.fact.evidence == tuple(sorted(one + two))
        assert len(await p.fact_history(u, a)) == 1
        [gone] = await p.apply_facts(u, a, [FactOp("retract", "diet", message_ids=three)])
        assert gone.fact.state == "retracted" and gone.fact.valid_to is not None
        assert await p.current_facts(u, a) == []
        with pytest.raises(NotFound):
            await p.apply_facts(u, a, [FactOp("retract", "diet")])

    async def test_fact_evidence_outside_the_memory_is_dropped(self, provider: Provider) -> None:
        p = self.require(provider, FactStore)
        self.require(provider, Forgetter)
        u, a = self.user_id, self.agent_id
        mine = await self.cited(provider, self.session(), "my own citykit words")
        theirs = await self.cited(
            provider, self.session(self.other_user_id), "their secret citykit words"
        )
        assert mine and theirs
        [made] = await p.apply_facts(
            u, a, [FactOp("set", "city", "Kit", [*mine, *theirs, 987654321])]
        )
        assert made.fact.evidence == tuple(mine)
        assert set(made.dropped_ids) == {*theirs, 987654321}

    async def test_forget_removes_a_fact_its_message_alone_supported(
        self, provider: Provider
    ) -> None:
        p = self.require(provider, FactStore)
        self.require(provider, Forgetter)
        u, a = self.user_id, self.agent_id
        s = self.session()
        first = await self.cited(provider, s, "I work at Acmekit")
        second = await self.cited(provider, s, "I now work at Globexkit")
        await p.apply_facts(u, a, [FactOp("set", "employer", "Acme", first)])
        await p.apply_facts(u, a, [FactOp("set", "employer", "Globex", second)])
        await fg.forget(provider, fg.Owner(u, a), second)
        [back] = await p.current_facts(u, a)
        assert (back.value, back.state, back.valid_to) == ("Acme", "current", None)
        assert [f.value for f in await p.fact_history(u, a)] == ["Acme"]
        await fg.forget(provider, fg.Owner(u, a), first)
        assert await p.fact_history(u, a) == []

    # == Forgetter ===============================================================

    async def test_forget_a_compacted_message_keeps_the_rest(self, provider: Provider) -> None:
        p = self.require(provider, Forgetter)
        if not isinstance(provider, Compactor):
            pytest.skip("provider is not a Compactor")
        s = await self.compacted_session(provider)
        owner = fg.Owner(s.user_id, s.agent_id)
        preview = await fg.preview(p, owner, "w3x0 ")
        assert len(preview.items) == 1 and preview.items[0].first_words.startswith("message 3")
        report = await fg.forget(p, owner, preview.ids, preview.needles)
        assert report.messages == 1
        context = "\n".join(m.text() for m in await self.everything(provider, s))
        assert "w3x0 " not in context
        if isinstance(provider, SessionManager):
            history = await provider.load_history(s.id)
            assert shapes(history) == shapes(
                [filler(i) for i in range(self.compaction_messages) if i != 3]
            )
        if isinstance(provider, Searcher):
            hits = await provider.search(s, SearchQuery("w3x0"))
            assert hits == []

    async def test_forget_never_reaches_another_user(self, provider: Provider) -> None:
        p = self.require(provider, Forgetter)
        mine = self.session()
        await provider.bootstrap(mine)
        await provider.append(mine, Message("user", "my narwhal secret"))
        me = fg.Owner(mine.user_id, mine.agent_id)
        [item] = (await fg.preview(p, me, "narwhal")).items
        other = fg.Owner(self.other_user_id, self.agent_id)
        assert (await fg.preview(p, other, "narwhal")).items == []
        assert (await fg.preview(p, other, str(item.id))).items == []
        assert (await fg.forget(p, other, [item.id])).messages == 0
        stats = await provider.stats(mine)
        assert stats.message_count == 1

    async def test_erase_leaves_one_content_free_row(self, provider: Provider) -> None:
        p = self.require(provider, Forgetter)
        s = self.session()
        await provider.bootstrap(s)
        await provider.append(s, Message("user", "remember the narwhal"))
        if isinstance(provider, ProfileStore):
            await provider.set_profile(s.user_id, s.agent_id, "likes narwhals")
        owner = fg.Owner(s.user_id, s.agent_id)
        report = await fg.erase(p, owner, "the kit")
        assert report.sessions == 1 and report.messages == 1
        assert (await provider.stats(s)).message_count == 0
        if isinstance(provider, ChangelogReader):
            rows = await provider.read_changelog(s.user_id, s.agent_id)
            assert [r.scope for r in rows] == [fg.ERASURE_SCOPE]
            assert "narwhal" not in rows[0].after_text + rows[0].before_text

    # == Text no database can hold ==============================================

    async def test_nul_and_lone_surrogates_are_cleaned_on_every_path(
        self, provider: Provider
    ) -> None:
        """NUL and a lone surrogate in any text handed to the provider (a session id, an
        agent id, a message, a search, a note's name) never fail as a database error:
        stored text reads back with U+FFFD, and a lookup by the same text finds it."""
        for bad in ("Nulword\x00zeta", "Loneword\ud800kappa"):
            clean = storable(bad)
            s = dataclasses.replace(self.session(), id=f"id-{bad}-{uuid.uuid4().hex[:6]}")
            await provider.bootstrap(s)
            await provider.append(s, Message("user", f"say {bad} please"))
            assert [m.content for m in await self.everything(provider, s)] == [
                f"say {clean} please"
            ]
            assert (await provider.stats(s)).message_count == 1
            if isinstance(provider, Searcher):
                for mode in SearchMode:
                    hits = await provider.search(s, SearchQuery(bad, mode=mode))
                    assert any(clean in h.content for h in hits), (bad, mode)
            if isinstance(provider, SessionManager):
                assert (await provider.load_info(s.id)).user_id == s.user_id
                assert len(await provider.load_history(s.id)) == 1
            if isinstance(provider, ProfileStore):
                assert await provider.get_profile(s.user_id, bad) == ""
            if isinstance(provider, ChangelogReader):
                assert await provider.read_changelog(s.user_id, bad) == []
            if isinstance(provider, NoteStore):
                name = f"note {len(bad)}"  # names refuse control characters
                await provider.note_add(s, name, f"body {bad}")
                assert (await provider.note_get(s, name)).content == f"body {clean}"
                found = await provider.note_search(s, bad)
                assert [h.entry.name for h in found] == [name], bad
