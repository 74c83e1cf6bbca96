"""Search: modes, scope, ranking, snippets, hostile input, and index use."""

from __future__ import annotations

import re
import threading

import pytest
import sqlalchemy as sa

from memory.contract.errors import InvalidArgument
from memory.contract.types import CompactionMode, Message, SearchMode, SearchQuery, SearchScope
from memory.testing.conformance import HOSTILE_PATTERNS
from tests.lcm.conftest import CountingSummarizer, numbered, session

FT, SUB = SearchMode.FULL_TEXT, SearchMode.SUBSTRING


def q(text: str, mode: SearchMode = FT, scope: SearchScope = SearchScope.BOTH, limit: int = 20):
    return SearchQuery(text, scope=scope, limit=limit, mode=mode)


async def test_full_text_is_bm25_ranked_and_stemmed(make_provider) -> None:
    p = make_provider()
    s = session()
    await p.append(s, *(Message("user", f"small talk number {i}") for i in range(12)))
    garden = "gardening gardening gardening: we garden a lot"
    note = "a note about gardening tools " + "filler words here " * 20
    await p.append(
        s,
        Message("user", note),
        Message("assistant", "ok"),
        Message("user", garden),
        Message("assistant", "nice"),
    )
    hits = await p.search(s, q("gardens"))
    contents = [h.content.split(" (after:")[0] for h in hits]
    # Stemmed; the message saying it most (and shortest) first; a reply is found through
    # the message it answers (its context), below that message.
    assert contents[0] == garden
    assert sorted(contents) == sorted([garden, note, "ok", "nice"])
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert hits[-1].score > 0
    assert all(h.source_type == "message" and h.timestamp is not None for h in hits)
    assert all(h.signals == ("words",) and h.session_id == s.id for h in hits)
    # Any word is enough; sharing more of them ranks higher.
    hits = await p.search(s, q("gardening lot of talk"))
    assert hits[0].content == garden
    assert {h.content for h in hits} >= {garden, note, "small talk number 3"}


async def test_snippets_are_cut_around_the_match(make_provider) -> None:
    p = make_provider()
    s = session()
    await p.append(s, Message("user", "a" * 2000 + " needle " + "b" * 2000))
    for mode, text in ((FT, "needle"), (SUB, "eedl")):
        [hit] = await p.search(s, q(text, mode))
        assert "needle" in hit.content and len(hit.content) <= 500
        assert hit.content.startswith("…") and hit.content.endswith("…")


async def test_scopes_messages_summaries_both(make_provider) -> None:
    p = make_provider(CountingSummarizer(), keep_tail=2, leaf_chunk_size=4)
    s = session()
    await p.append(s, *numbered(8, word="zebra"))
    await p.compact(s, CompactionMode.INCREMENTAL)  # summaries start "S<n>[msg0 zebra ..."
    for mode, text in ((FT, "zebra"), (SUB, "ebr")):
        only_msgs = await p.search(s, q(text, mode, SearchScope.MESSAGES))
        only_sums = await p.search(s, q(text, mode, SearchScope.SUMMARIES))
        both = await p.search(s, q(text, mode, SearchScope.BOTH, limit=50))
        assert {h.source_type for h in only_msgs} == {"message"} and len(only_msgs) == 8
        assert {h.source_type for h in only_sums} == {"summary"} and len(only_sums) >= 1
        assert len(both) == len(only_msgs) + len(only_sums)
        for hit in only_sums:
            assert (await p.describe(hit.source_id, s)).summary_id == hit.source_id


async def test_scope_is_the_user_never_another_user_or_agent(make_provider) -> None:
    p = make_provider()
    mine, my_other = session("a", 1), session("b", 1)
    other_user, other_agent = session("a", 2), session("a", 1, agent_id="other")
    await p.append(my_other, Message("user", "archived talk about the okapi"))
    await p.append(other_user, Message("user", "their okapi secret"))
    await p.append(other_agent, Message("user", "another agent's okapi"))
    await p.bootstrap(mine)
    for mode, text in ((FT, "okapi"), (SUB, "okap"), (SUB, "ok")):
        hits = await p.search(mine, q(text, mode))
        assert [h.content for h in hits] == ["archived talk about the okapi"], (mode, text)
    assert await p.search(session("nobody", 99), q("okapi")) == []


SUBSTRING_CASES = [
    ("100%", {"it is 100% done"}),
    ("0_0", {"snake 0_0 case"}),
    ('"hi"', {'she said "hi"'}),
    ("C++", {"I like C++"}),
    ("\\n", {"a \\n b"}),
    ("🙂 x", {"smile 🙂 x"}),
    ("%", {"it is 100% done"}),
    ("_", {"snake 0_0 case"}),
    ("++", {"I like C++"}),
    ("SMILE", {"smile 🙂 x"}),
]


async def test_substring_is_literal_and_case_insensitive(make_provider) -> None:
    p = make_provider()
    s = session()
    texts = ["it is 100% done", "it is 1000 done", "snake 0_0 case", "snake 0x0 case"]
    texts += ['she said "hi"', "I like C++", "I like C", "a \\n b", "smile 🙂 x"]
    await p.append(s, *(Message("user", t) for t in texts))
    for pattern, expected in SUBSTRING_CASES:
        hits = await p.search(s, q(pattern, SUB, SearchScope.MESSAGES))
        assert {h.content for h in hits} == expected, pattern


async def test_hostile_input_never_raises(make_provider) -> None:
    p = make_provider(CountingSummarizer(), keep_tail=1, leaf_chunk_size=2)
    s = session()
    await p.append(
        s, *(Message("user", f'{t} said "x" 50%_off C++ NEAR/2 AND -not *') for t in "abc")
    )
    await p.compact(s, CompactionMode.INCREMENTAL)
    extra = ["NEAR(a b)", "a* OR b*", "content:x", "scope : x", "'; DROP TABLE messages; --"]
    for pattern in HOSTILE_PATTERNS + extra + ["\ud800", "x" * 300 + "C++"]:
        for mode in SearchMode:
            for scope in SearchScope:
                assert isinstance(await p.search(s, q(pattern, mode, scope)), list)
    hits = await p.search(s, q('said "x" 50%_off', SUB, SearchScope.MESSAGES))
    assert len(hits) == 3
    assert len(await p.search(s, q("NEAR AND", FT, SearchScope.MESSAGES))) in (0, 3)


async def test_long_substring_patterns_are_checked_in_full(make_provider) -> None:
    p = make_provider()
    s = session()
    head = "y" * 400
    await p.append(s, Message("user", head + " tail one"), Message("user", head + " tail two"))
    assert [h.content[-8:] for h in await p.search(s, q(head + " tail two", SUB))] == ["tail two"]
    assert len(await p.search(s, q(head, SUB))) == 2


async def test_bad_limit_is_a_clear_error(make_provider) -> None:
    p = make_provider()
    s = session()
    await p.append(s, *(Message("user", f"kiwi {i}") for i in range(5)))
    with pytest.raises(InvalidArgument):
        await p.search(s, q("kiwi", limit=0))
    assert len(await p.search(s, q("kiwi", limit=3))) == 3


async def test_index_follows_edits_and_deletes(make_provider, engine) -> None:
    p = make_provider()
    s = session()
    await p.append(s, Message("user", "the original walrus"))
    async with engine.begin() as conn:
        await conn.execute(sa.text("UPDATE messages SET content = 'the edited narwhal'"))
    assert await p.search(s, q("walrus")) == []
    assert [h.content for h in await p.search(s, q("narwhal"))] == ["the edited narwhal"]
    assert [h.content for h in await p.search(s, q("narwh", SUB))] == ["the edited narwhal"]
    async with engine.begin() as conn:
        await conn.execute(sa.text("DELETE FROM context_items"))
        await conn.execute(sa.text("DELETE FROM message_parts"))
        await conn.execute(sa.text("DELETE FROM messages"))
    assert await p.search(s, q("narwhal")) == []
    assert await p.search(s, q("narwh", SUB)) == []


async def test_search_statements_use_the_indexes(make_provider, engine, db_kind) -> None:
    """EXPLAIN every statement a search issues: the FTS/GIN index serves the lookup."""
    p = make_provider()
    s = session()
    await p.append(s, *numbered(30, word="quagga"))
    captured: list[tuple[str, object]] = []

    def capture(conn, cursor, statement, params, context, executemany):  # noqa: ANN001
        # Both databases rank messages over postings kept beside their word index.
        lookups = ("MATCH", "@@", "LIKE", "_fts_postings p", "messages_search_postings")
        if any(word in statement for word in lookups):
            captured.append((statement, params))

    sa.event.listen(engine.sync_engine, "before_cursor_execute", capture)
    try:
        for mode, text in ((FT, "quagga"), (SUB, "uagg")):
            await p.search(s, q(text, mode))
    finally:
        sa.event.remove(engine.sync_engine, "before_cursor_execute", capture)
    assert len(captured) == 4  # two modes x (messages, summaries)

    async with engine.connect() as conn:
        raw = await conn.get_raw_connection()
        driver = raw.driver_connection
        for statement, params in captured:
            if db_kind == "sqlite":
                cur = await driver.execute("EXPLAIN QUERY PLAN " + statement, params)
                plan = " ".join(str(r[-1]) for r in await cur.fetchall())
                if "_fts_postings p" in statement:  # ranges and probes of the primary key
                    assert "USING PRIMARY KEY (term=?" in plan, plan
                    assert not re.search(r"SCAN (p|messages_fts_postings)\b", plan), plan
                else:
                    assert "VIRTUAL TABLE INDEX" in plan, plan
            else:
                # Tiny tables make a sequential scan cheapest: forbid it. The planner may
                # then pick the conversation index (bounded by the user's history) or the
                # GIN index; without the conversation filter only the GIN index is left,
                # which shows the query's expression is the indexed one.
                unscoped = re.sub(
                    r"conversation_id IN \((?:%\(\w+\)s(?:, )?)+\)\s+AND\s", "", statement
                )
                assert unscoped != statement
                async with driver.cursor() as cur:
                    await cur.execute("SET enable_seqscan = off")
                    await cur.execute("EXPLAIN " + statement, params)
                    plan = " ".join(r[0] for r in await cur.fetchall())
                    await cur.execute("EXPLAIN " + unscoped, params)
                    unscoped_plan = " ".join(r[0] for r in await cur.fetchall())
                    await cur.execute("RESET enable_seqscan")
                assert "Seq Scan" not in plan and "Index" in plan, plan
                if "messages_search_postings" in statement:
                    # PostgreSQL's ranked message search reads postings by their key.
                    assert "messages_search_postings_pkey" in unscoped_plan, unscoped_plan
                    continue
                # (lcm's own for summaries, core's shared one for messages)
                assert re.search(r"ix_\w+_(gin|trgm)", unscoped_plan), unscoped_plan


async def test_full_text_ranks_a_rare_term_above_repeated_common_ones(make_provider) -> None:
    """BM25 on both databases: inverse document frequency (ts_rank has none)."""
    p = make_provider()
    s = session()
    await p.append(
        s,
        *(Message("user", f"python tutorial chapter {i}") for i in range(8)),
        Message("user", "python python python python python asyncio"),
        Message("user", "python asyncio asyncio"),
    )
    # "python" is in ten messages, "asyncio" in two: the rare word weighs more.
    hits = await p.search(s, q("python asyncio"))
    assert len(hits) == 10  # any of the words is enough
    assert [h.content for h in hits][:2] == [
        "python asyncio asyncio",
        "python python python python python asyncio",
    ]
    assert hits[0].score > hits[1].score > 0


async def test_full_text_ranks_a_short_document_above_a_long_one(make_provider) -> None:
    """BM25 on both databases: the same term frequency counts for more in a shorter
    message (ts_rank ignores length; the longer message is the newer, so ties go to it)."""
    p = make_provider()
    s = session()
    await p.append(
        s,
        Message("user", "kestrel sighting today"),
        Message("user", "kestrel " + " ".join(f"word{i}" for i in range(60))),
    )
    hits = await p.search(s, q("kestrel"))
    assert hits[0].content == "kestrel sighting today"
    assert hits[0].score > hits[1].score > 0


async def test_sqlite_searches_run_off_the_event_loop(make_provider, engine, db_kind) -> None:
    """Ranked and literal lookups run on a worker thread: a long search over a big history
    must not stall every other chat (memory/storage/sqlite_inline.py)."""
    if db_kind != "sqlite":
        pytest.skip("PostgreSQL's driver waits without blocking the loop")
    p = make_provider()
    s = session()
    await p.append(s, *numbered(30, word="quagga"))
    seen: list[tuple[int, str]] = []

    def trace(dbapi_conn, _record) -> None:  # noqa: ANN001
        sqlite_conn = dbapi_conn.driver_connection._conn
        sqlite_conn.set_trace_callback(lambda sql: seen.append((threading.get_ident(), sql)))

    await engine.dispose()  # new connections, each traced
    sa.event.listen(engine.sync_engine, "connect", trace)
    try:
        assert await p.search(s, q("quagga"))
        assert await p.search(s, q("uagg", SUB))
        assert await p.search(s, q("ag", SUB))  # too short for trigrams: LIKE
    finally:
        sa.event.remove(engine.sync_engine, "connect", trace)
    lookups = [t for t, sql in seen if " MATCH " in sql or " LIKE " in sql]
    assert len(lookups) >= 5  # three searches over messages and summaries (LIKE: messages)
    assert threading.get_ident() not in lookups
