"""What SQLite's message index costs a write (core revisions 0009 and 0011).

    .venv/bin/python bench/index_write_cost.py [--messages 20000] [--repeat 3]
        [--base DB] [--backfill DB]

The triggers on `messages` are set to:
- none: no index triggers (the row alone);
- fts: revision 0011's downgrade (FTS5 over the stems, as 0009 left it);
- postings: head (FTS5, then the postings, df and totals of revision 0011).
Without `--base`: for each, a fresh database migrated to head; the first `--messages`
of bench/search_scale.py's corpus (one user, 20 chats) are inserted in transactions of
5,000, as an import writes them, then every tenth is deleted, as a forget does; the
median of `--repeat` runs. With `--base DB` (a database at head, e.g. search_scale's
cached 1M one): for each, a copy of it, into which 2,000 messages are inserted in one
transaction, then 300 one per transaction (as the bot appends), and those 300 deleted
one per transaction. Reported: CPU us per message (this process: SQLite runs in it).

`--backfill DB` (a database before revision 0011) instead times `migrate()` of a copy
of it: revision 0011 filling the postings from the index, CPU and wall.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import search_scale  # noqa: E402
from memory.search import stems  # noqa: E402

_0011 = importlib.import_module("memory.migrations.versions.0011_sqlite_postings")
BATCH = 5000
VARIANTS = ("none", "fts", "postings")
INSERT = (
    "INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)


def _open(path: Path, variant: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    stems.register(conn)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA secure_delete=ON")  # as memory/storage/db.py
    if variant != "postings":
        for name in ("messages_fts_ai", "messages_fts_ad", "messages_fts_au"):
            conn.execute(f"DROP TRIGGER {name}")
    if variant == "fts":
        for name, event, body in (
            ("ai", "INSERT", _0011._FTS_ADD),
            ("ad", "DELETE", _0011._FTS_DROP),
        ):
            conn.execute(
                f"CREATE TRIGGER messages_fts_{name} AFTER {event} ON messages BEGIN {body} END"
            )
    return conn


def _rows(n: int, first_seq: int = 0) -> list[tuple]:
    return [
        (chat + 1, first_seq + seq, "user", text, len(text) // 4, at.isoformat())
        for chat, seq, text, at in search_scale.messages(n)
    ]


def fresh(variant: str, rows: list[tuple], tmp: Path) -> tuple[float, float]:
    path = Path(tempfile.mkdtemp(dir=tmp)) / f"{variant}.db"
    asyncio.run(search_scale._migrated(f"sqlite+aiosqlite:///{path}"))
    conn = _open(path, variant)
    now = search_scale.datetime.now(search_scale.UTC)
    conn.executemany(
        "INSERT INTO conversations (id, session_id, agent_id, user_id, channel, title, "
        "archived, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?)",
        [
            (*r[:6], r[6].isoformat(), r[7].isoformat())
            for r in search_scale._conversation_rows(now)
        ],
    )
    started = time.process_time()
    for at in range(0, len(rows), BATCH):
        conn.execute("BEGIN")
        conn.executemany(INSERT, rows[at : at + BATCH])
        conn.execute("COMMIT")
    insert = (time.process_time() - started) / len(rows) * 1e6
    started = time.process_time()
    conn.execute("BEGIN")
    deleted = conn.execute("DELETE FROM messages WHERE id % 10 = 0").rowcount
    conn.execute("COMMIT")
    conn.close()
    return insert, (time.process_time() - started) / deleted * 1e6


def on_base(variant: str, base: Path, tmp: Path) -> tuple[float, float, float]:
    path = tmp / "copy.db"
    shutil.copy(base, path)
    conn = _open(path, variant)
    rows = _rows(3000, first_seq=10**9)  # after any seq of the base's chats
    started = time.process_time()
    conn.execute("BEGIN")
    conn.executemany(INSERT, rows[:2000])
    conn.execute("COMMIT")
    batch = (time.process_time() - started) / 2000 * 1e6
    started = time.process_time()
    for row in rows[2000:2300]:
        conn.execute("BEGIN")
        conn.execute(INSERT, row)
        conn.execute("COMMIT")
    alone = (time.process_time() - started) / 300 * 1e6
    ids = [r[0] for r in conn.execute("SELECT id FROM messages ORDER BY id DESC LIMIT 300")]
    started = time.process_time()
    for i in ids:
        conn.execute("BEGIN")
        conn.execute("DELETE FROM messages WHERE id = ?", (i,))
        conn.execute("COMMIT")
    delete = (time.process_time() - started) / len(ids) * 1e6
    conn.close()
    path.unlink()
    return batch, alone, delete


def backfill(db: Path, tmp: Path) -> None:
    path = tmp / "backfill.db"
    shutil.copy(db, path)
    cpu, wall = time.process_time(), time.perf_counter()
    asyncio.run(search_scale._migrated(f"sqlite+aiosqlite:///{path}"))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    conn = sqlite3.connect(path)
    n = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    postings = conn.execute("SELECT count(*) FROM messages_fts_postings").fetchone()[0]
    conn.close()
    print(
        f"backfill of {n:,} messages ({postings:,} postings): {cpu:.1f} s CPU, {wall:.1f} s "
        f"wall; {db.stat().st_size / 1e6:.0f} -> {path.stat().st_size / 1e6:.0f} MB"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--base", type=Path)
    parser.add_argument("--backfill", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.backfill:
            backfill(args.backfill, Path(tmp))
            return 0
        if args.base:
            print("| triggers | insert, 2,000 a transaction | insert, one | delete, one |")
            print("| --- | ---: | ---: | ---: |")
            for variant in VARIANTS:
                b, a, d = on_base(variant, args.base, Path(tmp))
                print(f"| {variant} | {b:.0f} us | {a:.0f} us | {d:.0f} us |", flush=True)
            return 0
        rows = _rows(args.messages)
        print("| triggers | insert us / message | delete us / message |")
        print("| --- | ---: | ---: |")
        for variant in VARIANTS:
            runs = [fresh(variant, rows, Path(tmp)) for _ in range(args.repeat)]
            ins = statistics.median(r[0] for r in runs)
            dele = statistics.median(r[1] for r in runs)
            print(f"| {variant} | {ins:.0f} | {dele:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
