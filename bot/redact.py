"""Secrets never reach the logs.

Libraries log what they were given: python-telegram-bot logs its Bot API URL, which
carries the token, at DEBUG; an HTTP error may quote a URL. Rather than trust every
logger's level, each log record is scrubbed when it is created: its message and any
traceback text have every configured secret (bot token, API key, webhook secret,
database password) replaced by `***`.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

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
