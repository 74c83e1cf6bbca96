"""Which database a command opens, and whether it may create one.

Only the commands that run the bot (`mnemo run`, `mnemo chat`) and `mnemo migrate`
create a database (and a SQLite file's directory, with one log line). An operator
command that reads (`mnemo memory status`, `sessions`, `search`, `export`, `doctor`,
`compact`, `embed`) or the reflect worker on a database that is not there says so in
one line naming it and exits non-zero: a mistyped path or a wrong directory must not look like "no sessions".
`mnemo memory import` may fill a new SQLite file, in a directory that exists.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path
from urllib.parse import quote

from bot.runtime.redact import MASK, mask_database_url

log = logging.getLogger(__name__)


class DatabaseMissing(Exception):
    """The configured database does not exist (or holds no mnemo tables); one line."""


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL; None for any other database, `:memory:` or a URI."""
    from sqlalchemy.engine import make_url  # imported here: `mnemo --help` stays quick
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite":
        return None
    db = parsed.database
    if not db or db == ":memory:" or db.startswith("file:"):
        return None
    return Path(db).expanduser().absolute()


def _sqlite_tables(path: Path) -> set[str]:
    # Read-only: the engine's connection would switch the file to WAL, a write.
    conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
    try:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()


def describe(url: str) -> str:
    """The database as an operator recognises it: the SQLite file's absolute path, or
    the URL without its password."""
    path = sqlite_file(url)
    if path is not None:
        return str(path)
    return mask_database_url(url) or MASK


def prepare(url: str) -> None:
    """For the commands that may create the database: a SQLite file's missing directory
    is made, and logged."""
    path = sqlite_file(url)
    if path is not None and not path.parent.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        log.info("created directory %s for the database", path.parent)


def require_directory(url: str) -> None:
    """For `import`: a new SQLite file is fine, a missing directory is a mistake."""
    path = sqlite_file(url)
    if path is not None and not path.parent.is_dir():
        raise DatabaseMissing(
            f"no directory {path.parent} for the database {path.name} (database.url); "
            "`mnemo migrate` creates it"
        )


async def require_existing(url: str) -> None:
    """For the commands that read: the database exists and holds mnemo's tables;
    nothing is created to find out."""
    path = sqlite_file(url)
    if path is not None and not path.is_file():
        raise DatabaseMissing(
            f"no database at {path} (database.url); `mnemo migrate` or `mnemo run` creates it"
        )
    import sqlalchemy as sa

    if path is not None:
        tables = await asyncio.to_thread(_sqlite_tables, path)
    else:
        from memory.storage.db import create_engine

        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                tables = await conn.run_sync(lambda c: set(sa.inspect(c).get_table_names()))
        finally:
            await engine.dispose()
    if "alembic_version" not in tables:
        raise DatabaseMissing(
            f"the database {describe(url)} holds no mnemo data (no tables); "
            "`mnemo migrate` or `mnemo run` creates them"
        )
