"""What core revision 0012 (PostgreSQL postings) costs: its upgrade on an existing
database, and the server CPU an appended message costs with its trigger against 0010's.

    .venv/bin/python bench/postings_cost.py [--db mnemo_scale_1000000_v2] [--upgrade]
        [--messages 3000] [--rounds 4]

--upgrade runs 0012's downgrade then its upgrade on --db (a migrated database, e.g. one
bench/search_scale.py cached), timed, in two transactions; the alembic version row is not
touched. The import figure always runs on a copy of --db (CREATE DATABASE ... TEMPLATE,
dropped after): COPY of --messages bench messages (bench/search_scale.py's generator)
with 0012's trigger, then as many with 0010's, --rounds times alternated, the server
backend's CPU (/proc/<pid>/schedstat) per message.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import search_scale  # noqa: E402

MIGRATION = REPO / "memory" / "migrations" / "versions" / "0012_search_postings.py"


def _migration(conn: Any) -> Any:
    """The revision's module, its `op` bound to `conn` (the statements run as written)."""
    spec = importlib.util.spec_from_file_location("postings_0012", MIGRATION)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class Result:
        def __init__(self, cursor: Any) -> None:
            self.cursor = cursor

        def first(self) -> Any:
            return self.cursor.fetchone()

    bind = SimpleNamespace(
        dialect=SimpleNamespace(name="postgresql"),
        exec_driver_sql=lambda sql: Result(conn.execute(sql)),
    )
    module.op = SimpleNamespace(execute=conn.execute, get_bind=lambda: bind)
    return module


def _dsn(db: str) -> str:
    return search_scale._psycopg_dsn(search_scale._pg_url(db))


def upgrade_time(db: str) -> float:
    with psycopg.connect(_dsn(db)) as conn:
        migration = _migration(conn)
        migration.downgrade()
        conn.commit()
        started = time.perf_counter()
        migration.upgrade()
        conn.commit()
        return time.perf_counter() - started


def import_cost(db: str, messages: int, rounds: int) -> dict[str, list[float]]:
    """Server CPU ms per message, per trigger version, one figure per round."""
    copy_db = "mnemo_postings_cost"
    admin = search_scale._psycopg_dsn(search_scale.PG_ADMIN_URL)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{copy_db}"')
        conn.execute(f'CREATE DATABASE "{copy_db}" TEMPLATE "{db}"')
    rows = [
        (chat + 1, 10_000_000 + seq, "user", text, len(text) // 4, at)
        for chat, seq, text, at in search_scale.messages(messages * 2 * rounds)
    ]
    out: dict[str, list[float]] = {"0012": [], "0010": []}
    try:
        with psycopg.connect(_dsn(copy_db)) as conn:
            m = _migration(conn)
            pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            versions = {
                "0012": m._sync(m._DROP, m._TERMS, m._ADD),
                "0010": m._sync("", m._TERMS_0010, ""),
            }
            for i in range(rounds * 2):
                name = "0012" if i % 2 == 0 else "0010"
                conn.execute(versions[name])
                conn.commit()
                part = rows[i * messages : (i + 1) * messages]
                before = _cpu_ns(pid)
                with (
                    conn.cursor() as cur,
                    cur.copy(
                        "COPY messages (conversation_id, seq, role, content, token_count, "
                        "created_at) FROM STDIN"
                    ) as copy,
                ):
                    for row in part:
                        copy.write_row(row)
                conn.commit()
                out[name].append((_cpu_ns(pid) - before) / 1e6 / len(part))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{copy_db}"')
    return out


def _cpu_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="mnemo_scale_1000000_v2")
    parser.add_argument("--upgrade", action="store_true")
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    if args.upgrade:
        print(f"0012 upgrade on {args.db}: {upgrade_time(args.db):.1f} s", flush=True)
    for name, figures in import_cost(args.db, args.messages, args.rounds).items():
        shown = ", ".join(f"{f:.3f}" for f in figures)
        print(f"trigger {name}: server CPU ms a message appended: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
