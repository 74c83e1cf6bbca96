"""Plain data types of the memory contract (memory/contract/capabilities.py).

Everything here is a dataclass or an enum: no I/O, no behaviour beyond conversions.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, overload


def utcnow() -> datetime:
    """Timezone-aware UTC now: the databases reject naive datetimes."""
    return datetime.now(UTC)


@overload
def as_utc(value: datetime) -> datetime: ...
@overload
def as_utc(value: None) -> None: ...
def as_utc(value: datetime | None) -> datetime | None:
    """`value` as an aware UTC datetime (None stays None). Everything is stored in UTC,
    but SQLite hands datetimes back naive: a naive value is read as UTC."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


@overload
def iso_utc(value: datetime) -> str: ...
@overload
def iso_utc(value: None) -> None: ...
def iso_utc(value: datetime | None) -> str | None:
    """`value` as ISO-8601 text in UTC, with its offset (None stays None)."""
    return None if value is None else as_utc(value).isoformat()


def minute_utc(value: datetime | None) -> str:
    """`value` to the minute for people, `2026-11-26 14:05 UTC` ("?" for None)."""
    return "?" if value is None else as_utc(value).strftime("%Y-%m-%d %H:%M UTC")


# Separates a conversation's base id from its generation in a stored session id.
GENERATION_SEP = "#"


def session_id(base_id: str, generation: int) -> str:
    """The stored id of `generation` of the conversation `base_id`: the base id itself
    for generation 0, `<base>#<n>` for the sessions each `/new` starts. The one place
    ids are built; `parse_session_id` reads them back. Raises ValueError for an id that
    would not read back as (`base_id`, `generation`): a negative generation, an empty
    base past generation 0, or a base that itself ends like a generation (`chat#2`)."""
    if generation < 0:
        raise ValueError(f"a session generation is 0 or more, not {generation}")
    stored = base_id if generation == 0 else f"{base_id}{GENERATION_SEP}{generation}"
    if parse_session_id(stored) != (base_id, generation):
        raise ValueError(
            f"{base_id!r} cannot be the base session id of generation "
            f"{generation}: it would read back as another session's id"
        )
    return stored


def parse_session_id(stored_id: str) -> tuple[str, int]:
    """(base id, generation) of a stored session id: the inverse of `session_id`. Only
    the form `session_id` writes counts as a generation (ASCII digits, no leading zero,
    1 or more); any other id is a base id, generation 0."""
    head, sep, tail = stored_id.rpartition(GENERATION_SEP)
    if sep and head and tail.isascii() and tail.isdigit() and tail[0] != "0":
        return head, int(tail)
    return stored_id, 0


@dataclass(frozen=True)
class Session:
    """Identifies one conversation. `user_id` is the memory scope: a Telegram user in a
    private chat, the group's chat id in a group.

    `id` is the stored id, which providers key on; `generation` is read from it once,
    here (`parse_session_id`): 0 for the base session, n after n `/new`s. Build another
    generation's session with `at_generation`, never by editing the id."""

    id: str
    agent_id: str = "default"
    user_id: int = 0
    channel: str = "cli"
    # Follows from `id`, so it is left out of equality, hashing and repr (as before).
    generation: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "generation", parse_session_id(self.id)[1])

    @property
    def base_id(self) -> str:
        """The id of the conversation's base session (generation 0)."""
        return parse_session_id(self.id)[0]

    def at_generation(self, generation: int) -> Session:
        """This conversation's session of `generation` (same agent, user and channel)."""
        return replace(self, id=session_id(self.base_id, generation))

    def base(self) -> Session:
        """The base session (generation 0) of this conversation."""
        return self if self.generation == 0 else replace(self, id=self.base_id)


@dataclass(frozen=True)
class ToolCall:
    """One function call requested by the assistant; `arguments` is the raw JSON text."""

    id: str
    name: str
    arguments: str = "{}"


class Role(enum.StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@dataclass(frozen=True)
class Origin:
    """Where a stored message came from in its channel, so people can open the original
    (memory/actions/origins.py): Telegram's chat id, message id and forum topic (thread) id."""

    channel: str
    chat_id: int
    message_id: int
    thread_id: int | None = None
    # Who wrote it, where one memory holds several people's words (a group member's
    # user id): what `/memory forget mine` finds (memory/consent/).
    sender_id: int | None = None


@dataclass
class Message:
    """A chat message as stored and as sent to an OpenAI-compatible model.

    Assistant messages may carry `tool_calls`; tool messages carry `tool_call_id`
    (and `name`, the tool's name). `reasoning` holds model reasoning text when a
    provider returns it; it is stored but never sent back to the model. `origin`: where
    a channel received it (stored by `memory.storage.history` in the append's transaction; not
    part of the message's equality, and not loaded back with the history).
    """

    role: str
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: str | None = None
    created_at: datetime = field(default_factory=utcnow)
    origin: Origin | None = field(default=None, compare=False, repr=False)

    def to_openai(self) -> dict[str, Any]:
        """The message as a Chat Completions `messages[]` entry."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.tool_calls
            ]
            if not self.content:
                out["content"] = None
        if self.role == Role.TOOL:
            # `name` stays in storage only: strict OpenAI-compatible servers reject it here.
            out["tool_call_id"] = self.tool_call_id or ""
        return out

    def text(self) -> str:
        """Searchable / countable text: content plus tool call names and arguments."""
        if not self.tool_calls:
            return self.content
        calls = " ".join(f"{c.name}({c.arguments})" for c in self.tool_calls)
        return f"{self.content} {calls}".strip()


@dataclass
class SessionStats:
    message_count: int = 0
    token_count: int = 0
    summary_count: int = 0
    context_tokens: int = 0
    oldest_at: datetime | None = None
    newest_at: datetime | None = None


class CompactionMode(enum.StrEnum):
    INCREMENTAL = "incremental"
    FULL = "full"


@dataclass
class CompactionResult:
    leaf_summaries_created: int = 0
    condensed_summaries_created: int = 0
    messages_compacted: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    duration_s: float = 0.0
    # Providers that produce one readable summary (simple) put it here for /compact.
    summary: str = ""

    @property
    def changed(self) -> bool:
        return bool(
            self.leaf_summaries_created
            or self.condensed_summaries_created
            or self.messages_compacted
        )


class SearchScope(enum.StrEnum):
    BOTH = "both"
    MESSAGES = "messages"
    SUMMARIES = "summaries"


class SearchMode(enum.StrEnum):
    SUBSTRING = "substring"  # the text literally, newest first
    FULL_TEXT = "full_text"  # BM25 over any of the query's words
    HYBRID = "hybrid"  # full_text fused with embedding similarity (full_text without)


@dataclass
class SearchQuery:
    text: str
    scope: SearchScope = SearchScope.BOTH
    limit: int = 20
    mode: SearchMode = SearchMode.FULL_TEXT
    # Asked while answering the session's latest user message (the model's memory tool,
    # delegated recall): that message and everything after it in the session's
    # conversation, the turn in progress, are not hits, so a question never finds itself.
    in_turn: bool = False
    # A date range: hits from `since` (inclusive) to `before` (exclusive), each optional;
    # naive datetimes are UTC (memory/search/window.py says what "from" means per source).
    since: datetime | None = None
    before: datetime | None = None


@dataclass
class SearchResult:
    source_type: str  # "message" | "summary" | "note" | "archive"
    source_id: str
    content: str  # snippet, at most ~500 characters
    score: float = 0.0
    timestamp: datetime | None = None
    session_id: str = ""  # the conversation it came from, when known
    # What found it: "words" (lexical), "meaning" (embeddings), "substring"
    signals: tuple[str, ...] = ()


@dataclass
class DescribeResult:
    summary_id: str
    kind: str  # "leaf" | "condensed"
    depth: int
    content: str
    earliest_at: datetime | None
    latest_at: datetime | None
    descendant_count: int
    token_count: int = 0
    # Decided semantics: parents contain this summary, children are what it was built from.
    parent_ids: list[str] = field(default_factory=list)
    child_ids: list[str] = field(default_factory=list)


@dataclass
class ExpandMessage:
    message_id: str
    seq: int
    role: str
    content: str
    token_count: int
    created_at: datetime | None = None


@dataclass
class ExpandChild:
    summary_id: str
    kind: str
    depth: int
    content: str
    token_count: int


@dataclass
class ExpandResult:
    summary_id: str
    messages: list[ExpandMessage] = field(default_factory=list)
    children: list[ExpandChild] = field(default_factory=list)
    truncated: bool = False  # True when token_cap cut the list short


@dataclass
class SessionInfo:
    id: str
    agent_id: str = "default"
    user_id: int = 0
    channel: str = "cli"
    title: str = ""
    created_at: datetime | None = None
    last_active: datetime | None = None
    archived: bool = False


@dataclass
class ListOptions:
    agent_id: str = ""  # empty = all
    user_id: int | None = None  # None = all
    include_archived: bool = False
    text: str = ""  # part of the session id or title (case-insensitive); empty = all
    limit: int = 0  # 0 = no limit
    offset: int = 0
    # "recent" (last active first), "oldest", "user" (by user id, then recent) or
    # "session" (by session id); a provider listing by itself may keep its own order.
    order: str = "recent"


class ChangeSource(enum.StrEnum):
    USER = "user"
    AGENT = "agent"
    REFLECT = "reflect"
    SYSTEM = "system"
    OPERATOR = "operator"  # a person at the web console (bot/web/)


class Scope(enum.StrEnum):
    PROFILE = "profile"
    SOUL = "soul"
    CONSTRAINT = "constraint"
    COMPACTION = "compaction"
    FACT = "fact"  # memory/contract/facts.py: before/after are JSON lists of facts


class Action(enum.StrEnum):
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    COMPACT = "compact"


@dataclass
class ChangeEntry:
    user_id: int
    agent_id: str
    scope: str
    action: str
    source: str
    session_id: str = ""
    version_before: int | None = None
    version_after: int | None = None
    before_text: str = ""
    after_text: str = ""
    id: int | None = None
    created_at: datetime | None = None


@dataclass
class ConstraintEntry:
    id: str
    text: str
    created_at: str  # ISO-8601 UTC

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "text": self.text, "created_at": self.created_at}


@dataclass
class SessionSnapshot:
    session_id: str
    user_id: int
    agent_id: str
    version: int
    updated_at: datetime | None = None


@dataclass
class SummarizeOptions:
    is_condensed: bool = False
    depth: int = 0
    aggressive: bool = False
    previous: str = ""  # previous summary, for continuity
    target_tokens: int = 0
    handoff: bool = False  # ask for the structured handoff summary (simple provider)


class NoteKind(enum.StrEnum):
    NOTE = "Note"
    ARCHIVE = "Archive"


@dataclass
class NoteEntry:
    id: int
    name: str
    content: str
    kind: NoteKind = NoteKind.NOTE
    aliases: list[str] = field(default_factory=list)
    created_at: datetime | None = None


@dataclass
class NoteHit:
    entry: NoteEntry
    score: float


# --- reading history back --------------------------------------------------------


@dataclass(frozen=True)
class SessionCounts:
    """One row of a session listing: the session and what it holds, counted in SQL."""

    info: SessionInfo
    message_count: int
    summary_count: int
    token_count: int = 0  # of its stored messages


@dataclass(frozen=True)
class AnsweredTurn:
    """A stored turn read back by where its user message came from (`answered_turn`):
    its messages, user message first, and the id of its final answer."""

    answer_id: str
    messages: list[Message]


@dataclass(frozen=True)
class FoundMessage:
    """One stored message and the conversation it belongs to (`read_message`), with
    where it came from when its channel said (`Message.origin`)."""

    session: SessionInfo
    seq: int
    message: Message
    origin: Origin | None = None


# --- forgetting (memory/storage/forgetting.py) -----------------------------------


@dataclass(frozen=True)
class Owner:
    """Whose memory: the scope a forget never leaves."""

    user_id: int
    agent_id: str


@dataclass
class Dependents:
    """What a provider derived from messages about to be forgotten."""

    summaries: int = 0  # summaries to rebuild or remove (lcm) / archives (simple)
    quoting_notes: list[str] = field(default_factory=list)  # notes that quote them
    # Profile, soul or rules that quote them: the user's or reflect's own words, shown
    # (a forget does not rewrite them; the person decides).
    quoting_stores: list[str] = field(default_factory=list)
    # Facts resting on them alone ("home city: Berlin"): the forget removes them, and
    # what they had superseded is current again (memory/facts/forgetting.py).
    facts: list[str] = field(default_factory=list)
    # Facts they alone retracted ("diet: vegetarian"): the retraction never happened, so
    # the forget makes them current again.
    facts_back: list[str] = field(default_factory=list)


@dataclass
class ForgetReport:
    messages: int = 0
    summaries_rebuilt: int = 0
    summaries_removed: int = 0
    quoting_notes: list[str] = field(default_factory=list)


@dataclass
class ErasureReport:
    sessions: int = 0
    messages: int = 0
    summaries: int = 0
    notes: int = 0
    changelog_rows: int = 0
    extra: dict[str, int] = field(default_factory=dict)  # front-end rows (Telegram)

    def describe(self) -> str:
        pieces = [
            f"{self.sessions} session(s)",
            f"{self.messages} message(s)",
            f"{self.summaries} summary/archive(s)",
            f"{self.notes} note(s)",
            f"{self.changelog_rows} changelog row(s)",
        ]
        pieces += [f"{n} {what}" for what, n in self.extra.items() if n]
        return ", ".join(pieces)
