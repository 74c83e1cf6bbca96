"""Secrets never reach the logs.

Libraries log what they were given: python-telegram-bot logs its Bot API URL, which
carries the token, at DEBUG; an HTTP error may quote a URL. Rather than trust every
logger's level, each log record is scrubbed when it is created: its message and any
traceback text have every configured secret (API keys, each channel's declared secrets
such as a bot token, database password, secret query parameters of the database URL
such as `?password=`, credentials embedded in URLs; decoded and as written in the URL)
replaced by `***`. Which keys hold secrets is bot.config.settings's to say.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus, unquote, unquote_plus

MASK = "***"
MIN_SECRET_CHARS = 6  # shorter values would mask ordinary words
# A URL query parameter whose name holds one of these carries a secret: libpq takes
# `password` and `sslpassword` there, and HTTP services often a `token` or `secret`.
SECRET_PARAM_WORDS = ("password", "secret", "token")
# How SQLAlchemy's make_url reads `driver://user:password@`: the user name holds no ':'
# or '/', the password ends at the first '@'. The rest (host, port, database) holds no
# '?', so the query is everything after the rest's first '?', a '#' included.
_DB_URL = re.compile(
    r"(?P<head>[\w+]+://)(?:(?P<user>[^:/]*)(?::(?P<password>[^@]*))?@)?(?P<rest>.*)", re.DOTALL
)

# Replaced whole, never mutated: worker threads log while the loop installs more.
_secrets: tuple[str, ...] = ()
_lock = threading.Lock()
_installed = False


def secret_values(*values: str | None) -> tuple[str, ...]:
    """These values as a list for `mask`: empty and short ones dropped (they would mask
    ordinary words), longest first (so a secret containing another is masked whole)."""
    kept = {v for v in values if v and len(v) >= MIN_SECRET_CHARS}
    return tuple(sorted(kept, key=len, reverse=True))


def mask(text: str, secrets: tuple[str, ...]) -> str:
    """`text` with every one of `secrets` (as `secret_values` gives them) replaced by `***`."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def scrub(text: str) -> str:
    """`text` with every secret installed by `install_redaction` masked: for what reaches
    the terminal without a log record (an error line, a last-resort traceback)."""
    return mask(text, _secrets)


def config_secrets(
    *, secrets: Iterable[str], database_url: str, urls: Iterable[str]
) -> tuple[str, ...]:
    """Every secret a config sets, in every form a message may carry it: the `secrets`
    (each already in the forms its owner declares, such as a bot token's secret part),
    the database URL's password and secret query values, and the credentials in the
    other `urls`."""
    return secret_values(
        *secrets,
        *(url_password_forms(database_url) if database_url else ()),
        *(form for url in urls for form in url_credential_forms(url)),
    )


def _factory(base: Any) -> Any:
    formatter = logging.Formatter()

    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = base(*args, **kwargs)
        if not _secrets:
            return record
        message = record.getMessage()
        clean = mask(message, _secrets)
        if clean != message:
            record.msg, record.args = clean, ()
        if record.exc_info and record.exc_info[0] is not None:
            # Formatters reuse exc_text when it is set: give them the scrubbed one.
            record.exc_text = mask(formatter.formatException(record.exc_info), _secrets)
        return record

    return make


def install_redaction(*secrets: str | None) -> None:
    """Mask these secrets in every log record from now on (empty values are ignored)."""
    global _installed, _secrets
    with _lock:
        _secrets = secret_values(*_secrets, *secrets)
        if not _installed:
            logging.setLogRecordFactory(_factory(logging.getLogRecordFactory()))
            _installed = True


def url_password_forms(url: str) -> tuple[str, ...]:
    """The password of a database URL in every form a log line may carry it: decoded (what
    the driver is given), exactly as written in the URL, and percent-encoded the standard
    way and the way SQLAlchemy renders it. Empty when the URL has no password."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    match = _DB_URL.match(url)
    forms = _query_secret_forms(match["rest"].partition("?")[2] if match else url.partition("?")[2])
    try:
        parsed = make_url(url)
    except ArgumentError:
        return tuple(sorted(f for f in forms if f))
    password = parsed.password
    if password:
        forms |= {
            password,
            quote(password, safe=""),
            _written_password(url),
            _written_password(parsed.render_as_string(hide_password=False)),
        }
    return tuple(sorted(f for f in forms if f))


def url_credential_forms(url: str) -> tuple[str, ...]:
    """The password of an HTTP URL's `user:password@` and its secret query values, decoded
    and as written. Empty when there are none."""
    after_scheme = url.partition("://")[2]
    forms = _query_secret_forms(after_scheme.partition("#")[0].partition("?")[2])
    authority = after_scheme
    for stop in "/?#":
        authority = authority.partition(stop)[0]
    # RFC 3986 ends the user information at the last '@'; a sloppy parser may end it at
    # the first, so both readings are masked.
    if "@" in authority:
        for userinfo in {authority.rpartition("@")[0], authority.partition("@")[0]}:
            written = userinfo.partition(":")[2]
            forms |= {written, unquote(written)}
    return tuple(sorted(f for f in forms if f))


def is_secret_param(name: str) -> bool:
    """Whether a URL query parameter of this name carries a secret."""
    lowered = name.lower()
    return any(word in lowered for word in SECRET_PARAM_WORDS)


def mask_database_url(url: str) -> str | None:
    """The database URL with its password and secret query values replaced by `***`, the
    rest exactly as written (SQLAlchemy's own rendering re-encodes the query, `***` to
    `%2A%2A%2A`). None when it is not a URL."""
    match = _DB_URL.match(url)
    if match is None:
        return None
    out = match["head"]
    if match["password"] is not None:
        out += f"{match['user']}:{MASK}@"
    elif match["user"] is not None:
        out += f"{match['user']}@"
    rest, sep, query = match["rest"].partition("?")
    items = []
    for item in query.split("&"):
        name, eq, _ = item.partition("=")
        items.append(f"{name}={MASK}" if eq and is_secret_param(unquote_plus(name)) else item)
    return out + rest + sep + "&".join(items)


def _query_secret_forms(query: str) -> set[str]:
    forms: set[str] = set()
    for item in query.split("&"):
        name, _, written = item.partition("=")
        if written and is_secret_param(unquote_plus(name)):
            decoded = unquote_plus(written)  # what the driver is given
            forms |= {written, decoded, quote(decoded, safe=""), quote_plus(decoded)}
    return forms


def _written_password(url: str) -> str:
    # As SQLAlchemy splits a URL: the password runs from the first ':' after the user
    # name to the first '@'.
    userinfo, at, _ = url.partition("://")[2].partition("@")
    return userinfo.partition(":")[2] if at else ""
