"""The parameters memory actions take, each defined once: its JSON schema (what the model
reads) and its validation, whose one-line errors name what is wrong so the model can
correct its call. Actions compose their pydantic argument models from these types.

A missing parameter and a JSON `null` are the same; integers may come as whole floats or
decimal strings (models send both); strings are checked for length, and for emptiness
unless the action allows an empty one (an empty profile clears it)."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from memory.contract.types import SearchMode, SearchScope, as_utc, minute_utc, utcnow

SEARCH_SCOPES = tuple(s.value for s in SearchScope)
CHANGE_SCOPES = ("profile", "soul", "constraint", "fact", "compaction")
ALL_SCOPES = (*SEARCH_SCOPES, *CHANGE_SCOPES)
SEARCH_MODES = tuple(m.value for m in SearchMode)


class ArgumentError(ValueError):
    """Arguments are unusable; the message says why, in one line."""


def refuse(reason: str) -> PydanticCustomError:
    return PydanticCustomError("argument", "{reason}", {"reason": reason})


def first_error(action: str, exc: ValidationError) -> ArgumentError:
    """The first problem of a failed validation, in today's words."""
    error = exc.errors()[0]
    name = str(error["loc"][0]) if error["loc"] else ""
    if error["type"] == "missing":
        return ArgumentError(f"{action} needs {name}")
    if error["type"] == "argument":
        return ArgumentError(error["ctx"]["reason"])
    return ArgumentError(f"{name}: {error['msg']}".lstrip(": "))


class Arguments(BaseModel):
    """The base of every action's arguments: parameters of other actions are ignored (the
    tool refuses names no action knows before validation)."""

    model_config = ConfigDict(extra="ignore", frozen=True)


def _integer(low: int, high: int) -> Any:
    def check(raw: Any, info: ValidationInfo) -> int:
        name = info.field_name
        if isinstance(raw, bool):
            raise refuse(f"{name} must be an integer, got a boolean")
        if isinstance(raw, float):
            if not math.isfinite(raw) or not raw.is_integer():
                raise refuse(f"{name} must be a whole number")
            raw = int(raw)
        elif isinstance(raw, str) and raw.strip().lstrip("-").isdecimal() and len(raw) <= 20:
            raw = int(raw)
        if not isinstance(raw, int):
            raise refuse(f"{name} must be an integer")
        if not low <= raw <= high:
            raise refuse(f"{name} must be between {low} and {high}")
        return raw

    return BeforeValidator(check)


def _text(max_chars: int, allow_empty: bool = False) -> Any:
    def check(raw: Any, info: ValidationInfo) -> str:
        name = info.field_name
        if not isinstance(raw, str):
            raise refuse(f"{name} must be a string")
        if len(raw) > max_chars:
            raise refuse(f"{name} is too long ({len(raw)} characters, at most {max_chars})")
        if not allow_empty and not raw.strip():
            raise refuse(f"{name} must not be empty")
        return raw

    return BeforeValidator(check)


def _choice(choices: tuple[str, ...]) -> Any:
    def check(raw: Any, info: ValidationInfo) -> str:
        name = info.field_name
        if not isinstance(raw, str):
            raise refuse(f"{name} must be a string")
        value = raw.strip().lower()
        if value not in choices:
            raise refuse(f"{name} must be one of {', '.join(choices)}")
        return value

    return BeforeValidator(check)


_AGO = re.compile(r"(\d{1,4})([dw])")
_AGO_DAYS = {"d": 1, "w": 7}


def parse_date(raw: str) -> datetime | None:
    """A date as people and the model write it: `2026-03-01` (midnight UTC), an ISO date
    and time (UTC unless it says), or `7d` / `2w`: that many days or weeks before now.
    None when it is none of these."""
    word = raw.strip().lower()
    ago = _AGO.fullmatch(word)
    if ago:
        return utcnow() - timedelta(days=int(ago.group(1)) * _AGO_DAYS[ago.group(2)])
    try:
        return as_utc(datetime.fromisoformat(word.upper()))
    except (ValueError, OverflowError):  # OverflowError: 0001-01-01T00:00+05:00 in UTC
        return None


def said_window(args: Any) -> str:
    """The date range a search was kept to, in words (" from … before …"), or ""."""
    since, before = getattr(args, "since", None), getattr(args, "before", None)
    out = f" from {minute_utc(since)}" if since else ""
    return out + (f" before {minute_utc(before)}" if before else "")


def _search_date() -> Any:
    def check(raw: Any, info: ValidationInfo) -> datetime | None:
        name = info.field_name
        if raw is None:
            return None
        parsed = parse_date(raw) if isinstance(raw, str) and len(raw) <= 40 else None
        if parsed is None:
            raise refuse(f"{name} must be a date: YYYY-MM-DD, an ISO date and time, or 7d / 2w ago")
        return parsed

    return BeforeValidator(check)


def _schema(schema: dict[str, Any]) -> WithJsonSchema:
    return WithJsonSchema(schema)


Text = Annotated[
    str,
    _text(2000),
    _schema(
        {
            "type": "string",
            "description": "search: what to look for; constraint_add: the rule; note_search: query",
        }
    ),
]
Question = Annotated[
    str,
    _text(1000),
    _schema({"type": "string", "description": "recall: the question about the past, in full"}),
]
Scope = Annotated[
    str,
    _choice(ALL_SCOPES),
    _schema(
        {
            "type": "string",
            "enum": list(ALL_SCOPES),
            "description": "search: messages|summaries|both (default both); profile_history: "
            "profile|soul|constraint|fact|compaction (default all); profile_rollback: "
            "what to roll back",
        }
    ),
]
Mode = Annotated[
    str,
    _choice(SEARCH_MODES),
    _schema(
        {
            "type": "string",
            "enum": list(SEARCH_MODES),
            "description": "search: hybrid (default: ranked by words and, when embeddings are on, "
            "meaning), full_text (ranked words) or substring (the exact text, "
            "newest first)",
        }
    ),
]
Limit = Annotated[
    int,
    _integer(1, 50),
    _schema(
        {"type": "integer", "minimum": 1, "maximum": 50, "description": "maximum number of results"}
    ),
]
SummaryId = Annotated[
    str, _text(128), _schema({"type": "string", "description": "id of a summary, e.g. from search"})
]
DEFAULT_TOKEN_CAP = 4000
TokenCap = Annotated[
    int,
    _integer(100, 32000),
    _schema(
        {
            "type": "integer",
            "minimum": 100,
            "maximum": 32000,
            "description": f"expand: token budget (default {DEFAULT_TOKEN_CAP})",
        }
    ),
]
_CONTENT_SCHEMA = _schema(
    {
        "type": "string",
        "description": "the full new text (profile, soul or note); replaces the old one",
    }
)
Content = Annotated[str, _text(20_000), _CONTENT_SCHEMA]
ContentOrEmpty = Annotated[str, _text(20_000, allow_empty=True), _CONTENT_SCHEMA]
ConstraintId = Annotated[
    str,
    _text(64),
    _schema({"type": "string", "description": "constraint_remove: the constraint's id"}),
]
Version = Annotated[
    int,
    _integer(1, 2**53),
    _schema(
        {"type": "integer", "minimum": 1, "description": "profile_rollback: the version to restore"}
    ),
]
NoteName = Annotated[
    str, _text(200), _schema({"type": "string", "description": "note name (or alias)"})
]
NewName = Annotated[
    str, _text(200), _schema({"type": "string", "description": "note_rename: the new name"})
]
Alias = Annotated[
    str,
    _text(200),
    _schema({"type": "string", "description": "note_alias: another name for the note"}),
]
_DATE_FORMS = "YYYY-MM-DD (UTC), an ISO date and time, or 7d / 2w for that long ago"
Since = Annotated[
    datetime | None,
    _search_date(),
    _schema(
        {
            "type": "string",
            "description": f"search: only what was said from this date on: {_DATE_FORMS}",
        }
    ),
]
Before = Annotated[
    datetime | None,
    _search_date(),
    _schema(
        {
            "type": "string",
            "description": f"search: only what was said before this date: {_DATE_FORMS}",
        }
    ),
]
MessageId = Annotated[
    str, _text(64), _schema({"type": "string", "description": "id of a message, e.g. from search"})
]

Due = Annotated[
    str,
    _text(64),
    _schema(
        {
            "type": "string",
            "description": "followup_add: when, as ISO 8601 in the user's local time "
            "(2026-05-03T09:00; a date alone is 09:00)",
        }
    ),
]
SourceIds = Annotated[
    list[int],
    WithJsonSchema(
        {
            "type": "array",
            "items": {"type": "integer"},
            "description": "followup_add: ids of the messages that asked for it "
            "(default: the user's message of this turn)",
        }
    ),
]
FollowupId = Annotated[
    int,
    _integer(1, 2**53),
    _schema({"type": "integer", "description": "followup_dismiss: the follow-up's id"}),
]
Zone = Annotated[
    str,
    _text(64),
    _schema({"type": "string", "description": "timezone_set: IANA name, e.g. Europe/Berlin"}),
]


def _date(raw: Any, info: ValidationInfo) -> datetime:
    """A day (YYYY-MM-DD, read as its start in UTC) or a full ISO-8601 time."""
    name = info.field_name
    if isinstance(raw, str) and len(raw) <= 40:
        try:
            parsed = datetime.fromisoformat(raw.strip())
        except ValueError:
            parsed = None
        if parsed is not None:
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    raise refuse(f"{name} must be a date like 2026-03-01")


def _ids(raw: Any, info: ValidationInfo) -> tuple[int, ...]:
    name = info.field_name
    items = raw if isinstance(raw, list) else [raw]
    if len(items) > MAX_CITED:
        raise refuse(f"{name}: at most {MAX_CITED} message ids")
    out = []
    for item in items:
        if isinstance(item, str) and item.strip().isdecimal() and len(item.strip()) <= 18:
            item = int(item.strip())
        if isinstance(item, bool) or not isinstance(item, int) or item < 1:
            raise refuse(f"{name} must be a list of message ids (integers), e.g. [12, 40]")
        out.append(item)
    return tuple(out)


MAX_CITED = 20
FactKey = Annotated[
    str,
    _text(64),
    _schema(
        {
            "type": "string",
            "description": "fact_set/fact_retract/fact_merge: what the fact is about, a short "
            "stable label such as 'home city', 'employer', 'partner', 'diet'",
        }
    ),
]
FactValue = Annotated[
    str,
    _text(500),
    _schema({"type": "string", "description": "fact_set/fact_merge: the fact itself, short"}),
]
FactKeys = Annotated[
    tuple[str, ...],
    BeforeValidator(
        lambda raw, info: (
            tuple(raw)
            if isinstance(raw, list)
            and 0 < len(raw) <= 20
            and all(isinstance(k, str) and k.strip() and len(k) <= 64 for k in raw)
            else _refuse_keys()
        )
    ),
    _schema(
        {
            "type": "array",
            "items": {"type": "string"},
            "description": "fact_merge: the keys whose facts the new one replaces",
        }
    ),
]
MessageIds = Annotated[
    tuple[int, ...],
    BeforeValidator(_ids),
    _schema(
        {
            "type": "array",
            "items": {"type": "integer"},
            "description": "fact_set/fact_retract/fact_merge: ids of the messages that say it "
            "(of this conversation, or returned by search); default: the user's latest message",
        }
    ),
]
Day = Annotated[
    datetime,
    BeforeValidator(_date),
    _schema(
        {
            "type": "string",
            "description": "a date, YYYY-MM-DD. fact_list as_of: the facts true then; "
            "fact_set valid_from: when it became true, if the user said so",
        }
    ),
]
Topic = Annotated[
    str,
    _text(200),
    _schema({"type": "string", "description": "fact_list: only facts about this (key or value)"}),
]


def _refuse_keys() -> Any:
    raise refuse("keys must be a list of 1 to 20 fact keys")


def parameter_schemas(model: type[BaseModel]) -> dict[str, dict[str, Any]]:
    """Each parameter's JSON schema as the model reads it: pydantic's field titles and
    defaults left out (the descriptions say what the defaults are), keys in reading order
    (pydantic sorts them)."""
    properties = model.model_json_schema()["properties"]
    return {
        name: {
            k: schema[k]
            for k in sorted(schema, key=_reading_order)
            if k not in ("title", "default")
        }
        for name, schema in properties.items()
    }


def _reading_order(key: str) -> int:
    return _KEY_ORDER.index(key) if key in _KEY_ORDER else len(_KEY_ORDER) - 1


_KEY_ORDER = ("type", "enum", "minimum", "maximum", "description")
