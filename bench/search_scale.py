"""Word search at scale: one user's memory of 10k, 100k, 1M messages (issue 34, item 2).

    .venv/bin/python bench/search_scale.py [--sizes 10000,100000] [--db sqlite,postgres]
        [--questions 40] [--words 10] [--write]

The memory is what an import leaves: 20 chats of one user (sizes falling off Zipf-like),
every message `Name: text` with the chat's speakers (the user's own name in every chat),
words drawn from a Zipf vocabulary of made-up words mixed with English stop words. It is
bulk-loaded through SQL in big transactions (the migrations' triggers fill the indexes
exactly as in production) and kept under bench/.cache/search_scale/ (SQLite files; on
PostgreSQL a database `mnemo_scale_<n>_v<generator>` beside a marker file there), so a
rerun only migrates and measures. Delete the folder (and the databases) to rebuild.

Queries: natural-language questions of 5-12 words (stop words, a speaker's name at
times, words of every frequency) and one-word queries. For each, per query:
- mnemo: the lcm provider's `search` (full_text, limit 20: the scope lookup, the ranking,
  the snippets), CPU (this process's plus, on PostgreSQL, the server backends' of the
  database, from /proc/<pid>/schedstat) and wall, and the longest event-loop stall seen
  by a ticker coroutine (1 ms sleeps) while it ran, beside the control: the same ticker
  while the loop only sleeps as long (the shared machine's own scheduling delays);
- the physical references: raw FTS5 `bm25()` with `ORDER BY ... LIMIT 20` over the whole
  table (no scope), and PostgreSQL's GIN `@@` with `ts_rank_cd` and `LIMIT 20`;
- identity: the top 20 of `memory.search.lexical.bm25` against the exhaustive BM25
  (`lexical.bm25_exhaustive`: every matching row scored), counting queries whose lists
  differ (ids in order).

Figures go to stdout and, with --write, are appended to bench/HISTORY.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import shlex
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._common import append_results, machine, percentile  # noqa: E402
from bot.config.settings import Settings  # noqa: E402
from memory.compaction.summarizer import TruncatingSummarizer  # noqa: E402
from memory.contract.capabilities import ProviderContext  # noqa: E402
from memory.contract.registry import create_provider_async  # noqa: E402
from memory.contract.types import SearchMode, SearchQuery, Session  # noqa: E402
from memory.search import lexical, stems  # noqa: E402
from memory.search.recall import owned_conversations  # noqa: E402
from memory.search.stopwords import STOP_WORDS  # noqa: E402
from memory.search.text import ranked_terms  # noqa: E402
from memory.storage.db import create_engine, migrate  # noqa: E402
from memory.testing.databases import PG_ADMIN_URL  # noqa: E402

CACHE = Path(os.environ.get("MNEMO_SCALE_CACHE", REPO / "bench" / ".cache" / "search_scale"))
GENERATOR = 2  # bump when the corpus changes: cached databases are rebuilt
USER, AGENT, CHATS, LIMIT = 1, "bench", 20, 20
VOCABULARY, SEED = 60_000, 34
NAMES = [
    "Olivia",
    "Liam",
    "Emma",
    "Noah",
    "Amelia",
    "Oliver",
    "Sophia",
    "Elijah",
    "Charlotte",
    "James",
    "Ava",
    "Lucas",
    "Mia",
    "Mateo",
    "Isabella",
    "Levi",
    "Evelyn",
    "Ezra",
    "Harper",
    "Asher",
    "Luna",
    "Leo",
    "Camila",
    "Henry",
    "Gianna",
    "Hudson",
    "Elena",
    "Ethan",
    "Aria",
    "Theo",
    "Ellie",
    "Jack",
    "Nova",
    "Owen",
    "Layla",
    "Kai",
    "Mila",
    "Wyatt",
    "Chloe",
    "Aiden",
    "Zoe",
    "Julian",
    "Riley",
    "Grayson",
]
ME = "Alex"  # the user: a speaker in every chat, as in an export of one's own account
_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]
_STOPS = sorted(STOP_WORDS)
BATCH = 50_000
# Past the stop words, the commonest word of a chat is in a few percent of its messages
# (the speakers' names are far commoner): Zipf-Mandelbrot, exponent 1.05, offset 40.
WORD_ZIPF = (1.05, 40.0)


# --- the corpus -------------------------------------------------------------------------


def vocabulary() -> list[str]:
    """VOCABULARY distinct made-up words (2-4 syllables), most frequent first."""
    rng = np.random.default_rng(SEED)
    words: dict[str, None] = {}
    while len(words) < VOCABULARY:
        n = int(rng.integers(2, 5))
        word = "".join(_SYLLABLES[int(i)] for i in rng.integers(0, len(_SYLLABLES), n))
        words.setdefault(word, None)
    return list(words)


def zipf(n: int, s: float, offset: float = 0.0) -> np.ndarray:
    """Cumulative Zipf-Mandelbrot weights: the offset flattens the head."""
    weights = 1.0 / (np.arange(1, n + 1) + offset) ** s
    return np.cumsum(weights / weights.sum())


def chat_sizes(total: int) -> list[int]:
    shares = 1.0 / np.arange(1, CHATS + 1) ** 0.8
    sizes = np.maximum(1, np.floor(total * shares / shares.sum())).astype(int)
    sizes[0] += total - int(sizes.sum())
    return [int(s) for s in sizes]


def speakers(chat: int) -> list[str]:
    others = 1 + chat % 5  # one-to-one chats and groups of up to 6
    return [ME] + [NAMES[(chat * 7 + k) % len(NAMES)] for k in range(others)]


def messages(total: int) -> Iterator[tuple[int, int, str, datetime]]:
    """(chat, seq, content, created_at) of every message, chat by chat."""
    rng = np.random.default_rng(SEED + total)
    vocab, word_cdf, stop_cdf = vocabulary(), zipf(VOCABULARY, *WORD_ZIPF), zipf(len(_STOPS), 1.0)
    start = datetime(2019, 1, 1, tzinfo=UTC)
    for chat, size in enumerate(chat_sizes(total)):
        people = speakers(chat)
        lengths = np.clip(rng.lognormal(2.2, 0.75, size), 1, 120).astype(int)
        stops = rng.random(int(lengths.sum())) < 0.45
        picks_w = np.searchsorted(word_cdf, rng.random(int(lengths.sum())))
        picks_s = np.searchsorted(stop_cdf, rng.random(int(lengths.sum())))
        who = rng.integers(0, len(people), size)
        at = 0
        for seq in range(size):
            n = int(lengths[seq])
            words = [
                _STOPS[int(picks_s[at + i])] if stops[at + i] else vocab[int(picks_w[at + i])]
                for i in range(n)
            ]
            at += n
            text = f"{people[int(who[seq])]}: " + " ".join(words)
            yield chat, seq, text, start + timedelta(seconds=seq * 97 + chat)


@dataclass(frozen=True)
class Query:
    text: str
    kind: str  # "question" | "word"


def queries(questions: int, words: int) -> list[Query]:
    rng = np.random.default_rng(SEED * 3)
    vocab, cdf = vocabulary(), zipf(VOCABULARY, *WORD_ZIPF)
    chats = np.cumsum(chat_sizes(10_000)) / 10_000
    openers = ["what did", "when did", "who told me about", "do you remember", "where is"]
    out = []
    while len(out) < questions:
        size = int(rng.integers(5, 13))
        parts = [openers[int(rng.integers(0, len(openers)))]]
        if rng.random() < 0.7:  # someone of the chats, by name, the busiest chats likelier
            people = speakers(int(np.searchsorted(chats, rng.random())))[1:]
            parts.append(people[int(rng.integers(0, len(people)))])
        while len(" ".join(parts).split()) < size:
            if rng.random() < 0.4:
                parts.append(_STOPS[int(rng.integers(0, 60))])
            elif rng.random() < 0.5:  # an everyday word (1-5% of messages)
                parts.append(vocab[int(rng.integers(0, 300))])
            else:  # a word of any frequency, as people ask about anything
                parts.append(vocab[int(np.searchsorted(cdf, rng.random()))])
        text = " ".join(" ".join(parts).split()[:size]) + "?"
        if ranked_terms(text):  # a question of stop words alone is searched literally
            out.append(Query(text, "question"))
    while len(out) < questions + words:
        rank = int(np.exp(rng.uniform(np.log(10), np.log(5000))))
        if ranked_terms(vocab[rank]):  # made-up words can be stop words ("more")
            out.append(Query(vocab[rank], "word"))
    return out


# --- building and caching the databases -------------------------------------------------


def _pg_url(db: str) -> str:
    return PG_ADMIN_URL.rpartition("/")[0] + "/" + db


def _psycopg_dsn(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


async def _migrated(url: str) -> None:
    engine = create_engine(url)
    try:
        await migrate(engine)
    finally:
        await engine.dispose()


def _conversation_rows(now: datetime) -> list[tuple[Any, ...]]:
    return [
        (i + 1, f"scale:{i}", AGENT, USER, "telegram", f"chat {i}", now, now) for i in range(CHATS)
    ]


def build_sqlite(n: int) -> Path:
    path = CACHE / f"sqlite-{n}-v{GENERATOR}.db"
    if path.exists():
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    part = path.with_suffix(".part")
    part.unlink(missing_ok=True)
    asyncio.run(_migrated(f"sqlite+aiosqlite:///{part}"))
    conn = sqlite3.connect(part, isolation_level=None)
    stems.register(conn)  # the index triggers' tokens
    conn.execute("PRAGMA journal_mode=WAL")
    now = datetime.now(UTC)
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO conversations (id, session_id, agent_id, user_id, channel, title, "
        "archived, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?)",
        [(*r[:6], r[6].isoformat(), r[7].isoformat()) for r in _conversation_rows(now)],
    )
    conn.execute("COMMIT")
    rows: list[tuple[Any, ...]] = []
    for chat, seq, text, at in messages(n):
        rows.append((chat + 1, seq, "user", text, len(text) // 4, at.isoformat()))
        if len(rows) >= BATCH:
            _sqlite_batch(conn, rows)
    _sqlite_batch(conn, rows)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    part.rename(path)
    return path


def _sqlite_batch(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        rows,
    )
    conn.execute("COMMIT")
    rows.clear()


def build_postgres(n: int) -> str:
    import psycopg

    name = f"mnemo_scale_{n}_v{GENERATOR}"
    marker = CACHE / f"postgres-{n}-v{GENERATOR}.done"
    admin = _psycopg_dsn(PG_ADMIN_URL)
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists and marker.exists():
            return name
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = _pg_url(name)
    asyncio.run(_migrated(url))
    now = datetime.now(UTC)
    with psycopg.connect(_psycopg_dsn(url)) as conn:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO conversations (id, session_id, agent_id, user_id, channel, title, "
                "archived, created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, false, %s, %s)",
                _conversation_rows(now),
            )
            cur.execute("SELECT setval(pg_get_serial_sequence('conversations', 'id'), 100)")
        conn.commit()
        rows: list[tuple[Any, ...]] = []
        for chat, seq, text, at in messages(n):
            rows.append((chat + 1, seq, "user", text, len(text) // 4, at))
            if len(rows) >= BATCH:
                _pg_batch(conn, rows)
        _pg_batch(conn, rows)
    with psycopg.connect(_psycopg_dsn(url), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    CACHE.mkdir(parents=True, exist_ok=True)
    marker.write_text(name)
    return name


def _pg_batch(conn: Any, rows: list[tuple[Any, ...]]) -> None:
    # COPY fires the row triggers as INSERT does.
    with (
        conn.cursor() as cur,
        cur.copy(
            "COPY messages (conversation_id, seq, role, content, token_count, created_at) "
            "FROM STDIN"
        ) as copy,
    ):
        for row in rows:
            copy.write_row(row)
    conn.commit()
    rows.clear()


# --- measuring --------------------------------------------------------------------------


class ServerCpu:
    """CPU time (ns) of the PostgreSQL backends connected to one database (same host)."""

    def __init__(self, dbname: str | None) -> None:
        self.dbname = dbname
        self._admin: Any = None
        if dbname is not None:
            import psycopg

            self._admin = psycopg.connect(_psycopg_dsn(PG_ADMIN_URL), autocommit=True)

    def ns(self) -> int:
        if self._admin is None:
            return 0
        pids = self._admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (self.dbname,)
        ).fetchall()
        total = 0
        for (pid,) in pids:
            with contextlib.suppress(OSError, ValueError):
                total += int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
        return total

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()


@dataclass
class Figures:
    cpu: list[float] = field(default_factory=list)  # ms
    wall: list[float] = field(default_factory=list)
    stall: list[float] = field(default_factory=list)


async def measured(call: Callable[[], Awaitable[Any]], server: ServerCpu, figures: Figures) -> Any:
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)
    c0, s0, w0 = time.process_time(), server.ns(), time.perf_counter()
    result = await call()
    w1, c1, s1 = time.perf_counter(), time.process_time(), server.ns()
    done.set()
    await ticker
    figures.cpu.append((c1 - c0) * 1000 + (s1 - s0) / 1e6)
    figures.wall.append((w1 - w0) * 1000)
    figures.stall.append(max(gaps, default=w1 - w0) * 1000 - 1)
    return result


def raw_sqlite(path: Path) -> Callable[[list[str]], list[int]]:
    conn = sqlite3.connect(path)

    def run(terms: list[str]) -> list[int]:
        words = stems.fts5_terms(terms)  # the index holds stems, not words
        rows = conn.execute(
            "SELECT rowid, bm25(messages_fts, 0.0, 1.0, 0.5) AS r FROM messages_fts "
            "WHERE messages_fts MATCH ? ORDER BY r LIMIT ?",
            (f"{{content context}} : ({words})", LIMIT),
        ).fetchall()
        return [r[0] for r in rows]

    return run


def raw_postgres(dbname: str) -> tuple[Callable[[list[str]], list[int]], int]:
    import psycopg

    conn = psycopg.connect(_psycopg_dsn(_pg_url(dbname)), autocommit=True)
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]

    def run(terms: list[str]) -> list[int]:
        rows = conn.execute(
            "WITH w AS (SELECT replace(plainto_tsquery('english', %s)::text, '&', '|')"
            "::tsquery AS q) SELECT message_id FROM messages_search, w "
            "WHERE tsv @@ q ORDER BY ts_rank_cd(tsv, q) DESC LIMIT %s",
            (" ".join(terms), LIMIT),
        ).fetchall()
        return [r[0] for r in rows]

    return run, pid


def _proc_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def timed_sync(call: Callable[[], Any], pid: int | None, figures: Figures) -> Any:
    c0, s0, w0 = time.process_time(), _proc_ns(pid) if pid else 0, time.perf_counter()
    result = call()
    w1, c1, s1 = time.perf_counter(), time.process_time(), _proc_ns(pid) if pid else 0
    figures.cpu.append((c1 - c0) * 1000 + (s1 - s0) / 1e6)
    figures.wall.append((w1 - w0) * 1000)
    return result


@dataclass
class Outcome:
    mnemo: dict[str, Figures]
    raw: dict[str, Figures]
    ranking: dict[str, Figures]
    exhaustive: dict[str, Figures]
    mismatches: dict[str, int]
    idle: dict[str, Figures]
    matched_rows: float = 0.0  # mean rows holding any query word, questions


async def measure(kind: str, built: Path | str, qs: list[Query]) -> Outcome:
    with tempfile.TemporaryDirectory() as tmp:
        if isinstance(built, Path):
            url, dbname = f"sqlite+aiosqlite:///{built}", None
        else:
            url, dbname = _pg_url(built), built
        settings = Settings.model_validate(
            {"database": {"url": url}, "data_dir": tmp, "memory": {"provider": "lcm"}}
        )
        engine = create_engine(url)
        server = ServerCpu(dbname)
        try:
            await migrate(engine)
            ctx = ProviderContext(
                engine=engine,
                summarizer=TruncatingSummarizer(),
                agent_id=AGENT,
                data_dir=Path(tmp),
                config=settings.provider_config(),
            )
            provider = await create_provider_async("lcm", ctx)
            try:
                return await _measure_all(kind, provider, engine, server, path_or(kind, url), qs)
            finally:
                await provider.close()
        finally:
            server.close()
            await engine.dispose()


def path_or(kind: str, url: str) -> str:
    return url.split("///", 1)[1] if kind == "sqlite" else url.rsplit("/", 1)[1]


async def _measure_all(
    kind: str, provider: Any, engine: Any, server: ServerCpu, where: str, qs: list[Query]
) -> Outcome:
    session = Session(id="scale:0", agent_id=AGENT, user_id=USER, channel="telegram")
    async with engine.connect() as conn:
        conv_ids = await owned_conversations(conn, USER, AGENT)
    if kind == "sqlite":
        raw, raw_pid = raw_sqlite(Path(where)), None
    else:
        raw, raw_pid = raw_postgres(where)
    exhaustive = getattr(lexical, "bm25_exhaustive", lexical.bm25)
    kinds = ("question", "word")
    out = Outcome(
        {k: Figures() for k in kinds},
        {k: Figures() for k in kinds},
        {k: Figures() for k in kinds},
        {k: Figures() for k in kinds},
        dict.fromkeys(kinds, 0),
        {k: Figures() for k in kinds},
    )
    for q in qs[:3]:  # warm the caches
        await provider.search(session, SearchQuery(q.text, mode=SearchMode.FULL_TEXT))
    matched = []
    for q in qs:
        terms = ranked_terms(q.text)
        query = SearchQuery(q.text, mode=SearchMode.FULL_TEXT, limit=LIMIT)
        await measured(
            functools.partial(provider.search, session, query), server, out.mnemo[q.kind]
        )
        # The control: the same ticker while the loop only sleeps as long (the machine's
        # own scheduling delays, which no change to search can remove).
        idle = functools.partial(asyncio.sleep, out.mnemo[q.kind].wall[-1] / 1000)
        await measured(idle, ServerCpu(None), out.idle[q.kind])
        timed_sync(functools.partial(raw, terms), raw_pid, out.raw[q.kind])
        new = await measured(
            functools.partial(_ranked, engine, lexical.bm25, conv_ids, terms),
            server,
            out.ranking[q.kind],
        )
        old = await measured(
            functools.partial(_ranked, engine, exhaustive, conv_ids, terms),
            server,
            out.exhaustive[q.kind],
        )
        if [h.rowid for h in new] != [h.rowid for h in old]:
            out.mismatches[q.kind] += 1
            print(f"  mismatch: {q.text!r}", flush=True)
        if q.kind == "question":
            matched.append(await _matching_rows(engine, kind, terms))
    out.matched_rows = float(np.mean(matched)) if matched else 0.0
    return out


async def _ranked(engine: Any, fn: Any, conv_ids: list[int], terms: list[str]) -> list[Any]:
    async with engine.connect() as conn:
        return list(await fn(conn, lexical.MESSAGES, conv_ids, terms, LIMIT))


async def _matching_rows(engine: Any, kind: str, terms: list[str]) -> int:
    async with engine.connect() as conn:
        if kind == "sqlite":
            words = stems.fts5_terms(terms)  # the index holds stems, not words
            row = await conn.exec_driver_sql(
                "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?",
                (f"{{content context}} : ({words})",),
            )
        else:
            row = await conn.exec_driver_sql(
                "SELECT count(*) FROM messages_search WHERE tsv @@ "
                "replace(plainto_tsquery('english', %(t)s)::text, '&', '|')::tsquery",
                {"t": " ".join(terms)},
            )
        return int(row.scalar_one())


def _cell(f: Figures) -> str:
    return f"{percentile(f.cpu, 0.5):.1f} / {percentile(f.cpu, 0.95):.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--db", default="sqlite,postgres")
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--words", type=int, default=10)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    qs = queries(args.questions, args.words)
    lines = [
        f"## Word search at scale ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)",
        "",
        f"- machine: {machine()}",
        f"- command: `.venv/bin/python bench/search_scale.py {shlex.join(sys.argv[1:])}`",
        f"- {args.questions} questions of 5-12 words, {args.words} one-word queries; top "
        f"{LIMIT}; CPU ms p50 / p95 (client + server on PostgreSQL); wall p50; the longest "
        "event-loop stall p50 / max",
        "",
        "| messages | database | query | rows matched | mnemo search CPU | wall p50 "
        "| loop stall p50 / max | idle loop stall p50 / max | ranking CPU | exhaustive BM25 CPU | physical ref CPU "
        "| top-20 mismatches |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n in [int(s) for s in args.sizes.split(",")]:
        for kind in args.db.split(","):
            started = time.perf_counter()
            built = build_sqlite(n) if kind == "sqlite" else build_postgres(n)
            print(f"  ({kind} {n:,} built: {time.perf_counter() - started:.0f} s)", flush=True)
            r = asyncio.run(measure(kind, built, qs))
            for k in ("question", "word"):
                m = r.mnemo[k]
                if not m.cpu:
                    continue
                lines.append(
                    f"| {n:,} | {kind} | {k} | {r.matched_rows:,.0f} | {_cell(m)} "
                    f"| {percentile(m.wall, 0.5):.1f} "
                    f"| {percentile(m.stall, 0.5):.1f} / {max(m.stall):.1f} "
                    f"| {percentile(r.idle[k].stall, 0.5):.1f} / {max(r.idle[k].stall):.1f} "
                    f"| {_cell(r.ranking[k])} | {_cell(r.exhaustive[k])} | {_cell(r.raw[k])} "
                    f"| {r.mismatches[k]} |"
                )
                print(lines[-1], flush=True)
            print(f"  ({kind} {n:,}: {time.perf_counter() - started:.0f} s)", flush=True)
    text = "\n".join(lines)
    print(text)
    if args.write:
        append_results(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
