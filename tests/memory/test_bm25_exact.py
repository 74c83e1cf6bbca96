"""The pruned BM25 (memory/search/lexical.py, memory/search/maxscore.py, and on SQLite
memory/search/sqlite_ranked.py) returns exactly what scoring every matching row returns
(on SQLite, FTS5's own bm25()), on SQLite and PostgreSQL, and the totals and postings it
reads stay the index's own through appends, role changes, edits and forgets."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.compaction.summarizer import TruncatingSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.contract.types import Message, Session
from memory.search import lexical, maxscore, pg_postings, stems
from memory.search.lexical import K1, MESSAGES
from memory.search.recall import owned_conversations
from memory.search.text import ranked_terms
from memory.storage import forgetting as fg
from memory.storage.forgetting import Owner

NAMES = ["Olivia", "Noah", "Alex", "Mia"]
COMMON = ["coffee", "train", "later", "meeting", "weekend", "dinner", "2024", "café"]
RARE = [f"{a}{b}" for a in ("zor", "kel", "vim", "dax", "pru") for b in ("ba", "nit", "qo", "lem")]
USER, OTHER = Session("exact:1", user_id=1), Session("exact:2", user_id=2)
ARCHIVED = Session("exact:1:old", user_id=1)


def _message(rng: random.Random) -> str:
    words = [rng.choice(COMMON) for _ in range(rng.randint(1, 6))]
    words += [rng.choice(RARE) for _ in range(rng.randint(0, 2))]
    words += rng.choices(["the", "and", "we", "it"], k=rng.randint(0, 4))
    rng.shuffle(words)
    return f"{rng.choice(NAMES)}: " + " ".join(words)


def _questions(rng: random.Random, n: int) -> list[str]:
    out = ["coffee", "Olivia", "zorba", "Olivia coffee later weekend", "nothing matches here"]
    # Two words of one stem are two phrases to FTS5 (each counts); a word of two tokens
    # is a phrase (SQLite's bm25() ranks it); "_" alone has no token.
    out += ["meeting meetings coffee zorba", "coffee_later zorba", "_ coffee"]
    for _ in range(n):
        pool = NAMES + COMMON + RARE + ["what", "did", "say", "meetings"]
        out.append(" ".join(rng.sample(pool, rng.randint(2, 9))))
    return out


async def _provider(engine: AsyncEngine, tmp_path: Path):  # noqa: ANN202
    ctx = ProviderContext(engine=engine, summarizer=TruncatingSummarizer(), data_dir=tmp_path)
    return create_provider("lcm", ctx)


async def _same_top(engine: AsyncEngine, questions: list[str], limit: int = 20) -> int:
    """Compare the pruned and the exhaustive ranking of each question; returns how many
    rows the questions found in all (so a test can tell it searched something)."""
    found = 0
    async with engine.connect() as conn:
        conv_ids = await owned_conversations(conn, USER.user_id, USER.agent_id)
        for question in questions:
            terms = ranked_terms(question)
            pruned = await lexical.bm25(conn, MESSAGES, conv_ids, terms, limit)
            full = await lexical.bm25_exhaustive(conn, MESSAGES, conv_ids, terms, limit)
            assert [(h.rowid, h.score) for h in pruned] == [(h.rowid, h.score) for h in full], (
                question
            )
            found += len(full)
    return found


async def _totals_match_the_index(engine: AsyncEngine) -> None:
    if engine.dialect.name == "sqlite":
        await _postings_match_fts5(engine)
        return
    async with engine.connect() as conn:
        kept = (
            await conn.execute(
                sa.text("SELECT conversation_id, n, doclen FROM messages_search_totals")
            )
        ).all()
        counted = (
            await conn.execute(
                sa.text(
                    "SELECT conversation_id, count(*), sum(doclen) FROM messages_search "
                    "GROUP BY conversation_id"
                )
            )
        ).all()
        assert sorted(map(tuple, kept)) == sorted(map(tuple, counted))
        kept_df = (
            await conn.execute(
                sa.text("SELECT conversation_id, lexeme, df FROM messages_search_terms")
            )
        ).all()
        counted_df = (
            await conn.execute(
                sa.text(
                    "SELECT s.conversation_id, l, count(*) FROM messages_search s, "
                    "unnest(tsvector_to_array(s.tsv)) l GROUP BY s.conversation_id, l"
                )
            )
        ).all()
        assert sorted(map(tuple, kept_df)) == sorted(map(tuple, counted_df))
        postings = (
            "SELECT conversation_id, lexeme, message_id, n_all, n_ctx, doclen "
            "FROM messages_search_postings"
        )
        kept_postings = (await conn.execute(sa.text(postings))).all()
        counted_postings = (
            await conn.execute(
                sa.text(
                    "SELECT s.conversation_id, l.lexeme, s.message_id, "
                    "coalesce(cardinality(l.weights), 1), "
                    "coalesce(cardinality(array_positions(l.weights, 'B')), 0), s.doclen "
                    "FROM messages_search s, unnest(s.tsv) AS l(lexeme, positions, weights)"
                )
            )
        ).all()
        assert len(kept_postings) > 0
        assert sorted(map(tuple, kept_postings)) == sorted(map(tuple, counted_postings))
        # Each lexeme's kept bounds (only ever widened) still bound every row holding it.
        outside = await conn.execute(
            sa.text(
                "SELECT count(*) FROM messages_search_postings p JOIN messages_search_terms t "
                "USING (conversation_id, lexeme) WHERE p.n_all - p.n_ctx > t.max_a "
                "OR p.n_ctx > t.max_b OR p.doclen < t.min_dl "
                "OR t.max_a IS NULL OR t.max_b IS NULL OR t.min_dl IS NULL"
            )
        )
        assert outside.scalar_one() == 0


async def _postings_match_fts5(engine: AsyncEngine) -> None:
    """SQLite's postings, df and totals (core revision 0011) against FTS5's own index,
    read through fts5vocab: every token instance of every column, as FTS5 split it."""
    async with engine.connect() as conn:
        await conn.execute(
            sa.text(
                "CREATE VIRTUAL TABLE IF NOT EXISTS temp.fts_tokens "
                "USING fts5vocab(main, messages_fts, instance)"
            )
        )
        kept = (
            await conn.execute(
                sa.text("SELECT term, id, conv, tf, ctf, dl FROM messages_fts_postings")
            )
        ).all()
        counted = (
            await conn.execute(
                sa.text(
                    "SELECT v.term, v.doc, m.conversation_id, sum(v.col = 'content'), "
                    "sum(v.col = 'context'), (SELECT count(*) FROM temp.fts_tokens d "
                    "WHERE d.doc = v.doc) FROM temp.fts_tokens v "
                    "JOIN messages m ON m.id = v.doc "
                    "WHERE v.col IN ('content', 'context') AND v.term <> :stop "
                    "GROUP BY v.term, v.doc"
                ),
                {"stop": stems.STOP},
            )
        ).all()
        assert sorted(map(tuple, kept)) == sorted(map(tuple, counted))
        df = (await conn.execute(sa.text("SELECT term, df FROM messages_fts_terms"))).all()
        counted_df = (
            await conn.execute(
                sa.text(
                    "SELECT term, count(DISTINCT doc) FROM temp.fts_tokens "
                    "WHERE col IN ('content', 'context') AND term <> :stop GROUP BY term"
                ),
                {"stop": stems.STOP},
            )
        ).all()
        assert sorted(map(tuple, df)) == sorted(map(tuple, counted_df))
        totals = (await conn.execute(sa.text("SELECT n, tokens FROM messages_fts_totals"))).one()
        rows = (await conn.execute(sa.text("SELECT count(*) FROM messages_fts"))).scalar_one()
        tokens = (await conn.execute(sa.text("SELECT count(*) FROM temp.fts_tokens"))).scalar_one()
        assert tuple(totals) == (rows, tokens)
        assert rows > 0


@pytest.mark.parametrize("first_rows", [1, maxscore.FIRST_ROWS])
async def test_the_pruned_top_20_is_the_exhaustive_one(
    engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first_rows: int
) -> None:
    # first_rows=1: the first cut is the rarest term alone, so pruning decides; and on
    # PostgreSQL the thresholds come from two rows' full scores, not 100 and 1,000.
    monkeypatch.setattr(maxscore, "FIRST_ROWS", first_rows)
    if first_rows == 1:
        monkeypatch.setattr(pg_postings, "POOL", 2)
        monkeypatch.setattr(pg_postings, "REFINE", 2)
    rng = random.Random(34)
    p = await _provider(engine, tmp_path)
    for session, n in ((USER, 260), (ARCHIVED, 90), (OTHER, 120)):
        await p.append(session, *(Message("user", _message(rng)) for _ in range(n)))
    questions = _questions(rng, 60)
    assert await _same_top(engine, questions) > 500
    assert await _same_top(engine, questions, limit=3) > 100
    await _totals_match_the_index(engine)

    # Forgets and edits move the totals in their transactions.
    async with engine.begin() as conn:
        await conn.execute(sa.text("DELETE FROM messages WHERE id % 7 = 0"))
        await conn.execute(sa.text("UPDATE messages SET role = 'tool' WHERE id % 11 = 0"))
        await conn.execute(
            sa.text("UPDATE messages SET content = content || ' zorba' WHERE id % 13 = 0")
        )
    await _totals_match_the_index(engine)
    assert await _same_top(engine, questions) > 400

    # Forgetting and erasing through the provider's contract keep them too.
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.text("SELECT id FROM messages WHERE content LIKE :p ORDER BY id LIMIT 9"),
            {"p": "%zor%"},
        )
        ids = [r[0] for r in rows]
    await fg.forget(p, Owner(USER.user_id, USER.agent_id), ids)
    await fg.erase(p, Owner(OTHER.user_id, OTHER.agent_id), by="test")
    await p.append(USER, *(Message("user", _message(rng)) for _ in range(30)))
    await _totals_match_the_index(engine)
    assert await _same_top(engine, questions) > 400
    await p.close()


@given(
    st.lists(st.tuples(st.integers(1, 10_000), st.floats(1e-6, 20)), min_size=1, max_size=12),
    st.floats(0, 200),
)
def test_the_terms_left_out_cannot_reach_the_threshold(
    terms: list[tuple[int, float]], threshold: float
) -> None:
    plan = maxscore.Terms.of([(f"t{i}", rows, idf) for i, (rows, idf) in enumerate(terms)], K1)
    need = plan.needed(threshold)
    # Every term left out has a bound no higher than any kept one, and their sum stays
    # below the threshold: a row holding only them scores less.
    assert sum(plan.bounds[need:]) < threshold or need == len(plan.names)
    assert all(a >= b for a, b in zip(plan.bounds, plan.bounds[1:], strict=False))
    if need < len(plan.names):
        assert plan.needed(threshold + 1) <= need  # a higher threshold never needs more
    assert plan.needed(None) == len(plan.names)
    assert 1 <= plan.first_cut(20) <= len(plan.names)
