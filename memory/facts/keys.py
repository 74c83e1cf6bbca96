"""What a fact's key and value may be, and when two values say the same thing."""

from __future__ import annotations

import re
import secrets

from memory.contract.errors import InvalidArgument
from memory.contract.facts import MAX_KEY_CHARS, MAX_VALUE_CHARS
from memory.text.sanitize import storable

_SPACES = re.compile(r"\s+")


def normalize_key(key: object) -> str:
    """Trimmed, lowercase, spaces collapsed: "Home  City " and "home city" are one key."""
    if not isinstance(key, str):
        raise InvalidArgument("a fact's key must be text")
    out = _SPACES.sub(" ", storable(key)).strip().lower()
    if not out:
        raise InvalidArgument("a fact needs a key (e.g. 'home city')")
    if len(out) > MAX_KEY_CHARS:
        raise InvalidArgument(f"a fact's key is at most {MAX_KEY_CHARS} characters: {out[:40]!r}…")
    return out


def clean_value(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidArgument("a fact's value must be text")
    out = _SPACES.sub(" ", storable(value)).strip()
    if not out:
        raise InvalidArgument("a fact needs a value")
    if len(out) > MAX_VALUE_CHARS:
        raise InvalidArgument(f"a fact's value is at most {MAX_VALUE_CHARS} characters")
    return out


def same_value(a: str, b: str) -> bool:
    """A restatement: equal up to case, spacing and a final full stop."""
    return _fold(a) == _fold(b)


def _fold(text: str) -> str:
    return _SPACES.sub(" ", text).strip().rstrip(".").strip().casefold()


def new_fact_id() -> str:
    return f"f_{secrets.token_hex(8)}"
