"""The schema of a session export (`mnemo memory export|import`), checked whole before
an import writes anything.

`validate_document` takes the parsed JSON and returns a `SessionDocument`, or raises
`InvalidArgument` with one line naming the first problem by its JSON path
(`.messages[3].seq: expected an integer, got '7'`). Everything the tables would refuse
with a raw database error, or take and then fail on later, is refused here:

- types exactly (no coercion: "7" is not an integer), no missing and no unknown keys;
- integers within their column (PostgreSQL BIGINT/INTEGER), strings within their
  VARCHAR(n), text that both databases can store (no NUL, no lone surrogate);
- roles and part kinds the history knows; messages numbered 1, 2, 3... in order, as the
  history writes them; timestamps with their UTC offset;
- the session's owner consistent: the snapshot belongs to the session's user and agent,
  and a session id the bot wrote (`<agent>:<channel>:<user or chat id>...`) names the
  session's user (an edited user id would leave the real user's every message refused);
- the memory's constraints a JSON list the store can read.

A provider's own section (`provider.data`) is checked by the provider's schema
(`OverlaySchema`, plugins/*/export_schema.py), given the message seqs to check its
references against. JSON nested deeper than the document can be is refused by the parser
(`load_document`), never by a RecursionError.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    BinaryIO,
    Literal,
    TypeVar,
)

import sqlalchemy as sa
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError

from memory.contract.errors import InvalidArgument
from memory.contract.facts import MAX_VALUE_CHARS, FactState
from memory.contract.maintenance import OverlaySchema as OverlaySchema
from memory.contract.types import ChangeSource, Role
from memory.facts.models import facts
from memory.followups.store import followups
from memory.followups.store import prefs as followup_prefs
from memory.storage.history import PartKind, conversations, origins
from memory.storage.stores import changelog_table, snapshot_table

if TYPE_CHECKING:
    from memory.contract.capabilities import Provider

FORMAT = "mnemo.session-export"
VERSION = 1

INT64 = 2**63 - 1
INT32 = 2**31 - 1
# Deeper than any export (the provider's data included) nests: a document nested past
# this is refused as such, before Python's recursion limit is anywhere near.
MAX_DEPTH = 64
# An import reads the whole document into memory (several times its size once parsed).
# An estimate, not a measurement: at a few hundred bytes a message (with its parts and
# the provider's summaries), 256 MB holds several hundred thousand messages.
MAX_DOCUMENT_BYTES = 256 * 2**20
_READ_CHUNK = 2**20
_WHITESPACE = b" \t\r\n"
_JSON_STARTS = [bytes([c]) for c in b'{["-0123456789tfn']  # how a JSON text can begin


# --- field types ----------------------------------------------------------------------


def _storable(value: str) -> str:
    if "\x00" in value:
        raise PydanticCustomError("text", "contains a NUL character, which cannot be stored")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise PydanticCustomError(
            "text", "contains a lone UTF-16 surrogate, which cannot be stored"
        ) from None
    return value


def _timestamp(value: Any) -> Any:
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            return parsed
    raise PydanticCustomError("timestamp", "expected an ISO-8601 timestamp with offset")


Text = Annotated[str, AfterValidator(_storable)]
Timestamp = Annotated[datetime, BeforeValidator(_timestamp)]
BigInt = Annotated[int, Field(ge=-INT64 - 1, le=INT64)]
Count = Annotated[int, Field(ge=0, le=INT32)]
Version = Annotated[int, Field(ge=0, le=INT64)]


def bounded(column: sa.Column[Any]) -> Any:
    """Text that fits `column`'s VARCHAR(n), counted in characters as PostgreSQL does
    (SQLite would keep a longer one, PostgreSQL refuse it with a raw DataError)."""
    limit = column.type.length  # type: ignore[attr-defined]

    def check(value: str) -> str:
        if len(value) > limit:
            raise PydanticCustomError(
                "too_long",
                "{n} characters, longer than the limit of {limit}",
                {"n": len(value), "limit": limit},
            )
        return value

    return Annotated[str, AfterValidator(_storable), AfterValidator(check)]


class Strict(BaseModel):
    """Exactly the keys and types the exporter writes."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


# --- the document ---------------------------------------------------------------------


class SessionRecord(Strict):
    id: bounded(conversations.c.session_id)  # type: ignore[valid-type]
    agent_id: bounded(conversations.c.agent_id)  # type: ignore[valid-type]
    user_id: BigInt
    channel: bounded(conversations.c.channel)  # type: ignore[valid-type]
    title: bounded(conversations.c.title)  # type: ignore[valid-type]
    archived: bool
    created_at: Timestamp
    updated_at: Timestamp

    @model_validator(mode="after")
    def _owner(self) -> SessionRecord:
        if not self.id:
            raise PydanticCustomError("owner", "the session id must not be empty")
        # The bot's ids: `<agent>:<channel>:<user or chat id>`, then `:<topic>` or
        # `#<generation>`. The bot finds a chat's session by that id and then refuses
        # every message whose user is not the session's: the two must agree.
        prefix = f"{self.agent_id}:{self.channel}:"
        if self.id.startswith(prefix):
            named = re.match(r"-?\d+(?=$|[:#])", self.id[len(prefix) :])
            if named is not None and int(named.group()) != self.user_id:
                raise PydanticCustomError(
                    "owner",
                    "the session id names user {named}, but user_id is {user}",
                    {"named": int(named.group()), "user": self.user_id},
                )
        return self


class PartRecord(Strict):
    ordinal: Count
    kind: Literal[tuple(k.value for k in PartKind)]  # type: ignore[valid-type]
    tool_call_id: Text | None
    tool_name: Text | None
    content: Text


class OriginRecord(Strict):
    """Where the message came from (memory/actions/origins.py)."""

    channel: bounded(origins.c.channel)  # type: ignore[valid-type]
    chat_id: BigInt
    message_id: BigInt
    thread_id: BigInt | None
    # Who wrote it, in a group (core 0013_group_consent); only written when known, so
    # documents of other messages read as before.
    sender_id: BigInt | None = None


class MessageRecord(Strict):
    seq: BigInt
    role: Literal[tuple(r.value for r in Role)]  # type: ignore[valid-type]
    content: Text
    token_count: Count
    created_at: Timestamp
    parts: list[PartRecord]
    origin: OriginRecord | None = None  # only written for a message that has one

    @model_validator(mode="after")
    def _ordinals(self) -> MessageRecord:
        ordinals = [p.ordinal for p in self.parts]
        if len(set(ordinals)) != len(ordinals):
            raise PydanticCustomError("duplicate", "two parts have the same ordinal")
        return self


class SnapshotRecord(Strict):
    user_id: BigInt
    agent_id: bounded(snapshot_table.c.agent_id)  # type: ignore[valid-type]
    version: Version
    updated_at: Timestamp


def _constraints(value: str) -> str:
    try:
        items = json.loads(value) if value.strip() else []
    except ValueError:
        items = None
    if not isinstance(items, list) or not all(
        isinstance(i, dict) and {"id", "text", "created_at"} <= i.keys() for i in items
    ):
        raise PydanticCustomError(
            "constraints", "expected a JSON list of constraints (id, text, created_at)"
        )
    return value


class StateRecord(Strict):
    profile: Text
    soul: Text
    constraints: Annotated[str, AfterValidator(_storable), AfterValidator(_constraints)]
    version: Version
    updated_at: Timestamp


class ChangeRecord(Strict):
    session_id: bounded(changelog_table.c.session_id)  # type: ignore[valid-type]
    scope: bounded(changelog_table.c.scope)  # type: ignore[valid-type]
    action: bounded(changelog_table.c.action)  # type: ignore[valid-type]
    source: Literal[tuple(s.value for s in ChangeSource)]  # type: ignore[valid-type]
    version_before: Version | None
    version_after: Version | None
    before_text: Text
    after_text: Text
    created_at: Timestamp


class EvidenceRecord(Strict):
    """A message supporting a fact, by its conversation and seq (ids are the database's)."""

    session_id: bounded(conversations.c.session_id)  # type: ignore[valid-type]
    seq: BigInt
    # What the message does for the fact (memory/facts/models.py); absent: support.
    role: Literal["support", "retraction"] = "support"


class FactRecord(Strict):
    id: bounded(facts.c.id)  # type: ignore[valid-type]
    key: bounded(facts.c.key)  # type: ignore[valid-type]
    value: Annotated[Text, Field(min_length=1, max_length=MAX_VALUE_CHARS)]
    state: Literal[tuple(s.value for s in FactState)]  # type: ignore[valid-type]
    valid_from: Timestamp
    valid_to: Timestamp | None
    version_from: Version
    version_to: Version | None
    source: Literal[tuple(s.value for s in ChangeSource)]  # type: ignore[valid-type]
    session_id: bounded(facts.c.session_id)  # type: ignore[valid-type]
    replaced_by: bounded(facts.c.replaced_by) | None  # type: ignore[valid-type]
    created_at: Timestamp
    evidence: list[EvidenceRecord]


class UserMemory(Strict):
    state: StateRecord | None
    changelog: list[ChangeRecord]
    # The memory's facts (core revision 0015_facts); absent in older exports.
    facts: list[FactRecord] = []

    @model_validator(mode="after")
    def _fact_ids(self) -> UserMemory:
        ids = [f.id for f in self.facts]
        if len(set(ids)) != len(ids):
            raise PydanticCustomError("duplicate", "two facts have the same id")
        current = [f.key for f in self.facts if f.state == "current"]
        if len(set(current)) != len(current):
            raise PydanticCustomError("duplicate", "two current facts have the same key")
        return self


class FollowupRecord(Strict):
    """A follow-up made in the session (memory/followups/store.py); its sources by seq."""

    due_at: Timestamp
    timezone: bounded(followups.c.timezone)  # type: ignore[valid-type]
    text: Text
    state: Literal["pending", "snoozed", "sent", "dismissed", "dropped"]
    created_by: bounded(followups.c.created_by)  # type: ignore[valid-type]
    proactive: bool
    channel: bounded(followups.c.channel)  # type: ignore[valid-type]
    chat_id: BigInt | None
    thread_id: BigInt | None
    quote_message_id: BigInt | None
    source_seqs: list[Count]


class FollowupPrefsRecord(Strict):
    timezone: bounded(followup_prefs.c.timezone) | None  # type: ignore[valid-type]
    quiet: bounded(followup_prefs.c.quiet) | None  # type: ignore[valid-type]
    proactive: bool


class FollowupsSection(Strict):
    items: list[FollowupRecord]
    prefs: FollowupPrefsRecord | None


class ProviderSection(Strict):
    name: Text
    data: dict[str, Any]


class SessionDocument(Strict):
    format: Literal["mnemo.session-export"]
    version: Literal[1]
    session: SessionRecord
    messages: list[MessageRecord]
    snapshot: SnapshotRecord | None
    user_memory: UserMemory
    provider: ProviderSection | None
    followups: FollowupsSection | None = None  # absent from exports before follow-ups

    @model_validator(mode="after")
    def _consistent(self) -> SessionDocument:
        seen: set[int] = set()
        for i, m in enumerate(self.messages):
            if m.seq in seen:
                raise refused_at(("messages", i, "seq"), f"{m.seq} appears twice")
            seen.add(m.seq)
            if m.seq != i + 1:
                raise refused_at(
                    ("messages", i, "seq"),
                    f"expected {i + 1} (messages are numbered 1, 2, 3... in order), got {m.seq}",
                )
        for i, item in enumerate(self.followups.items if self.followups else []):
            for seq in item.source_seqs:
                if seq not in seen:
                    raise refused_at(("followups", "items", i), f"cites no message {seq}")
        snap, s = self.snapshot, self.session
        if snap is not None and (snap.user_id, snap.agent_id) != (s.user_id, s.agent_id):
            raise refused_at(
                ("snapshot",),
                f"belongs to user {snap.user_id} agent {snap.agent_id!r}, not to the "
                f"session's user {s.user_id} agent {s.agent_id!r}",
            )
        return self


class Refused(ValueError):
    """A problem found by a cross-field validator: `line` is the path (relative to the
    part of the document being validated) and the message, as the user reads it."""

    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.line = line


def refused_at(loc: tuple[str | int, ...], message: str) -> Refused:
    return Refused(f"{_path(loc)}: {message}")


# --- providers ------------------------------------------------------------------------


def message_seqs(info: ValidationInfo) -> set[int]:
    """The document's message seqs, inside a provider schema's validator."""
    seqs: set[int] = (info.context or {}).get("seqs", set())
    return seqs


# --- entry points ---------------------------------------------------------------------


def read_document(stream: BinaryIO, limit: int = MAX_DOCUMENT_BYTES) -> Any:
    """The export `stream` holds, parsed (`load_document`); InvalidArgument (one line)
    for one over `limit` bytes, read no further (`/dev/zero` has no end), one that
    cannot be JSON (refused at its first byte), or is not UTF-8."""
    chunks: list[bytes] = []
    total, started = 0, False
    while chunk := stream.read(_READ_CHUNK):
        total += len(chunk)
        if total > limit:
            raise InvalidArgument(f"larger than {limit // 2**20} MB, more than an export holds")
        if not started and (head := chunk.lstrip(_WHITESPACE)):
            started = True
            if head[:1] not in _JSON_STARTS:
                raise InvalidArgument(f"not JSON: it starts with {head[:1]!r}")
        chunks.append(chunk)
    try:
        raw = b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"not UTF-8 text: byte {exc.start:,} ({exc.reason})") from None
    del chunks
    return load_document(raw)


def load_document(raw: str) -> Any:
    """Parse an export's JSON text; InvalidArgument (one line) for anything that is not
    JSON, or is nested deeper than an export is."""
    try:
        doc = json.loads(raw)
    except RecursionError:
        raise InvalidArgument(f"the JSON is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise InvalidArgument(f"not JSON: {exc}") from None
    if _depth(doc) > MAX_DEPTH:
        raise InvalidArgument(f"the JSON is nested deeper than {MAX_DEPTH} levels")
    return doc


def _depth(value: Any) -> int:
    """Nesting depth, without recursion (a hostile document may nest thousands deep)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_DEPTH:
            break
        if isinstance(node, dict):
            stack += [(v, depth + 1) for v in node.values()]
        elif isinstance(node, list):
            stack += [(v, depth + 1) for v in node]
    return deepest


def validate_document(doc: Any, provider: Provider | None = None) -> SessionDocument:
    """The document, checked whole (module doc); InvalidArgument naming the first problem.
    `provider`: the configured provider (its schema checks `provider.data`)."""
    if _depth(doc) > MAX_DEPTH:
        raise InvalidArgument(f"the JSON is nested deeper than {MAX_DEPTH} levels")
    if not isinstance(doc, dict):
        raise InvalidArgument(f"document: expected an object, got {_describe(doc)}")
    if doc.get("format") != FORMAT:
        raise InvalidArgument(
            f"not a mnemo session export (format is "
            f"{_describe(doc.get('format'))}, expected {FORMAT!r})"
        )
    if doc.get("version") != VERSION:
        raise InvalidArgument(
            f"export version {_describe(doc.get('version'))} is not "
            f"supported (this mnemo reads {VERSION})"
        )
    parsed = _validate(lambda: SessionDocument.model_validate(doc), "")
    overlay = parsed.provider
    if overlay is not None:
        configured = getattr(provider, "name", None)
        if overlay.name != configured:
            raise InvalidArgument(
                f"the export carries {overlay.name!r} provider data but the configured "
                f"provider is {configured or 'none'!r}; set memory.provider: "
                f"{overlay.name} to import it"
            )
        schema = _overlay_schema(provider)
        if schema is not None:
            seqs = {m.seq for m in parsed.messages}
            _validate(
                lambda: schema.overlay_model.model_validate(overlay.data, context={"seqs": seqs}),
                ".provider.data",
            )
    return parsed


def _overlay_schema(provider: Provider | None) -> OverlaySchema | None:
    from memory.contract.tracing import unwrap

    inner = unwrap(provider) if provider is not None else None
    return inner if isinstance(inner, OverlaySchema) else None


T = TypeVar("T")


def _validate(run: Callable[[], T], root: str) -> T:
    try:
        return run()
    except ValidationError as exc:
        raise InvalidArgument(_first_error(exc, root)) from None
    except Refused as exc:  # raised by a model validator, outside pydantic's wrapping
        raise InvalidArgument(f"{root}{exc.line}") from None


def _first_error(exc: ValidationError, root: str) -> str:
    err = exc.errors(include_url=False, include_context=True)[0]
    loc = tuple(err["loc"])
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, Refused):  # a cross-field check names its own place
        return f"{root}{cause.line}"
    return f"{root}{_path(loc) or ' document'}: {_message(err)}"


def _path(loc: tuple[Any, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)


_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "string_type": "a string",
    "bool_type": "true or false",
    "list_type": "a list",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "datetime_type": "an ISO-8601 timestamp with offset",
}


def _message(err: Any) -> str:
    kind, value = err["type"], err.get("input")
    if kind == "missing":
        return "missing"
    if kind == "extra_forbidden":
        return "unknown key (not in an export)"
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {_describe(value)}"
    if kind == "literal_error":
        return f"expected {err['ctx']['expected']}, got {_describe(value)}"
    if kind in ("less_than_equal", "greater_than_equal", "less_than", "greater_than"):
        return f"{_describe(value)} is out of range"
    if kind == "value_error" and isinstance((err.get("ctx") or {}).get("error"), Exception):
        return str(err["ctx"]["error"])
    return str(err["msg"])


def _describe(value: Any) -> str:
    """A short, safe rendering of a bad value: never the whole of a huge or deeply
    nested one (repr of either can fail)."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        digits = len(str(abs(value))) if abs(value) < 10**300 else None
        return str(value) if digits is not None and digits <= 20 else "a huge integer"
    if isinstance(value, str):
        shown = value[:40].encode("utf-8", "backslashreplace").decode("utf-8")
        return repr(shown) + ("..." if len(value) > 40 else "")
    return type(value).__name__
