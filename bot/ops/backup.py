"""`mnemo memory backup PATH`: an online copy of the SQLite database; for PostgreSQL,
the pg_dump line to run."""

from __future__ import annotations

import os
import shlex
import sqlite3
import time
from pathlib import Path

from sqlalchemy.engine import URL, make_url

from bot.config.settings import Settings
from bot.ops.common import EXIT_FAULT, EXIT_OK, err


def pg_dump_command(url: str, path: str) -> str:
    """The documented PostgreSQL backup: a custom-format pg_dump of the same database
    (the password, if any, is left to PGPASSWORD or ~/.pgpass, never printed)."""
    u = make_url(url)
    bare = URL.create(
        "postgresql",
        username=u.username,
        host=u.host,
        port=u.port,
        database=u.database,
        query=u.query,
    )
    # Quoted for a POSIX shell: the path is the operator's, the URL may hold `&` or `?`.
    target = bare.render_as_string(hide_password=False).replace("'", "'\\''")
    return f"pg_dump --format=custom --no-owner --file {shlex.quote(path)} '{target}'"


def backup(settings: Settings, path: str) -> int:
    url = make_url(settings.database.url)
    if url.get_backend_name() != "sqlite":
        err("PostgreSQL is backed up with its own tools; run (see docs/OPERATIONS.md):")
        print(pg_dump_command(settings.database.url, path))
        return EXIT_FAULT
    source = url.database
    if not source or source == ":memory:" or not Path(source).exists():
        err(f"no SQLite database at {source!r}")
        return EXIT_FAULT
    target = Path(path)
    if target.exists():
        err(f"{target} exists; choose a new path (a backup never overwrites)")
        return EXIT_FAULT
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    started = time.monotonic()
    try:
        # sqlite3's online backup copies a consistent snapshot page by page while the
        # bot keeps writing (WAL); the copy appears under its name only when complete.
        src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
        dst = sqlite3.connect(partial)
        try:
            src.backup(dst, pages=1024)
            ok = dst.execute("PRAGMA integrity_check").fetchone()[0]
            dst.execute("PRAGMA journal_mode=DELETE")  # a single self-contained file
        finally:
            dst.close()
            src.close()
        if ok != "ok":
            raise sqlite3.DatabaseError(f"integrity check of the copy failed: {ok}")
        os.replace(partial, target)
    except (sqlite3.Error, OSError) as exc:
        partial.unlink(missing_ok=True)
        err(f"backup failed, nothing written to {target}: {exc}")
        return EXIT_FAULT
    except KeyboardInterrupt:  # Ctrl-C: no half-written copy left behind
        partial.unlink(missing_ok=True)
        raise
    size = target.stat().st_size
    print(f"backed up {source} to {target} ({size} bytes, {time.monotonic() - started:.1f}s)")
    return EXIT_OK
