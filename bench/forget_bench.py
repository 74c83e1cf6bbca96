"""Forgetting at size: how long one forget takes in a database of many messages, split
into its parts, and whether the planted word is gone from the bytes.

    .venv/bin/python bench/forget_bench.py --messages 100000 --db sqlite
    .venv/bin/python bench/forget_bench.py --messages 100000 --db sqlite,postgres --append-results

`--users` conversations share the messages; the target user's conversation (1000
messages) is compacted fully, with one word planted deep in it; the forget removes that
message and rebuilds the summaries that may quote it. Parts: the preview (finding the
text), the forget itself (summarizer calls, then one transaction) and, on SQLite, the
scrub after it (every FTS5 index merged, the WAL checkpointed and truncated), which
grows with the whole database rather than with what is forgotten.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import append_results, machine  # noqa: E402
from memory.compaction.summarizer import TruncatingSummarizer  # noqa: E402
from memory.contract.capabilities import ProviderContext  # noqa: E402
from memory.contract.registry import create_provider  # noqa: E402
from memory.contract.types import CompactionMode, Message, Session  # noqa: E402
from memory.storage import forgetting as fg  # noqa: E402
from memory.storage.db import create_engine, migrate  # noqa: E402
from memory.storage.forgetting import Owner  # noqa: E402
from memory.testing.databases import temp_database_url  # noqa: E402

TOKEN = "Zbenchplantedword"
TARGET_MESSAGES = 1000
BATCH = 500
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "tea",
    "cools",
    "on",
    "the",
    "sill",
]


def _text(i: int) -> str:
    words = [WORDS[(i * 7 + k) % len(WORDS)] for k in range(12)]
    return f"message {i}: " + " ".join(words) + f" w{i}"


async def _populate(provider, users: int, total: int) -> Session:  # type: ignore[no-untyped-def]
    others = max(0, total - TARGET_MESSAGES)
    per_user = max(1, others // max(1, users - 1))
    n = 0
    for u in range(1, users):
        s = Session(f"bench:{u}", "default", 10_000 + u, "telegram")
        for start in range(0, per_user, BATCH):
            batch = [
                Message("user" if k % 2 == 0 else "assistant", _text(n + k))
                for k in range(min(BATCH, per_user - start))
            ]
            n += len(batch)
            await provider.append(s, *batch)
    target = Session("bench:target", "default", 10_000, "telegram")
    msgs = [
        Message("user" if k % 2 == 0 else "assistant", _text(n + k)) for k in range(TARGET_MESSAGES)
    ]
    msgs[TARGET_MESSAGES // 10] = Message("assistant", f"the code word is {TOKEN}")
    for start in range(0, TARGET_MESSAGES, BATCH):
        await provider.append(target, *msgs[start : start + BATCH])
    await provider.compact(target, CompactionMode.FULL)
    return target


async def run(kind: str, provider_name: str, total: int, users: int) -> str:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        async with temp_database_url(kind, tmp) as url:
            engine = create_engine(url)
            try:
                await migrate(engine)
                config: dict[str, object] = {"keep_tail": 20, "leaf_chunk_size": 10}
                if provider_name == "simple":
                    config = {"keep_tail": 20, "store_dir": str(tmp / "notes")}
                provider = create_provider(
                    provider_name,
                    ProviderContext(
                        engine=engine, summarizer=TruncatingSummarizer(), config=config
                    ),
                )
                t0 = time.perf_counter()
                target = await _populate(provider, users, total)
                print(
                    f"{kind}/{provider_name}: populated in {time.perf_counter() - t0:.0f} s",
                    file=sys.stderr,
                )
                owner = Owner(target.user_id, target.agent_id)
                size = _size(engine) if kind == "sqlite" else 0

                t1 = time.perf_counter()
                preview = await fg.preview(provider, owner, TOKEN)
                t2 = time.perf_counter()
                report = await provider.forget_messages(owner, preview.ids, preview.needles)
                t3 = time.perf_counter()
                await fg.scrub(engine)
                t4 = time.perf_counter()
                clean = "-"
                if kind == "sqlite":
                    path = Path(str(engine.url.database))
                    blobs = [path, Path(f"{path}-wal")]
                    clean = (
                        "yes"
                        if not any(
                            TOKEN.lower()[:-2].encode() in p.read_bytes().lower()
                            for p in blobs
                            if p.exists()
                        )
                        else "NO"
                    )
                await provider.close()
            finally:
                await engine.dispose()
    return (
        f"| {kind} | {provider_name} | {total} | {f'{size / 2**20:.0f} MiB' if size else '-'} | "
        f"{(t2 - t1) * 1000:.0f} ms | {(t3 - t2) * 1000:.0f} ms "
        f"({report.summaries_rebuilt} rebuilt) | {(t4 - t3) * 1000:.0f} ms | {clean} |"
    )


def _size(engine) -> int:  # type: ignore[no-untyped-def]
    path = Path(str(engine.url.database))
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


HEADER = (
    "| db | provider | messages | db size | preview | forget | scrub | token gone from bytes |\n"
    "|---|---|---|---|---|---|---|---|"
)


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--users", type=int, default=100)
    p.add_argument("--db", default="sqlite")
    p.add_argument("--provider", default="lcm")
    p.add_argument("--append-results", action="store_true")
    args = p.parse_args()
    rows = [
        asyncio.run(run(kind, provider, args.messages, args.users))
        for kind in args.db.split(",")
        for provider in args.provider.split(",")
    ]
    table = HEADER + "\n" + "\n".join(rows)
    print(table)
    if args.append_results:
        command = " ".join(["bench/forget_bench.py", *sys.argv[1:]]).replace(
            " --append-results", ""
        )
        append_results(
            f"## Forgetting one message at size ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n\n"
            f"- machine: {machine()}\n- command: `.venv/bin/python {command}`\n"
            f"  ({args.users} conversations; the target's {TARGET_MESSAGES} messages compacted "
            "fully with a truncating summarizer, one word planted in its 100th message)\n\n"
            f"{table}\n\n"
            "preview: finding the messages that hold the text; forget: the provider's plan "
            "(summarizer calls) and its one transaction; scrub: SQLite's FTS5 merge and WAL "
            "checkpoint after it (PostgreSQL: nothing; VACUUM reclaims later).\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
