"""Relative paths of the settings made absolute: a config file's from its directory, the
environment's from the current one. Below both bot.config.settings and bot.config.env,
which each anchor paths."""

from __future__ import annotations

from pathlib import Path


def anchored(base: Path, path: str) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else base / p


def anchored_sqlite_url(url: str, base: Path) -> str:
    """A SQLite URL whose relative file path is made absolute from `base`; any other
    URL (PostgreSQL, `:memory:`, a `file:` URI) as it is."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if not url.startswith("sqlite"):
        return url
    try:
        parsed = make_url(url)
    except ArgumentError:
        return url
    db = parsed.database
    if not db or db == ":memory:" or db.startswith("file:"):
        return url
    return parsed.set(database=str(anchored(base, db))).render_as_string(hide_password=False)
