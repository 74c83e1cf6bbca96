"""One stemmer for both databases: the same text is indexed as the same tokens on SQLite
and PostgreSQL, and a word finds its inflections on both (memory/search/stems.py)."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.compaction.summarizer import TruncatingSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.types import Message, SearchMode, SearchQuery, Session
from memory.search import stems
from memory.testing.databases import temp_engine
from plugins.simple import create

# Inflections, suffixes Porter and Snowball treat apart, non-ASCII, digits, and the
# marks that split words (apostrophes, hyphens, underscores).
WORDS = """
octopus octopuses octopi running runs ran runner adopted adopting adoption adopt
happily happiness happy generously generous generosity university universities
universal organization organize organizing organized international evening added
adding skis skies dying lying news sky flies flying flew cats cat's caresses ponies
ties caress feed agreed disabled matting mating meeting milling messing meetings
agreement agreements argued arguing argument relational conditional rational
valenci hesitanci digitizer conformabli radicalli differentli vileli analogousli
vietnamization predication operator feudalism decisiveness hopefulness callousness
formaliti sensitiviti sensibiliti triplicate formative formalize electriciti
electrical hopeful goodness revival allowance inference airliner gyroscopic
adjustable defensible irritant replacement adjustment dependent homologou
communism activate angulariti homologous effective bowdlerize probate rate cease
controll roll generate commonly beautifully knitting knitted
café naïve résumé école straße über İstanbul ﬁle 日本語 мама книги
3rd 2024 1,000 3.14 abc123 x2 covid19 don't won’t rock'n'roll well-known
self-driving e-mail snake_case #hashtag @mention c++ 50% $100 10:30
""".split()  # noqa: SIM905 (a word list reads better as text)


def session() -> Session:
    return Session(id=f"stems-{uuid.uuid4().hex[:8]}", user_id=7, channel="test")


@pytest.fixture
async def engines(tmp_path: Path) -> AsyncIterator[tuple[AsyncEngine, AsyncEngine]]:
    async with (
        temp_engine("sqlite", tmp_path) as lite,
        temp_engine("postgres", tmp_path) as pg,
    ):
        yield lite, pg


async def _index_words(engine: AsyncEngine, tmp_path: Path) -> dict[str, set[str]]:
    """Each word of WORDS stored as a message of its own through a provider, and the
    tokens the database's index holds for it (the content field's only)."""
    provider = create(
        ProviderContext(
            engine=engine,
            summarizer=TruncatingSummarizer(),
            data_dir=tmp_path,
            config={"store_dir": str(tmp_path)},
        )
    )
    s = session()
    await provider.bootstrap(s)
    try:
        await provider.append(s, *(Message("user", w) for w in WORDS))
        async with engine.connect() as conn:
            ids = dict(
                (
                    await conn.execute(
                        sa.text("SELECT id, content FROM messages WHERE role = 'user'")
                    )
                ).all()
            )
            if engine.dialect.name == "sqlite":
                await conn.execute(
                    sa.text(
                        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.vocab "
                        "USING fts5vocab(main, messages_fts, instance)"
                    )
                )
                rows = await conn.execute(
                    sa.text("SELECT doc, term FROM temp.vocab WHERE col = 'content'")
                )
            else:
                rows = await conn.execute(
                    sa.text(
                        "SELECT message_id, l.lexeme FROM messages_search, "
                        "unnest(tsv) AS l(lexeme, positions, weights) WHERE 'A' = ANY(l.weights)"
                    )
                )
            out: dict[str, set[str]] = {w: set() for w in WORDS}
            for rowid, term in rows:
                if rowid in ids and term != stems.STOP:
                    out[ids[rowid]].add(term)
            return out
    finally:
        await provider.close()


# PostgreSQL's parser keeps these whole beside (or instead of) their parts
# (memory/search/stems.py says why a query never sees the difference).
PG_WHOLE = {"well-known", "self-driv", "e-mail", "3.14", "rock'n'roll"}


async def test_the_same_words_are_the_same_tokens_on_both_databases(
    engines: tuple[AsyncEngine, AsyncEngine], tmp_path: Path
) -> None:
    lite, pg = engines
    on_sqlite = await _index_words(lite, tmp_path / "a")
    on_pg = await _index_words(pg, tmp_path / "b")
    assert on_sqlite["octopuses"] == on_sqlite["octopus"] == {"octopus"}
    differ = {
        w: (on_sqlite[w], on_pg[w])
        for w in WORDS
        if on_sqlite[w] != on_pg[w] - PG_WHOLE and w != "3.14"
    }
    assert differ == {}
    # A word PostgreSQL keeps whole is also split there into what SQLite indexes...
    assert on_pg["well-known"] == {"well-known", "well", "known"}
    assert on_sqlite["well-known"] == {"well", "known"}
    # ...except a decimal number (one token there, two here): the one disagreement.
    assert (on_sqlite["3.14"], on_pg["3.14"]) == ({"3", "14"}, {"3.14"})


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_word_finds_its_inflections(kind: str, tmp_path: Path) -> None:
    async with temp_engine(kind, tmp_path) as engine:
        provider = create(
            ProviderContext(
                engine=engine,
                summarizer=TruncatingSummarizer(),
                data_dir=tmp_path,
                config={"store_dir": str(tmp_path / "m")},
            )
        )
        s = session()
        await provider.bootstrap(s)
        try:
            await provider.append(
                s,
                Message("user", "we saw two octopuses at the aquarium"),
                Message("user", "the universities were organizing a meeting"),
                Message("user", "nothing to see"),
            )
            for question, expected in (
                ("octopus", "octopuses"),
                ("university organization", "universities"),
                ("organized meetings", "universities"),
            ):
                hits = await provider.search(s, SearchQuery(question, mode=SearchMode.FULL_TEXT))
                assert [h.content for h in hits if expected in h.content], (kind, question)
        finally:
            await provider.close()


async def test_a_plain_sqlite_connection_writes_messages_once_registered(tmp_path: Path) -> None:
    """A tool writing with sqlite3 itself (bench/search_scale.py loads its corpus so) needs
    `stems.register`: the index triggers call `mnemo_stems`."""
    async with temp_engine("sqlite", tmp_path) as engine:
        path = engine.url.database
        assert path
        async with engine.begin() as conn:
            await conn.execute(
                sa.text(
                    "INSERT INTO conversations (id, session_id, agent_id, user_id, channel, "
                    "title, archived, created_at, updated_at) VALUES (1, 's', 'a', 1, 't', '', "
                    "0, '2024-01-01', '2024-01-01')"
                )
            )
        insert = (
            "INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
            "VALUES (1, ?, 'user', 'three octopuses', 3, '2024-01-01')"
        )
        raw = sqlite3.connect(path)
        try:
            with pytest.raises(sqlite3.OperationalError, match="mnemo_stems"):
                raw.execute(insert, (1,))
            raw.rollback()
            stems.register(raw)
            with raw:
                raw.execute(insert, (1,))
            found = raw.execute(
                "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?",
                (stems.fts5_terms(["octopus"]),),
            ).fetchall()
        finally:
            raw.close()
        assert len(found) == 1
