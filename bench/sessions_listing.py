"""`mnemo memory sessions` over many sessions: wall time and SQL statements of one listing.

    .venv/bin/python bench/sessions_listing.py --sessions 5000 --db sqlite,postgres
    .venv/bin/python bench/sessions_listing.py --sessions 5000 --append-results

Each session gets a few messages through the configured provider (and lcm one compaction
per tenth session, so the SUMMARIES column is not all zeros); the listing is then run
`--repeat` times and the best wall time reported (the listing is read-only).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import append_results, machine  # noqa: E402
from bot.config.settings import Settings  # noqa: E402
from bot.ops import sessions  # noqa: E402
from memory.compaction.summarizer import TruncatingSummarizer  # noqa: E402
from memory.contract.capabilities import ProviderContext  # noqa: E402
from memory.contract.registry import create_provider_async  # noqa: E402
from memory.contract.types import CompactionMode, Message, Session  # noqa: E402
from memory.storage.db import create_engine, migrate  # noqa: E402
from memory.testing.databases import temp_database_url  # noqa: E402


def settings_for(url: str, tmp: Path, provider: str) -> Settings:
    return Settings.model_validate(
        {
            "database": {"url": url},
            "data_dir": str(tmp / "data"),
            "memory": {
                "provider": provider,
                "simple": {"store_dir": str(tmp / "notes")},
                "lcm": {"leaf_chunk_size": 2},
            },
            "compaction": {"keep_tail": 2},
        }
    )


async def populate(settings: Settings, tmp: Path, n: int) -> None:
    engine = create_engine(settings.database.url)
    try:
        await migrate(engine)
        provider = await create_provider_async(
            settings.memory.provider,
            ProviderContext(
                engine=engine,
                summarizer=TruncatingSummarizer(),
                data_dir=tmp,
                config=settings.provider_config(),
            ),
        )
        try:
            for i in range(n):
                session = Session(f"bench:{i}", "default", 1000 + i, "telegram")
                await provider.bootstrap(session)
                await provider.append(
                    session,
                    *(
                        Message(
                            "user" if k % 2 == 0 else "assistant", f"message {k} of session {i}"
                        )
                        for k in range(6)
                    ),
                )
                if i % 10 == 0:
                    await provider.compact(session, CompactionMode.FULL)
        finally:
            await provider.close()
    finally:
        await engine.dispose()


async def measure(settings: Settings, repeat: int) -> tuple[float, int, str]:
    statements: list[str] = []

    def count(conn, cursor, statement, *args) -> None:  # type: ignore[no-untyped-def]
        statements.append(statement)

    best = float("inf")
    output = ""
    for _ in range(repeat):
        statements.clear()
        out = io.StringIO()
        event.listen(Engine, "before_cursor_execute", count)
        try:
            start = time.perf_counter()
            assert await sessions.sessions(settings, out=out) == 0
            best = min(best, time.perf_counter() - start)
        finally:
            event.remove(Engine, "before_cursor_execute", count)
        output = out.getvalue()
    return best, len(statements), output


async def run(kind: str, provider: str, n: int, repeat: int) -> tuple[str, str]:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        async with temp_database_url(kind, tmp) as url:
            settings = settings_for(url, tmp, provider)
            t0 = time.perf_counter()
            await populate(settings, tmp, n)
            print(
                f"{kind}/{provider}: populated {n} sessions in {time.perf_counter() - t0:.1f} s",
                file=sys.stderr,
            )
            best, statements, output = await measure(settings, repeat)
    return f"| {kind} | {provider} | {n} | {best * 1000:.0f} ms | {statements} |", output


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sessions", type=int, default=5000)
    p.add_argument("--db", default="sqlite,postgres")
    p.add_argument("--provider", default="lcm,simple")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dump", help="write each listing to DUMP.<db>.<provider>.txt")
    p.add_argument("--append-results", action="store_true")
    args = p.parse_args()
    rows = []
    for kind in args.db.split(","):
        for provider in args.provider.split(","):
            row, output = asyncio.run(run(kind, provider, args.sessions, args.repeat))
            if args.dump:
                Path(f"{args.dump}.{kind}.{provider}.txt").write_text(output, encoding="utf-8")
            rows.append(row)
            print(rows[-1], flush=True)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    text = "\n".join(
        [
            f"- date: {datetime.now(UTC):%Y-%m-%d}, tree {commit}",
            f"- machine: {machine()}",
            f"- command: .venv/bin/python bench/sessions_listing.py --sessions {args.sessions} "
            f"--db {args.db} --provider {args.provider} --repeat {args.repeat}",
            "",
            "| db | provider | sessions | listing (best) | SQL statements |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )
    print(text)
    if args.append_results:
        append_results(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
