"""What the console accepts from a URL or a form, checked in one place.

Every number a page takes (`page`, `user`, `at`, `/memory/<uid>`, ...) goes through
`whole`, and the guard (bot/web/console.py) runs `check_request` on every request before
its page: a NUL anywhere (path, query, form) or a number outside what the database's
BIGINT columns hold is refused with a 400 that says which parameter, instead of reaching
SQLite (OverflowError) or PostgreSQL (out of range, invalid byte sequence) as a 500.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

# Every id, seq and user id column is BIGINT (memory/storage/store_models.py, memory/storage/history_models.py).
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_WHOLE = re.compile(r"-?[0-9]{1,19}")  # ASCII digits only; more than 19 cannot fit


class BadInput(ValueError):
    """A request parameter the console refuses: answered 400 with this message."""


def fits_int64(n: int) -> bool:
    return INT64_MIN <= n <= INT64_MAX


def as_int64(text: str) -> int | None:
    """`text` as a number a BIGINT column holds, or None when it is not one."""
    if not _WHOLE.fullmatch(text):
        return None
    n = int(text)
    return n if fits_int64(n) else None


def whole(
    name: str,
    value: str | None,
    default: Any,
    *,
    low: int | None = None,
    high: int | None = None,
) -> Any:
    """Parameter `name` as a whole number: `default` when absent or empty, clamped to
    [low, high] (a page past the last is the last, as before); BadInput when it is not a
    number or does not fit in 64 bits."""
    if value is None or value == "":
        return default
    n = as_int64(value)
    if n is None:
        raise BadInput(
            f"{name} must be a whole number between {INT64_MIN} and {INT64_MAX}, "
            f"not {_shown(value)}."
        )
    if low is not None and n < low:
        return low
    if high is not None and n > high:
        return high
    return n


def check_request(path: str, *params: Mapping[str, Any]) -> None:
    """BadInput when the (decoded) path or a parameter's name or text value holds a NUL:
    no column can store one (PostgreSQL refuses the byte) and no real id has one."""
    if "\x00" in path:
        raise BadInput("The address holds a NUL character (%00): no page has one.")
    for mapping in params:
        for key, value in mapping.items():
            if "\x00" in key or (isinstance(value, str) and "\x00" in value):
                raise BadInput(f"Parameter {_shown(key)} holds a NUL character (%00).")


def _shown(value: str) -> str:
    """The value for a message: cut short, NULs and other controls visible."""
    text = value if len(value) <= 40 else value[:40] + "…"
    return repr(text)


def page_url(path: str, keep: Mapping[str, str], **more: Any) -> str:
    """`path` with the non-empty parameters of `keep` and `more` as its query."""
    params = {k: v for k, v in {**keep, **{k: str(v) for k, v in more.items()}}.items() if v}
    return f"{path}?{urlencode(params)}" if params else path
