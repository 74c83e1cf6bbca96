"""Benchmarks of the lcm provider (issue 3), on SQLite and PostgreSQL.

    .venv/bin/python bench/lcm_bench.py [--db sqlite,postgres] [--append 100000]
        [--sizes 1000,10000] [--search-messages 1000000] [--sessions 1000] [--search-only]
        [--write]

- append: per-turn (user + assistant, one `append` call) p50 and throughput, building one
  session of `--append` messages;
- compaction: full compaction of the 10k-message session: wall time, summarizer calls;
- assemble (budget 80k, fresh tail 20) after full compaction, on sessions of each of
  `--sizes` plus the append session: p50 and the largest/smallest ratio;
- search over `--search-messages` messages across `--sessions` sessions (one user each),
  bulk-inserted (executemany; the FTS triggers / GIN indexes maintained as in production):
  substring and full_text p50 against a plain `LIKE '%x%'` scan of the same table.

The summarizer is `TruncatingSummarizer` (deterministic, no LLM). Figures go to stdout and,
with --write, are appended to bench/HISTORY.md with the machine, date and command.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import shlex
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import append_results, machine, percentile  # noqa: E402
from memory.compaction.summarizer import TruncatingSummarizer  # noqa: E402
from memory.contract.capabilities import ProviderContext  # noqa: E402
from memory.contract.types import CompactionMode, Message, SearchMode, SearchQuery, Session  # noqa: E402
from memory.storage.history import conversations, messages  # noqa: E402
from memory.testing.databases import temp_engine  # noqa: E402
from plugins.lcm import create  # noqa: E402

BUDGET, FRESH_TAIL = 80_000, 20

rng = random.Random(42)
# A Zipf vocabulary of 20k words: a few very common, a long tail of rare ones.
_SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ba", "de", "fu", "go", "hi"]
VOCAB = [
    rng.choice(_SYLLABLES) + rng.choice(_SYLLABLES) + rng.choice(_SYLLABLES) + str(i)
    for i in range(20_000)
]
CUM_WEIGHTS = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(VOCAB))))


def sentence(lo: int = 5, hi: int = 40) -> str:
    return " ".join(rng.choices(VOCAB, cum_weights=CUM_WEIGHTS, k=rng.randint(lo, hi)))


def p50(values: list[float]) -> float:
    return statistics.median(values) * 1000


def msg(role: str, i: int) -> Message:
    return Message(role=role, content=f"{i} {sentence()}")


async def bench_db(kind: str, args: argparse.Namespace, out: list[str]) -> None:
    out.append(f"\n### {kind}\n")
    with tempfile.TemporaryDirectory() as tmp:
        async with temp_engine(kind, Path(tmp)) as engine:
            summarizer = TruncatingSummarizer()
            p = create(
                ProviderContext(engine=engine, summarizer=summarizer, config={"keep_tail": 20})
            )
            if not args.search_only:
                await bench_append_and_sessions(p, summarizer, args, out)
            await bench_search(engine, p, args, out)
            await p.close()


async def build_session(p, label: str, n: int) -> Session:  # noqa: ANN001
    s = Session(id=f"{label}-{uuid.uuid4().hex[:6]}", user_id=rng.randint(1, 10**9))
    batch = 200
    for start in range(0, n, batch):
        await p.append(
            s,
            *(
                msg("user" if i % 2 == 0 else "assistant", i)
                for i in range(start, min(n, start + batch))
            ),
        )
    return s


async def bench_append_and_sessions(p, summarizer, args, out) -> None:  # noqa: ANN001
    # append: one session, one turn (2 messages) per call
    s = Session(id=f"append-{uuid.uuid4().hex[:6]}", user_id=1)
    turns = args.append // 2
    times = []
    started = time.perf_counter()
    for t in range(turns):
        pair = (msg("user", 2 * t), msg("assistant", 2 * t + 1))
        t0 = time.perf_counter()
        await p.append(s, *pair)
        times.append(time.perf_counter() - t0)
    wall = time.perf_counter() - started
    out.append(
        f"- append: {turns} turns ({2 * turns} messages) into one session: "
        f"p50 **{p50(times):.2f} ms**/turn, p95 {percentile(times, 0.95) * 1000:.2f} ms, "
        f"throughput **{2 * turns / wall:.0f} messages/s** ({wall:.1f} s)"
    )
    print(out[-1], flush=True)

    sessions = {}
    for size in args.sizes:
        sessions[size] = await build_session(p, f"s{size}", size)
    sessions[2 * turns] = s

    rows = []
    for size in sorted(sessions):
        sess = sessions[size]
        calls0 = summarizer.calls
        t0 = time.perf_counter()
        result = await p.compact(sess, CompactionMode.FULL)
        wall = time.perf_counter() - t0
        calls = summarizer.calls - calls0
        out.append(
            f"- full compaction of a {size}-message session: **{wall:.2f} s**, "
            f"**{calls} summarizer calls** ({result.leaf_summaries_created} leaf + "
            f"{result.condensed_summaries_created} condensed), context "
            f"{result.tokens_before} -> {result.tokens_after} tokens"
        )
        print(out[-1], flush=True)
        window = await p.assemble(sess, BUDGET, FRESH_TAIL)
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            await p.assemble(sess, BUDGET, FRESH_TAIL)
            times.append(time.perf_counter() - t0)
        rows.append((size, p50(times), len(window)))
    out.append(
        "\n| session messages | assemble p50 ms (budget 80k, tail 20) | items in window |\n|---:|---:|---:|"
    )
    out += [f"| {size} | {ms:.2f} | {n} |" for size, ms, n in rows]
    ratio = rows[-1][1] / rows[0][1]
    out.append(
        f"\nassemble p50 ratio {rows[-1][0]}/{rows[0][0]} messages: **{ratio:.2f}** (target < 2)\n"
    )
    print("\n".join(out[-len(rows) - 2 :]), flush=True)


async def bench_search(engine, p, args, out) -> None:  # noqa: ANN001
    n, k = args.search_messages, args.sessions
    per = n // k
    t0 = time.perf_counter()
    base = datetime(2026, 1, 1, tzinfo=UTC)
    users = []
    async with engine.begin() as conn:
        conv_rows = [
            {
                "session_id": f"search-{i}",
                "agent_id": "default",
                "user_id": 10_000 + i,
                "channel": "bench",
                "title": "",
                "archived": False,
                "created_at": base,
                "updated_at": base,
            }
            for i in range(k)
        ]
        await conn.execute(sa.insert(conversations), conv_rows)
        ids = dict(
            (
                await conn.execute(
                    sa.select(conversations.c.session_id, conversations.c.id).where(
                        conversations.c.session_id.like("search-%")
                    )
                )
            ).all()
        )
    batch = []
    done = 0
    for i in range(k):
        conv = ids[f"search-{i}"]
        users.append(Session(id=f"search-{i}", user_id=10_000 + i))
        for j in range(per):
            text = sentence()
            batch.append(
                {
                    "conversation_id": conv,
                    "seq": j + 1,
                    "role": "user",
                    "content": text,
                    "token_count": (len(text) + 3) // 4,
                    "created_at": base + timedelta(seconds=j),
                }
            )
            if len(batch) >= 20_000:
                async with engine.begin() as conn:
                    await conn.execute(sa.insert(messages), batch)
                done += len(batch)
                batch = []
                print(
                    f"  search data: {done}/{n} messages, {time.perf_counter() - t0:.0f} s",
                    flush=True,
                )
    if batch:
        async with engine.begin() as conn:
            await conn.execute(sa.insert(messages), batch)
    build = time.perf_counter() - t0
    if engine.dialect.name == "postgresql":
        async with engine.connect() as conn:
            await (await conn.execution_options(isolation_level="AUTOCOMMIT")).execute(
                sa.text("VACUUM ANALYZE messages")
            )
    else:
        async with engine.begin() as conn:
            await conn.execute(sa.text("ANALYZE"))

    # Queries: words of real messages (so frequent words are asked more often, as people do).
    async with engine.connect() as conn:
        sample = list(
            (
                await conn.execute(
                    sa.text("SELECT content FROM messages ORDER BY random() LIMIT 400")
                )
            ).scalars()
        )
    words = [rng.choice(t.split()) for t in sample]
    subs = []
    for w in words:
        start = rng.randint(0, max(0, len(w) - 4))
        subs.append(w[start : start + 4])

    async def timed(mode: SearchMode, texts: list[str]) -> tuple[float, float]:
        times, hits = [], 0
        for text in texts:
            who = rng.choice(users)
            t0 = time.perf_counter()
            found = await p.search(who, SearchQuery(text, limit=20, mode=mode))
            times.append(time.perf_counter() - t0)
            hits += len(found)
        return p50(times), hits / len(texts)

    ft, ft_hits = await timed(SearchMode.FULL_TEXT, words[: args.queries])
    sub, sub_hits = await timed(SearchMode.SUBSTRING, subs[: args.queries])
    # Two words of one message (drawn last, so the one-word queries stay the same).
    pairs = [" ".join(rng.sample(t.split(), 2)) for t in sample]
    ft2, ft2_hits = await timed(SearchMode.FULL_TEXT, pairs[: args.queries])
    like_times = []
    async with engine.connect() as conn:
        for text in subs[: args.like_queries]:
            t0 = time.perf_counter()
            await conn.execute(
                sa.text("SELECT id, content FROM messages WHERE content LIKE :p"),
                {"p": f"%{text}%"},
            )
            like_times.append(time.perf_counter() - t0)
    like = p50(like_times)
    rank = "bm25"
    out.append(
        f"- search data: {n} messages in {k} sessions (one user each, {per} messages), "
        f"bulk-built in {build:.0f} s"
    )
    out.append("\n| query | p50 ms | vs LIKE scan |\n|---|---:|---:|")
    out.append(
        f"| full_text ({rank}, limit 20; {ft_hits:.1f} hits avg) | {ft:.2f} | {like / ft:.0f}x |"
    )
    out.append(
        f"| full_text, 2 words ({rank}, limit 20; {ft2_hits:.1f} hits avg) | {ft2:.2f} | "
        f"{like / ft2:.0f}x |"
    )
    out.append(
        f"| substring, 4 chars (trigram, limit 20; {sub_hits:.1f} hits avg) | {sub:.2f} | {like / sub:.0f}x |"
    )
    out.append(
        f"| plain `LIKE '%x%'` over the table ({len(like_times)} queries) | {like:.1f} | 1x |"
    )
    print("\n".join(out[-6:]), flush=True)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default="sqlite,postgres")
    ap.add_argument("--append", type=int, default=100_000)
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--search-messages", type=int, default=1_000_000)
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--like-queries", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--search-only", action="store_true", help="skip append/compact/assemble")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    args.sizes = [int(x) for x in args.sizes.split(",") if x]
    out = [
        f"\n## lcm provider ({datetime.now(UTC).date()})\n",
        f"- machine: {machine()}",
        f"- command: `.venv/bin/python bench/lcm_bench.py {shlex.join(sys.argv[1:])}`",
        "- summarizer: TruncatingSummarizer (deterministic); config keep_tail 20, leaf_chunk_size 10",
    ]
    for kind in args.db.split(","):
        await bench_db(kind, args, out)
    text = "\n".join(out) + "\n"
    print(text)
    if args.write:
        append_results(text)


if __name__ == "__main__":
    asyncio.run(main())
