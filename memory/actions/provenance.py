"""Why the bot said what it said: the memory actions a turn used, what they returned, and
the sources its answer cites.

Read back from the stored turn, not kept apart: every turn appends its assistant tool
calls (the action and its JSON arguments) and the tool results (the text the model read,
which names each item it returned at the start of a line: `[message 12]` in a search,
`#3 user … [12]:` in an expansion, `Sources: message 12` after a recall), so `/memory
why` works for any stored turn, after restarts, on every provider on `memory.storage.history`,
with no table of its own. A result line is written by the memory tool, never by a
person, except where a stored message's own text follows on it; an id read from there
is still only ever shown after the provider finds it in the caller's scope.

The answer's sources (`cited`): ids the final answer cites (memory/actions/citations.py) that
the memory tool returned in this same turn, each looked up again through the provider
for the caller's session (`read_message`, `describe`, `note_get`); anything else is
dropped from the text and never shown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from memory.actions.citations import cite
from memory.contract.capabilities import (
    AnswerOrigins,
    Explorer,
    MessageReader,
    NoteStore,
    Provider,
    SessionManager,
)
from memory.contract.errors import ContractError
from memory.contract.tracing import capability, unwrap
from memory.contract.types import Message, Origin, Session
from memory.storage.forgetting import first_words

TOOL_NAME = (
    "memory"  # memory.actions.tool.TOOL_NAME (importing memory.actions.tool here would be a cycle)
)
WORDS = 12  # of a cited message, when it cannot be linked or quoted

_HIT = re.compile(r"^\[(message|summary|archive|note) ([^\]\s]+)\]", re.MULTILINE)
_CHILD = re.compile(r"^\[([^\]\s]+)\] (?:leaf|condensed)\b", re.MULTILINE)
_EXPANDED = re.compile(r"^#\d+ \w+[^\[\n]*\[([^\]\s]+)\]:", re.MULTILINE)
_DESCRIBED = re.compile(r"^summary (\S+): ")
_RECALLED = re.compile(r"\b(message|summary|archive|note) ([^\s,()]+)")
# fact_list's lines end with the facts' sources (memory/actions/tool_results.py facts).
_SOURCES = re.compile(r"; sources: (message \d+(?:, message \d+)*)$", re.MULTILINE)
_ID = re.compile(r"message (\d+)")
_ASKED = {
    "fact_list": "topic",
    "search": "text",
    "recall": "question",
    "describe": "summary_id",
    "expand": "summary_id",
    "followup_add": "text",
}


@dataclass(frozen=True)
class Ref:
    kind: str  # message | summary | archive | note
    id: str


@dataclass
class Use:
    """One memory tool call of a turn: the action, what it was asked, what it returned."""

    action: str
    asked: str = ""
    returned: list[Ref] = field(default_factory=list)
    failed: bool = False


def last_turn(history: Sequence[Message]) -> list[Message]:
    """The messages of the newest turn: from its user message on."""
    for i in range(len(history) - 1, -1, -1):
        if history[i].role == "user":
            return list(history[i:])
    return []


def shown_answer(turn: Sequence[Message]) -> str:
    """The answer a turn showed (bot/model/tool_loop.py): what the model wrote beside its tool
    calls, then its final text (the turn's last message); a part the final text repeats
    is left out, so nothing shows twice."""
    final = turn[-1].content if turn else ""
    said = [
        m.content.strip()
        for m in turn[:-1]
        if m.role == "assistant" and m.tool_calls and m.content.strip()
    ]
    earlier = [part for part in said if part not in final]
    return "\n\n".join([*earlier, final]) if earlier else final


def uses(turn: Sequence[Message]) -> list[Use]:
    """The memory tool calls in `turn`, in order, with what each returned."""
    results = {m.tool_call_id: m.content for m in turn if m.role == "tool" and m.tool_call_id}
    out: list[Use] = []
    for msg in turn:
        for call in msg.tool_calls if msg.role == "assistant" else ():
            if call.name != TOOL_NAME:
                continue
            args = _arguments(call.arguments)
            action = str(args.get("action") or "?")[:40]
            asked = str(args.get(_ASKED.get(action, ""), "") or "")
            result = results.get(call.id, "")
            failed = result.startswith(("error:", "not found"))
            use = Use(action, asked, [] if failed else returned_refs(action, result), failed)
            out.append(use)
    return out


def returned(turn_uses: Sequence[Use]) -> dict[str, Ref]:
    """Every item the turn's memory calls returned, by id."""
    return {ref.id: ref for use in turn_uses for ref in use.returned}


def _arguments(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def returned_refs(action: str, result: str) -> list[Ref]:
    refs: list[Ref] = []
    if action == "search":
        refs = [Ref(kind, item) for kind, item in _HIT.findall(result)]
    elif action == "expand":
        refs = [Ref("summary", s) for s in _CHILD.findall(result)]
        refs += [Ref("message", m) for m in _EXPANDED.findall(result)]
    elif action == "describe":
        found = _DESCRIBED.match(result)
        refs = [Ref("summary", found.group(1))] if found else []
    elif action == "fact_list":
        refs = [Ref("message", m) for line in _SOURCES.findall(result) for m in _ID.findall(line)]
    elif action == "recall":
        last = result.rstrip().rpartition("\n")[2]
        if last.startswith("Sources: "):
            refs = [Ref(kind, item) for kind, item in _RECALLED.findall(last)]
    return list(dict.fromkeys(refs))


# --- the answer's sources -----------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """A cited item the caller may see: its number in the answer, and for a message its
    date, first words and origin (memory/actions/origins.py)."""

    number: int
    ref: Ref
    at: datetime | None = None
    words: str = ""
    origin: Origin | None = None

    def plain(self) -> str:
        date = f" {self.at:%Y-%m-%d}" if self.at else ""
        words = f" “{self.words}”" if self.words else ""
        return f"[{self.number}] {self.ref.kind} {self.ref.id}{date}{words}"


@dataclass
class Cited:
    text: str  # the answer, its citations numbered, foreign ids dropped
    sources: list[Source] = field(default_factory=list)


async def cited(
    provider: Provider, session: Session, turn: Sequence[Message], answer: str
) -> Cited:
    """`answer` with only the citations of items this turn's memory calls returned, each
    found again in `session`'s scope (module doc); numbered in order of citation."""
    known = returned(uses(turn))
    text, refs = cite(answer, known, numbered=True, named=False)
    if not refs:
        return Cited(text)
    found: dict[str, Source] = {}
    for ref in refs:
        source = await _lookup(provider, session, ref)
        if source is not None:
            found[ref.id] = source
    if len(found) < len(refs):  # one is gone or out of scope: cite only what was found
        text, refs = cite(
            answer, {k: v for k, v in known.items() if k in found}, numbered=True, named=False
        )
    return Cited(text, [replace(found[r.id], number=n) for n, r in enumerate(refs, 1)])


async def _lookup(provider: Provider, session: Session, ref: Ref) -> Source | None:
    try:
        reader = capability(provider, MessageReader)
        if ref.kind == "message" and reader is not None:
            found = await reader.read_message(session, ref.id)
            msg = found.message
            return Source(0, ref, msg.created_at, first_words(msg.content, WORDS), found.origin)
        explorer = capability(provider, Explorer)
        if ref.kind == "summary" and explorer is not None:
            d = await explorer.describe(ref.id, session)
            return Source(0, ref, d.latest_at)
        notes = capability(provider, NoteStore)
        if ref.kind in ("archive", "note") and notes is not None:
            entry = await notes.note_get(session, ref.id)
            return Source(0, ref, entry.created_at)
    except ContractError:  # NotFound among them: not the caller's, or gone
        return None
    return None


async def answered(provider: Provider, session: Session, asked: Origin) -> Cited | None:
    """The stored answer to the message received from `asked` (memory/actions/origins.py) with
    its sources found again from its turn, as `cited` found them when it was first
    shown: for an answer sent again later (after a restart). None when the provider
    cannot read a turn back by origin or the message has no stored answer."""
    origins = capability(provider, AnswerOrigins)
    if origins is None:
        return None
    turn = await origins.answered_turn(session, asked)
    if turn is None:
        return None
    return await cited(provider, session, turn.messages, shown_answer(turn.messages))


def plain_sources(sources: Sequence[Source]) -> str:
    """The sources as plain text lines, for a channel without links (the terminal)."""
    if not sources:
        return ""
    return "Sources:\n" + "\n".join(s.plain() for s in sources)


# --- /memory why --------------------------------------------------------------------

RECENT = 200  # messages read back for the newest turn before reading the whole history


async def _newest_turn(provider: Provider, session: Session) -> list[Message]:
    """The newest turn's messages; from the newest `RECENT` when the provider reads those
    alone (memory.storage.history's `load_recent`), so a long conversation is not read whole."""
    recent = getattr(unwrap(provider), "load_recent", None)
    if recent is not None:
        newest: list[Message] = await recent(session.id, RECENT)
        turn = last_turn(newest)
        if turn or len(newest) < RECENT:
            return turn
    sessions = capability(provider, SessionManager)
    if sessions is None:  # `why` is declared on session managers only
        raise ContractError(f"the {provider.name} memory provider cannot read its turns back")
    return last_turn(await sessions.load_history(session.id))


@dataclass
class Why:
    """The newest answer of a session and what its memory calls used and returned (only
    ids found in the caller's scope), and what it cited."""

    answered_at: datetime | None = None
    answer: str = ""
    calls: list[Use] = field(default_factory=list)
    cited: list[Ref] = field(default_factory=list)


async def why(provider: Provider, session: Session) -> Why | None:
    """What the session's newest answer rests on; None when it has no answer yet (no
    turn, or the newest turn failed before answering)."""
    return await explain(provider, session, await _newest_turn(provider, session))


async def explain(provider: Provider, session: Session, turn: Sequence[Message]) -> Why | None:
    """What the answer ending `turn` (its messages from the user's on) rests on; None
    when the turn ends in no answer. Any stored turn, not only the newest: the web
    console's turn page asks it of each."""
    final = turn[-1] if turn else None
    if final is None or final.role != "assistant" or final.tool_calls:
        return None
    calls = uses(turn)
    seen: dict[str, bool] = {}
    for ref in returned(calls).values():
        seen[ref.id] = await _lookup(provider, session, ref) is not None
    for use in calls:
        use.returned = [r for r in use.returned if seen.get(r.id)]
    _, refs = cite(
        final.content, {k: v for k, v in returned(calls).items() if seen.get(k)}, named=False
    )
    return Why(final.created_at, final.content, calls, refs)
