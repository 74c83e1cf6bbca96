"""What SQLite's message index costs a write (core revisions 0009 and 0011).

    .venv/bin/python bench/index_write_cost.py [--messages 20000] [--repeat 3]

Three fresh databases migrated to head, the triggers on `messages` then set to:
- none: no index triggers (the row alone);
- fts: revision 0011's downgrade (FTS5 over the stems, as 0009 left it);
- postings: head (FTS5, then the postings, df and totals of revision 0011).
The first messages of bench/search_scale.py's corpus (one user, 20 chats) are inserted
in transactions of 5,000, as an import writes them, then every tenth is deleted, as a
forget does. Reported: CPU us per message inserted and per message deleted (this
process: SQLite runs in it), the median of `--repeat` runs, and the database's size.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
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


def _triggers(conn: sqlite3.Connection, variant: str) -> None:
    if variant == "postings":
        return
    for name in ("messages_fts_ai", "messages_fts_ad", "messages_fts_au"):
        conn.execute(f"DROP TRIGGER {name}")
    if variant == "fts":
        conn.execute(
            f"CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages BEGIN {_0011._FTS_ADD} END"
        )
        conn.execute(
            f"CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages BEGIN {_0011._FTS_DROP} END"
        )


def run(variant: str, rows: list[tuple], tmp: Path) -> tuple[float, float, int]:
    path = tmp / f"{variant}.db"
    asyncio.run(search_scale._migrated(f"sqlite+aiosqlite:///{path}"))
    conn = sqlite3.connect(path, isolation_level=None)
    stems.register(conn)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA secure_delete=ON")  # as memory/storage/db.py
    _triggers(conn, variant)
    conn.executemany(
        "INSERT INTO conversations (id, session_id, agent_id, user_id, channel, title, "
        "archived, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?)",
        [
            (*r[:6], r[6].isoformat(), r[7].isoformat())
            for r in search_scale._conversation_rows(search_scale.datetime.now(search_scale.UTC))
        ],
    )
    started = time.process_time()
    for at in range(0, len(rows), BATCH):
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO messages (conversation_id, seq, role, content, token_count, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?)",
            rows[at : at + BATCH],
        )
        conn.execute("COMMIT")
    insert = (time.process_time() - started) / len(rows) * 1e6
    started = time.process_time()
    conn.execute("BEGIN")
    deleted = conn.execute("DELETE FROM messages WHERE id % 10 = 0").rowcount
    conn.execute("COMMIT")
    delete = (time.process_time() - started) / deleted * 1e6
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return insert, delete, path.stat().st_size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for chat, seq, text, at in search_scale.messages(args.messages):
        rows.append((chat + 1, seq, "user", text, len(text) // 4, at.isoformat()))
    print("| triggers | insert us / message | delete us / message | database MB |")
    print("| --- | ---: | ---: | ---: |")
    for variant in ("none", "fts", "postings"):
        runs = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                runs.append(run(variant, rows, Path(tmp)))
        ins = statistics.median(r[0] for r in runs)
        dele = statistics.median(r[1] for r in runs)
        print(f"| {variant} | {ins:.0f} | {dele:.0f} | {runs[0][2] / 1e6:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
