"""Slash commands, channel-independent: text in, text out, so Telegram and the terminal
share them. Every answer fits one Telegram message (long listings are cut with a note).

Decisions:
- `session` may be a channel's base session or its live one: the live session is always
  resolved through `pool.current_session`, so `/new` rotation works the same everywhere.
- Writes from commands are tagged with change source `user` and advance the session's
  snapshot, so the next turn's system prompt shows them.
- `rollback` is operator-only (`is_admin`): it rewrites a whole memory scope, and in a group
  that scope belongs to every member. Everything else acts on the caller's own memory.
- Provider errors become one plain line; `NotFound` never says whether the id exists
  elsewhere (a summary id alone must not reveal another user's memory).
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from bot.llm import LLMError
from bot.pool import GENERATION_SEP, Pool, bind_session
from memory import snapshots
from memory.capabilities import (
    ChangelogReader,
    Compactor,
    ConstraintStore,
    Explorer,
    MessageReader,
    NoteStore,
    ProfileStore,
    Searcher,
    SessionManager,
    SessionSnapshotStore,
    VersionedProfileStore,
    capabilities_of,
)
from memory.context import with_change_source
from memory.errors import (
    CompactionIncomplete,
    InvalidArgument,
    MemoryError_,
    NotFound,
    StoreCorrupt,
    Unsupported,
)
from memory.sanitize import storable
from memory.stores import parse_constraints
from memory.summarizer import SummarizerError
from memory.tracing import unwrap
from memory.types import (
    ChangeEntry,
    ChangeSource,
    CompactionResult,
    Scope,
    SearchMode,
    SearchQuery,
    SearchResult,
    Session,
    minute_utc,
)

log = logging.getLogger(__name__)

# Telegram's limit is 4096 characters; leave room for a channel's own decoration.
MAX_REPLY = 3900
EXPAND_TOKEN_CAP = 800  # about 3200 characters: an expansion fits one message
SEARCH_LIMIT = 10
SEARCH_POOL = 200  # hits asked for, to count them; more are "200+"
HISTORY_LIMIT = 10

# Every command and what it does, once: /help lists them (all but /start, whose answer
# is an introduction followed by that list), and a channel with a command menu shows
# them there (Telegram's setMyCommands).
COMMANDS: tuple[tuple[str, str], ...] = (
    ("start", "introduction"),
    ("help", "list the commands"),
    ("new", "start a new conversation (the old one is archived; your memory stays)"),
    ("compact", "compact this conversation's history now"),
    ("memory", "what I remember; /memory help lists its sub-commands"),
)
HELP = "Commands:\n" + "\n".join(f"/{name} — {what}" for name, what in COMMANDS
                                  if name != "start")

MEMORY_USAGE: dict[str, str] = {
    "status": "/memory status — memory statistics of this conversation",
    "search": "/memory search <text> — search everything I remember of our conversations",
    "show": "/memory show <id> — a message found by search, or a summary and where it sits in the tree",
    "expand": "/memory expand <summary_id> — what a summary was built from",
    "profile": "/memory profile — what I know about you",
    "soul": "/memory soul — my personality as you have shaped it",
    "constraints": "/memory constraints — the rules you gave me",
    "constrain": "/memory constrain <text> — add a rule I must always follow",
    "unconstrain": "/memory unconstrain <id> — remove a rule",
    "history": "/memory history — recent changes to profile, soul and rules",
    "rollback": "/memory rollback <profile|soul|constraint> <version> — restore an earlier version (operator only)",
    "notes": "/memory notes [name] — list my notes and archives, or show one",
}
ADMIN_ONLY = frozenset({"rollback"})
ROLLBACK_SCOPES = {"profile": "profile", "soul": "soul", "constraint": "constraint",
                   "constraints": "constraint"}


def clip(text: str, limit: int = MAX_REPLY) -> str:
    """Cut `text` to `limit` characters at a line boundary, saying that it was cut."""
    if len(text) <= limit:
        return text
    note = "\n… (cut to fit one message)"
    head = text[: limit - len(note)]
    cut = head.rfind("\n")
    if cut > limit // 2:
        head = head[:cut]
    return head.rstrip() + note


def _listing(lines: list[str], header: str, limit: int = MAX_REPLY) -> str:
    """Header plus as many whole lines as fit, with a note of how many were left out."""
    out = [header]
    size = len(header)
    for i, line in enumerate(lines):
        rest = len(lines) - i
        note = f"… and {rest} more not shown"
        if size + 1 + len(line) + 1 + len(note) > limit:
            out.append(note)
            break
        out.append(line)
        size += 1 + len(line)
    return "\n".join(out)


def _one_line(text: str, width: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def command_parts(text: str) -> tuple[str, str]:
    """`/name@bot args` -> ("name", "args"). The command ends at any whitespace, a
    newline included (`/memory\nstatus` is /memory with "status")."""
    head, *rest = text.split(None, 1) or [""]
    name = head.lstrip("/").split("@", 1)[0].lower()
    return name, rest[0].strip() if rest else ""


def base_of(session: Session) -> Session:
    """The base session of a live one (its generation suffix removed)."""
    head, sep, tail = session.id.rpartition(GENERATION_SEP)
    if sep and head and tail.isdigit():
        return replace(session, id=head)
    return session


async def handle_command(pool: Pool, session: Session, name: str, args: str, *,
                         is_admin: bool, limit: int = MAX_REPLY) -> str:
    """Answer `/name args`, in at most `limit` characters (the channel's). Never raises
    for user or provider errors."""
    return clip(await _answer(pool, session, name, args, is_admin=is_admin), limit)


async def _answer(pool: Pool, session: Session, name: str, args: str, *,
                  is_admin: bool) -> str:
    command = name.strip().lstrip("/").split("@", 1)[0].lower()
    base = base_of(session)
    try:
        if command in ("start", "help"):
            return _start(pool) if command == "start" else HELP
        if command == "new":
            await pool.new_session(base)
            return ("Started a new conversation; the previous one is archived. "
                    "Your profile, rules and notes stay with you.")
        # Resolving the live session reads the database: inside the try, like the rest.
        if command == "compact":
            return await _compact(pool, await pool.current_session(base))
        if command == "memory":
            return await _memory(pool, await pool.current_session(base), args,
                                 is_admin=is_admin)
        return f"Unknown command /{command}.\n\n{HELP}"
    except NotFound:
        return "Not found."
    except (InvalidArgument, Unsupported) as exc:
        return str(exc) or "That request is not valid."
    except MemoryError_ as exc:
        return f"The memory store refused: {exc}"
    except Exception as exc:
        # The user gets a plain sentence; the exception and its traceback go to the log.
        log.exception("command /%s failed", command)
        return f"Sorry, /{command} failed: {failure_reason(exc)}; nothing was changed."


def failure_reason(exc: BaseException) -> str:
    """Why a command failed, in words a user understands (never an exception's name):
    the first cause along `__cause__`/`__context__` that can be named."""
    fallback = "something went wrong on my side"
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, LLMError):
            return cause.reason  # "the language model could not be reached", ...
        if isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
            return "the disk is full"
        if isinstance(cause, SQLAlchemyError):
            return "my memory store could not be reached"
        if isinstance(cause, SummarizerError):  # a deeper cause may say more
            fallback = "the language model gave no usable summary"
        cause = cause.__cause__ or cause.__context__
    return fallback


def _start(pool: Pool) -> str:
    return ("Hi! I'm mnemo: I remember our conversations, however long they get. "
            "Just write to me.\n\n" + HELP)


async def _compact(pool: Pool, session: Session) -> str:
    if not isinstance(pool.provider, Compactor):
        return f"The {pool.provider.name} memory provider does not compact conversations."
    try:
        result = await pool.compact(session)
    except CompactionIncomplete as exc:
        # Not "nothing was changed": the rounds done are kept, and the user should know
        # that trying again continues. The cause goes to the log, like any failure.
        log.warning("/compact of %s stopped part way", session.id, exc_info=exc)
        return clip("Compaction stopped part way: what it had done is kept, the rest "
                    f"failed ({failure_reason(exc.__cause__ or exc)}). "
                    + _compacted(exc.result) + " Send /compact again to finish.")
    if not result.changed:
        return (f"Nothing to compact: the conversation is short enough "
                f"({result.tokens_before} tokens in context).")
    text = _compacted(result)
    if result.summary.strip():
        text += "\n\nSummary:\n" + result.summary.strip()
    return clip(text)


def _compacted(result: CompactionResult) -> str:
    summaries = result.leaf_summaries_created + result.condensed_summaries_created
    return (f"Compacted {result.messages_compacted} messages into {summaries} "
            f"summar{'y' if summaries == 1 else 'ies'} "
            f"({result.leaf_summaries_created} leaf, {result.condensed_summaries_created} "
            f"condensed). Context: {result.tokens_before} → {result.tokens_after} tokens.")


def _usage(sub: str | None = None) -> str:
    if sub is not None:
        return "Usage: " + MEMORY_USAGE[sub]
    return "Usage:\n" + "\n".join(MEMORY_USAGE.values())


def _lacks(provider: Any, what: str) -> str:
    return f"The {provider.name} memory provider does not support {what}."


Handler = Callable[[Pool, Session, str], Awaitable[str]]


async def _memory(pool: Pool, session: Session, args: str, *, is_admin: bool) -> str:
    sub, rest = command_parts(args)
    if sub in ("", "help"):
        return _usage()
    handler = _MEMORY.get(sub)
    if handler is None:
        return f"Unknown sub-command {sub!r}.\n{_usage()}"
    if sub in ADMIN_ONLY and not is_admin:
        return f"/memory {sub} is for the bot's operators only."
    with bind_session(session):
        return clip(await handler(pool, session, rest))


async def _status(pool: Pool, session: Session, rest: str) -> str:
    if rest:
        return _usage("status")
    p = pool.provider
    stats = await p.stats(session)
    lines = [
        f"Memory provider: {p.name}",
        f"Conversation: {session.id}",
        f"Messages: {stats.message_count} ({stats.token_count} tokens)",
        f"Summaries: {stats.summary_count}",
        f"Context now: {stats.context_tokens} tokens "
        f"(budget {pool.settings.memory.budget_tokens}, "
        + ("auto-compaction off" if pool.settings.compaction.max_tokens == -1
           else f"auto-compaction above {pool.settings.compaction.max_tokens}") + ")",
    ]
    if stats.oldest_at:
        lines.append(f"Span: {minute_utc(stats.oldest_at)} → {minute_utc(stats.newest_at)}")
    if isinstance(p, VersionedProfileStore):
        # The current version, not the session's snapshot: reading that would create the
        # snapshot, freezing the session's view before its first turn.
        version = await p.memory_version(session.user_id, session.agent_id)
        lines.append(f"Memory version (profile, soul, rules): {version}")
    lines.append("Capabilities: " + (", ".join(capabilities_of(unwrap(p))) or "none"))
    return "\n".join(lines)


async def _search(pool: Pool, session: Session, rest: str) -> str:
    if not rest:
        return _usage("search")
    p = pool.provider
    if not isinstance(p, Searcher):
        return _lacks(p, "search")
    # Asked for more than are shown, to say how many there are ("first 10 of 12").
    query = SearchQuery(text=rest, limit=SEARCH_POOL, mode=SearchMode.HYBRID)
    hits = await p.search(session, query)
    asked = _one_line(storable(rest), 100)  # echoed: no lone surrogate, no NUL, one line
    if not hits:
        return f"No matches for “{asked}”."
    shown = hits[:SEARCH_LIMIT]
    origins = await _origins(p, session, shown)
    lines = [
        f"• [{h.source_type} {h.source_id}] {minute_utc(h.timestamp)}{origins.get(h.session_id, '')}: "
        f"{_one_line(h.content, 300)}"
        for h in shown
    ]
    if len(hits) > len(shown):
        total = f"{len(hits)}+" if len(hits) >= SEARCH_POOL else str(len(hits))
        header = f"First {len(shown)} of {total} matches for “{asked}”:"
    else:
        header = f"{len(hits)} match{'es' if len(hits) != 1 else ''} for “{asked}”:"
    footer = "\n(/memory show <id> shows one in full)"
    return _listing(lines, header, MAX_REPLY - len(footer)) + footer


async def _origins(p: object, session: Session, hits: list[SearchResult]) -> dict[str, str]:
    """Where each hit's conversation is, as a suffix: nothing for this one, else the
    earlier conversation's title and start."""
    out: dict[str, str] = {}
    for sid in {h.session_id for h in hits if h.session_id and h.session_id != session.id}:
        if not isinstance(p, SessionManager):
            out[sid] = " (an earlier conversation)"
            continue
        try:
            info = await p.load_info(sid)
        except NotFound:
            continue
        title = _one_line(info.title, 40) or "untitled"
        out[sid] = f" (earlier conversation “{title}”, begun {minute_utc(info.created_at)[:10]})"
    return out


async def _show(pool: Pool, session: Session, rest: str) -> str:
    if not rest or " " in rest:
        return _usage("show")
    p = pool.provider
    if rest.isdigit() and isinstance(p, MessageReader):
        found = await p.read_message(session, rest)
        where = "this conversation" if found.session.id == session.id else (
            f"earlier conversation “{_one_line(found.session.title, 60) or 'untitled'}”"
        )
        head = (
            f"Message {rest} ({found.message.role}, {minute_utc(found.message.created_at)}), "
            f"#{found.seq} of {where}:\n\n"
        )
        return clip(head + found.message.content)
    if not isinstance(p, Explorer):
        return _lacks(p, "summaries")
    d = await p.describe(rest, session)
    head = [
        f"Summary {d.summary_id} ({d.kind}, depth {d.depth}, {d.token_count} tokens)",
        f"Covers {d.descendant_count} messages, {minute_utc(d.earliest_at)} → {minute_utc(d.latest_at)}",
        f"Contained in: {', '.join(d.parent_ids) or '—'}",
        f"Built from: {', '.join(d.child_ids) or '—'}",
        "",
    ]
    return clip("\n".join(head) + d.content)


async def _expand(pool: Pool, session: Session, rest: str) -> str:
    if not rest or " " in rest:
        return _usage("expand")
    p = pool.provider
    if not isinstance(p, Explorer):
        return _lacks(p, "summaries")
    r = await p.expand(rest, EXPAND_TOKEN_CAP, session)
    if r.children:
        lines = [f"• {c.summary_id} ({c.kind}, depth {c.depth}): {_one_line(c.content, 400)}"
                 for c in r.children]
        header = f"Summary {r.summary_id} was condensed from {len(r.children)} summaries:"
    else:
        lines = [f"• #{m.seq} {m.role} {minute_utc(m.created_at)}: {_one_line(m.content, 400)}"
                 for m in r.messages]
        header = f"Summary {r.summary_id} covers {len(r.messages)} messages:"
    text = _listing(lines, header)
    if r.truncated:
        text += "\n(more than fits here: the listing is cut)"
    return text


async def _profile(pool: Pool, session: Session, rest: str) -> str:
    if rest:
        return _usage("profile")
    p = pool.provider
    if not isinstance(p, ProfileStore):
        return _lacks(p, "profiles")
    text = await p.get_profile(session.user_id, session.agent_id)
    return "Your profile:\n" + text if text.strip() else "I have no profile of you yet."


async def _soul(pool: Pool, session: Session, rest: str) -> str:
    if rest:
        return _usage("soul")
    p = pool.provider
    if not isinstance(p, ProfileStore):
        return _lacks(p, "a soul")
    text = await p.get_soul(session.user_id, session.agent_id)
    return "My soul:\n" + text if text.strip() else "No soul is set: I use my default personality."


async def _constraints(pool: Pool, session: Session, rest: str) -> str:
    if rest:
        return _usage("constraints")
    p = pool.provider
    if not isinstance(p, ConstraintStore):
        return _lacks(p, "rules (constraints)")
    items = await p.get_constraints(session.user_id, session.agent_id)
    if not items:
        return "You have given me no rules. Add one with /memory constrain <text>."
    return _listing([f"• [{c.id}] {c.text}" for c in items], "Your rules:")


async def _advance(pool: Pool, session: Session) -> None:
    p = pool.provider
    if isinstance(p, SessionSnapshotStore):
        try:
            await p.advance_snapshot(session.id, session.user_id, session.agent_id)
        finally:
            snapshots.moved()


async def _constrain(pool: Pool, session: Session, rest: str) -> str:
    if not rest:
        return _usage("constrain")
    p = pool.provider
    if not isinstance(p, ConstraintStore):
        return _lacks(p, "rules (constraints)")
    with with_change_source(ChangeSource.USER):
        items = await p.add_constraint(session.user_id, session.agent_id, rest)
    await _advance(pool, session)
    added = next((c for c in reversed(items) if c.text == rest), items[-1] if items else None)
    return f"Rule added [{added.id}]: {added.text}" if added else "Rule added."


async def _unconstrain(pool: Pool, session: Session, rest: str) -> str:
    if not rest or " " in rest:
        return _usage("unconstrain")
    p = pool.provider
    if not isinstance(p, ConstraintStore):
        return _lacks(p, "rules (constraints)")
    try:
        with with_change_source(ChangeSource.USER):
            await p.remove_constraint(session.user_id, session.agent_id, rest)
    except NotFound:
        return f"No rule with id {rest!r}. See /memory constraints."
    await _advance(pool, session)
    return f"Rule {rest} removed."


async def _history(pool: Pool, session: Session, rest: str) -> str:
    if rest:
        return _usage("history")
    p = pool.provider
    if not isinstance(p, ChangelogReader):
        return _lacks(p, "a change history")
    entries = await p.read_changelog(session.user_id, session.agent_id, "", HISTORY_LIMIT)
    if not entries:
        return "No changes yet."
    lines = []
    for e in entries:
        versions = (f"v{e.version_before}→v{e.version_after}"
                    if e.version_after is not None else "")
        text = _change_text(e)
        lines.append(f"• {minute_utc(e.created_at)} {e.scope} {e.action} by {e.source} "
                     f"{versions}: {text}".rstrip(": "))
    return _listing(lines, "Recent memory changes (newest first):")


def _change_text(entry: ChangeEntry) -> str:
    """What a change did, in a line: the rules added and removed for constraints (their
    stored text is the whole list as JSON), the new text for profile and soul."""
    if entry.scope == Scope.CONSTRAINT:
        try:
            old, new = (
                {c.id: c.text for c in parse_constraints(t or "")}
                for t in (entry.before_text, entry.after_text)
            )
        except StoreCorrupt:
            pass  # shown as stored
        else:
            done = [f"added “{_one_line(t, 60)}”" for i, t in new.items() if i not in old]
            done += [f"removed “{_one_line(t, 60)}”" for i, t in old.items() if i not in new]
            return "; ".join(done) or "rules unchanged"
    return _one_line(entry.after_text or entry.before_text, 120)


async def _rollback(pool: Pool, session: Session, rest: str) -> str:
    parts = rest.split()
    if len(parts) != 2 or parts[0].lower() not in ROLLBACK_SCOPES or not parts[1].isdigit():
        return _usage("rollback")
    p = pool.provider
    if not isinstance(p, VersionedProfileStore):
        return _lacks(p, "versioned memory")
    scope, version = ROLLBACK_SCOPES[parts[0].lower()], int(parts[1])
    with with_change_source(ChangeSource.USER):
        new_version = await p.rollback(session.user_id, session.agent_id, scope, version)
    await _advance(pool, session)
    return f"Restored the {scope} as it was at version {version} (now version {new_version})."


async def _notes(pool: Pool, session: Session, rest: str) -> str:
    p = pool.provider
    if not isinstance(p, NoteStore):
        return _lacks(p, "notes")
    if rest:
        entry = await p.note_get(session, rest)
        aliases = f" (also: {', '.join(entry.aliases)})" if entry.aliases else ""
        return f"{entry.kind} {entry.name}{aliases}, {minute_utc(entry.created_at)}:\n{entry.content}"
    entries = await p.note_list(session)
    if not entries:
        return "No notes or archives yet."
    lines = [f"• {e.kind} {e.name}" + (f" (also: {', '.join(e.aliases)})" if e.aliases else "")
             + f": {_one_line(e.content, 100)}" for e in entries]
    return _listing(lines, f"{len(entries)} notes and archives:")


_MEMORY: dict[str, Handler] = {
    "status": _status,
    "search": _search,
    "show": _show,
    "expand": _expand,
    "profile": _profile,
    "soul": _soul,
    "constraints": _constraints,
    "constrain": _constrain,
    "unconstrain": _unconstrain,
    "history": _history,
    "rollback": _rollback,
    "notes": _notes,
}
