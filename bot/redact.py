"""Secrets never reach the logs.

Libraries log what they were given: python-telegram-bot logs its Bot API URL, which
carries the token, at DEBUG; an HTTP error may quote a URL. Rather than trust every
logger's level, each log record is scrubbed when it is created: its message and any
traceback text have every configured secret (bot token, API key, webhook secret,
database password, decoded and as written in the URL) replaced by `***`.
"""

from __future__ import annotations

import logging
import threading
from typing import Any
from urllib.parse import quote

MASK = "***"
MIN_SECRET_CHARS = 6  # shorter values would mask ordinary words

# Replaced whole, never mutated: worker threads log while the loop installs more.
_secrets: tuple[str, ...] = ()
_lock = threading.Lock()
_installed = False


def _scrub(text: str) -> str:
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def _factory(base: Any) -> Any:
    formatter = logging.Formatter()

    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = base(*args, **kwargs)
        if not _secrets:
            return record
        message = record.getMessage()
        clean = _scrub(message)
        if clean != message:
            record.msg, record.args = clean, ()
        if record.exc_info and record.exc_info[0] is not None:
            # Formatters reuse exc_text when it is set: give them the scrubbed one.
            record.exc_text = _scrub(formatter.formatException(record.exc_info))
        return record

    return make


def install_redaction(*secrets: str | None) -> None:
    """Mask these secrets in every log record from now on (empty values are ignored)."""
    global _installed, _secrets
    with _lock:
        added = {s for s in secrets if s and len(s) >= MIN_SECRET_CHARS}
        # Longest first, so a secret containing another is masked whole.
        _secrets = tuple(sorted(set(_secrets) | added, key=len, reverse=True))
        if not _installed:
            logging.setLogRecordFactory(_factory(logging.getLogRecordFactory()))
            _installed = True


def url_password_forms(url: str) -> tuple[str, ...]:
    """The password of a database URL in every form a log line may carry it: decoded (what
    the driver is given), exactly as written in the URL, and percent-encoded the standard
    way and the way SQLAlchemy renders it. Empty when the URL has no password."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return ()
    password = parsed.password
    if not password:
        return ()
    forms = {password, quote(password, safe=""),
             _written_password(url), _written_password(parsed.render_as_string(hide_password=False))}
    return tuple(sorted(f for f in forms if f))


def _written_password(url: str) -> str:
    # As SQLAlchemy splits a URL: the password runs from the first ':' after the user
    # name to the first '@'.
    userinfo, at, _ = url.partition("://")[2].partition("@")
    return userinfo.partition(":")[2] if at else ""
