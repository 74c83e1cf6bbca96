"""Forgetting on request: the part every provider shares.

A forget names messages of one memory owner (user and agent): by message id, by the id of
a summary (its source messages), or by text (every message holding it, case-insensitive,
tool calls and results included). `preview` turns that into the messages to forget and
says what depends on them; `forget` has the provider (`memory.contract.capabilities.Forgetter`)
remove them and rebuild what was derived from them (lcm's summaries, simple's archives)
in one transaction per conversation, calling `delete_messages` here for the history's
own rows; then `scrub` leaves no copy in the database's bytes (SQLite) and this
process's cached vectors of the owner are dropped. `erase` deletes a whole memory,
`expired` finds what retention forgets (bot/jobs/retention.py).

Decisions (docs/CHAT.md "Forgetting" and docs/OPERATIONS.md say them to people):
- A tool call and its results are forgotten together: a call without its result (or a
  result without its call) is a transcript no model accepts, and a result repeats what
  it found. Forgetting either forgets the assistant message that made the call and every
  result it got.
- The message after a forgotten one carries the forgotten text's end as its search
  context (core revision 0004): its index entry is rebuilt in the same transaction.
- The message before a forgotten one has a vector of the two together (source
  `message_next`, memory/search/pairs.py): it is deleted in the same transaction, and the
  message pairs with its new next one when the embedding backlog finds it.
- A conversation titled by a forgotten message is retitled from what remains.
- The changelog gets one content-free row per forget (scope `forget`): how many
  messages, when, by whom; never what.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.contract.capabilities import ConstraintStore, Forgetter, ProfileStore, Provider
from memory.contract.context import actor_from_context
from memory.contract.errors import InvalidArgument, Unsupported
from memory.contract.tracing import capability, unwrap
from memory.contract.types import ChangeEntry, as_utc
from memory.contract.types import Dependents as Dependents
from memory.contract.types import ErasureReport as ErasureReport
from memory.contract.types import ForgetReport as ForgetReport
from memory.contract.types import Owner as Owner
from memory.facts.forgetting import forget_evidence, resting_on, retracted_by
from memory.search.pairs import MESSAGE_NEXT, PARTNERS
from memory.search.text import like_pattern
from memory.storage import snapshots
from memory.storage.db import lock_for_transaction, write_transaction
from memory.storage.history import (
    TITLE_CHARS,
    PartKind,
    conversations,
    messages,
    origins,
    parts,
    said,
    said_before,
)
from memory.text.sanitize import storable

log = logging.getLogger(__name__)

# The `embeddings` table (memory/search/semantic/store.py) by name: that module loads numpy,
# which only deployments with embeddings on pay for.
embeddings = sa.table(
    "embeddings",
    sa.column("source", sa.String),
    sa.column("item_key", sa.String),
    sa.column("user_id", sa.BigInteger),
    sa.column("agent_id", sa.String),
)

FORGET_SCOPE = "forget"
ERASURE_SCOPE = "erasure"
# A message's vectors: alone, and with the next message (memory/search/pairs.py).
MESSAGE_SOURCES = tuple(PARTNERS)
PREVIEW_WORDS = 8
MAX_SELECTED = 10_000  # one forget by text; more is an erasure, or a retention run
_IN_CHUNK = 500  # ids per IN (...) list, far below every database's parameter limit
CHECKPOINT_ATTEMPTS = 20


@dataclass(frozen=True)
class ForgetItem:
    """One message to be forgotten, as a preview shows it."""

    id: int
    conversation_id: int
    session_id: str
    seq: int
    role: str
    created_at: datetime | None
    first_words: str


def chunks(ids: Sequence[Any]) -> Iterable[Sequence[Any]]:
    """`ids` in slices short enough for one IN (...) list."""
    for i in range(0, len(ids), _IN_CHUNK):
        yield ids[i : i + _IN_CHUNK]


def first_words(text: str, n: int = PREVIEW_WORDS) -> str:
    words = text.split()
    return " ".join(words[:n]) + (" …" if len(words) > n else "")


# -- selection -------------------------------------------------------------------------


def _owned() -> sa.Select[Any]:
    return sa.select(
        messages.c.id,
        messages.c.conversation_id,
        conversations.c.session_id,
        messages.c.seq,
        messages.c.role,
        messages.c.created_at,
        messages.c.content,
    ).join(conversations, conversations.c.id == messages.c.conversation_id)


def _in_scope(owner: Owner) -> list[sa.ColumnElement[bool]]:
    return [conversations.c.user_id == owner.user_id, conversations.c.agent_id == owner.agent_id]


async def owned_items(conn: AsyncConnection, owner: Owner, ids: Iterable[int]) -> list[ForgetItem]:
    """The messages `ids` of `owner` (others' ids are silently left out), in order."""
    out: list[ForgetItem] = []
    id_list = sorted(set(ids))
    for chunk in chunks(id_list):
        rows = await conn.execute(_owned().where(*_in_scope(owner), messages.c.id.in_(chunk)))
        out += [
            ForgetItem(
                r.id,
                r.conversation_id,
                r.session_id,
                r.seq,
                r.role,
                as_utc(r.created_at),
                first_words(r.content),
            )
            for r in rows
        ]
    return sorted(out, key=lambda i: (i.conversation_id, i.seq))


async def matching_text(conn: AsyncConnection, owner: Owner, text: str) -> list[int]:
    """Ids of `owner`'s messages holding `text` (case-insensitive) in their content or in
    a part (a tool call's arguments, reasoning)."""
    if conn.dialect.name == "sqlite" and not text.isascii():
        # SQLite's LIKE folds ASCII letters only: read the owner's messages and compare
        # case-folded here (a forget by text is rare; one pass over one owner's history).
        return await _casefold_scan(conn, owner, text.casefold())
    op = "ilike" if conn.dialect.name == "postgresql" else "like"
    pattern = like_pattern(text)
    content = getattr(messages.c.content, op)(pattern, escape="\\")
    in_parts = sa.exists().where(
        parts.c.message_id == messages.c.id, getattr(parts.c.content, op)(pattern, escape="\\")
    )
    query = (
        sa.select(messages.c.id)
        .join(conversations, conversations.c.id == messages.c.conversation_id)
        .where(*_in_scope(owner), sa.or_(content, in_parts))
        .limit(MAX_SELECTED + 1)
    )
    return list((await conn.execute(query)).scalars())


async def _casefold_scan(conn: AsyncConnection, owner: Owner, needle: str) -> list[int]:
    found: set[int] = set()
    mine = sa.select(conversations.c.id).where(*_in_scope(owner)).scalar_subquery()
    rows = await conn.stream(
        sa.select(messages.c.id, messages.c.content).where(messages.c.conversation_id.in_(mine))
    )
    async for msg_id, content in rows:
        if needle in content.casefold():
            found.add(int(msg_id))
    pieces = await conn.stream(
        sa.select(parts.c.message_id, parts.c.content)
        .join(messages, messages.c.id == parts.c.message_id)
        .where(messages.c.conversation_id.in_(mine))
    )
    async for msg_id, content in pieces:
        if needle in content.casefold():
            found.add(int(msg_id))
    return sorted(found)[: MAX_SELECTED + 1]


_TOOL_KINDS = (PartKind.TOOL_CALL.value, PartKind.TOOL_RESULT.value)


async def with_tool_partners(conn: AsyncConnection, ids: Iterable[int]) -> list[int]:
    """`ids` plus the tool calls and results they belong with: an assistant message that
    called tools goes with every result it got, a result with the call that asked (the
    nearest call of that id before it: some models reuse call ids turn after turn). A
    caller brought in brings the results of its other calls too, hence the loop."""
    chosen = set(ids)
    seen: set[tuple[int, str]] = set()
    while True:
        keys = await _tool_keys(conn, chosen) - seen
        if not keys:
            return sorted(chosen)
        seen |= keys
        for exchange in await _exchanges(conn, keys):
            if chosen & exchange:
                chosen |= exchange


async def _tool_keys(conn: AsyncConnection, ids: set[int]) -> set[tuple[int, str]]:
    """(conversation, call id) of every tool call or result among messages `ids`."""
    keys: set[tuple[int, str]] = set()
    for chunk in chunks(sorted(ids)):
        rows = await conn.execute(
            sa.select(messages.c.conversation_id, parts.c.tool_call_id)
            .join(messages, messages.c.id == parts.c.message_id)
            .where(
                parts.c.message_id.in_(chunk),
                parts.c.kind.in_(_TOOL_KINDS),
                parts.c.tool_call_id.is_not(None),
            )
        )
        keys |= {(int(conv), str(call)) for conv, call in rows}
    return keys


async def _exchanges(conn: AsyncConnection, keys: set[tuple[int, str]]) -> list[set[int]]:
    """Each call of `keys` with the results that answer it, as sets of message ids."""
    by_conv: dict[int, list[str]] = {}
    for conv, call in keys:
        by_conv.setdefault(conv, []).append(call)
    out: list[set[int]] = []
    for conv, calls in by_conv.items():
        for chunk in chunks(sorted(calls)):
            rows = await conn.execute(
                sa.select(parts.c.message_id, parts.c.kind, parts.c.tool_call_id)
                .join(messages, messages.c.id == parts.c.message_id)
                .where(
                    messages.c.conversation_id == conv,
                    parts.c.kind.in_(_TOOL_KINDS),
                    parts.c.tool_call_id.in_(chunk),
                )
                .order_by(messages.c.seq, parts.c.ordinal)
            )
            current: dict[str, set[int]] = {}  # call id -> its exchange so far
            for message_id, kind, call in rows:
                if kind == PartKind.TOOL_CALL.value:
                    current[call] = {int(message_id)}
                    out.append(current[call])
                elif call in current:
                    current[call].add(int(message_id))
    return out


# -- deletion (inside the provider's transaction) --------------------------------------


async def delete_messages(conn: AsyncConnection, conv_id: int, ids: Sequence[int]) -> int:
    """Delete messages `ids` of conversation `conv_id` with their parts, origins, vectors
    and index entries, re-index the messages whose search context quoted them, and retitle
    the conversation if its title came from one; the facts they alone supported go (and
    what those had superseded reopens: memory/facts/forgetting.py). Returns how many
    messages were deleted."""
    ids = sorted(set(ids))
    if not ids:
        return 0
    await forget_evidence(conn, ids)
    deleted: list[tuple[int, str, str]] = []  # (seq, role, content)
    quoting: set[str] = set()  # the messages whose pair vector quotes one of `ids`
    for chunk in chunks(ids):
        rows = await conn.execute(
            sa.select(messages.c.seq, messages.c.role, messages.c.content).where(
                messages.c.conversation_id == conv_id, messages.c.id.in_(chunk)
            )
        )
        deleted += [(r.seq, r.role, r.content) for r in rows]
        quoting |= await _quoting(conn, conv_id, chunk)
        await conn.execute(parts.delete().where(parts.c.message_id.in_(chunk)))
        # (the foreign key cascades too; explicit, as for parts, whatever the engine's pragmas)
        await conn.execute(origins.delete().where(origins.c.message_id.in_(chunk)))
        await conn.execute(
            messages.delete().where(messages.c.conversation_id == conv_id, messages.c.id.in_(chunk))
        )
    # The vectors after every message row: an embedding pass storing one checks its
    # messages under a share lock (memory/search/semantic/store.py), so it either waited
    # for this transaction and finds them gone, or committed first and its row is seen here.
    await _delete_message_vectors(conn, ids, quoting - {str(i) for i in ids})
    for hook in _forget_hooks.values():  # rows citing the messages (follow-ups)
        await hook(conn, ids)
    await _reindex_followers(conn, conv_id, sorted(s for s, _, _ in deleted))
    await _retitle(conn, conv_id, [c for _, role, c in deleted if role == "user"])
    return len(deleted)


async def _quoting(conn: AsyncConnection, conv_id: int, ids: Sequence[int]) -> set[str]:
    """The messages said just before each of `ids` (still stored) that is said: the first
    of a pair vector (`message_next`) quoting it."""
    rows = await conn.execute(
        sa.select(said_before(messages)).where(
            messages.c.conversation_id == conv_id, messages.c.id.in_(ids), said(messages)
        )
    )
    return {str(i) for i in rows.scalars() if i is not None}


async def _delete_message_vectors(
    conn: AsyncConnection, ids: Sequence[int], quoting: Iterable[str]
) -> None:
    """Both vectors of messages `ids`, and the pair vectors of `quoting`: no vector keeps
    forgotten text."""
    for chunk in chunks(ids):
        await conn.execute(
            embeddings.delete().where(
                embeddings.c.source.in_(MESSAGE_SOURCES),
                embeddings.c.item_key.in_([str(i) for i in chunk]),
            )
        )
    for keys in chunks(sorted(quoting)):
        await conn.execute(
            embeddings.delete().where(
                embeddings.c.source == MESSAGE_NEXT, embeddings.c.item_key.in_(keys)
            )
        )


async def _reindex_followers(conn: AsyncConnection, conv_id: int, seqs: list[int]) -> None:
    """A message's index entry holds the end of the message before it (tool results and
    empty ones skipped): every message after a deleted one, up to the next that would be
    a context itself, is re-indexed (its triggers recompute the context)."""
    done: set[int] = set()
    for seq in seqs:
        if seq in done:
            continue
        upto = await conn.scalar(
            sa.select(sa.func.min(messages.c.seq)).where(
                messages.c.conversation_id == conv_id,
                messages.c.seq > seq,
                messages.c.role != "tool",
                messages.c.content != "",
            )
        )
        if upto is None:
            upto = await conn.scalar(
                sa.select(sa.func.max(messages.c.seq)).where(messages.c.conversation_id == conv_id)
            )
        if upto is None or upto <= seq:
            continue
        # Setting a column to itself fires the `UPDATE OF content` triggers (SQLite FTS5,
        # PostgreSQL's messages_search_sync), which read the context anew.
        await conn.execute(
            messages.update()
            .where(
                messages.c.conversation_id == conv_id,
                messages.c.seq > seq,
                messages.c.seq <= upto,
            )
            .values(content=messages.c.content)
        )
        done.update(s for s in seqs if seq <= s <= upto)


def title_of(content: str) -> str:
    """The title a conversation takes from its first user message (memory.storage.history)."""
    return " ".join(content.split())[:TITLE_CHARS]


async def _retitle(conn: AsyncConnection, conv_id: int, user_texts: list[str]) -> None:
    title = await conn.scalar(sa.select(conversations.c.title).where(conversations.c.id == conv_id))
    if not title or title not in {title_of(t) for t in user_texts}:
        return
    first = await conn.scalar(
        sa.select(messages.c.content)
        .where(
            messages.c.conversation_id == conv_id,
            messages.c.role == "user",
            sa.func.trim(messages.c.content) != "",
        )
        .order_by(messages.c.seq)
        .limit(1)
    )
    await conn.execute(
        conversations.update()
        .where(conversations.c.id == conv_id)
        .values(title=title_of(first or ""))
    )


async def delete_vectors(
    conn: AsyncConnection, source: str, keys: Sequence[str], owner: Owner | None = None
) -> None:
    """Vectors of `source`'s items `keys`, every model."""
    for chunk in chunks(list(keys)):
        where = [embeddings.c.source == source, embeddings.c.item_key.in_(chunk)]
        if owner is not None:
            where += [
                embeddings.c.user_id == owner.user_id,
                embeddings.c.agent_id == owner.agent_id,
            ]
        await conn.execute(embeddings.delete().where(*where))


async def forget_each_conversation(
    found: Iterable[ForgetItem],
    forget_in: Callable[[int, list[ForgetItem]], Awaitable[ForgetReport]],
    total: ForgetReport | None = None,
) -> ForgetReport:
    """Forget `found` one conversation at a time (`forget_in(conversation id, its
    items)`, each its own transaction), adding their reports up into `total`."""
    total = total if total is not None else ForgetReport()
    for conv_id, group in by_conversation(found).items():
        report = await forget_in(conv_id, group)
        total.messages += report.messages
        total.summaries_rebuilt += report.summaries_rebuilt
        total.summaries_removed += report.summaries_removed
    return total


def by_conversation(found: Iterable[ForgetItem]) -> dict[int, list[ForgetItem]]:
    out: dict[int, list[ForgetItem]] = {}
    for item in found:
        out.setdefault(item.conversation_id, []).append(item)
    return out


# -- no trace in the bytes -------------------------------------------------------------


async def scrub(engine: AsyncEngine) -> None:
    """After a forget committed: on SQLite, merge every FTS5 index into one segment (a
    deleted row's terms otherwise stay in older segments until a merge), then checkpoint
    the WAL and truncate it (its older frames hold the pages as they were). Freed space is
    zeroed as it is freed (`secure_delete`, memory/storage/db.py). PostgreSQL: nothing here; its
    dead tuples wait for VACUUM (docs/OPERATIONS.md)."""
    if engine.dialect.name != "sqlite":
        return
    async with write_transaction(engine) as conn:
        tables = (
            await conn.execute(
                sa.text(
                    "SELECT name FROM sqlite_master WHERE type = 'table' "
                    "AND sql LIKE 'CREATE VIRTUAL TABLE%USING fts5%'"
                )
            )
        ).scalars()
        for table in list(tables):
            await conn.execute(sa.text(f'INSERT INTO "{table}"("{table}") VALUES (\'optimize\')'))
    await checkpoint(engine)


async def checkpoint(engine: AsyncEngine) -> bool:
    """PRAGMA wal_checkpoint(TRUNCATE), retried while readers hold old frames; False
    (logged) if it never completed."""
    for attempt in range(CHECKPOINT_ATTEMPTS):
        async with engine.connect() as conn:
            raw = await conn.get_raw_connection()
            driver: Any = raw.driver_connection
            cursor = await driver.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            busy, _frames, _done = await cursor.fetchone()
            await cursor.close()
        if not busy:
            return True
        await asyncio.sleep(0.05 * (attempt + 1))
    log.warning("the WAL checkpoint after a forget did not complete: readers kept it busy")
    return False


# -- erasure (inside the provider's transaction) ---------------------------------------


async def owned_conversations(conn: AsyncConnection, owner: Owner) -> dict[int, str]:
    """`owner`'s conversations: id -> session id."""
    rows = await conn.execute(
        sa.select(conversations.c.id, conversations.c.session_id)
        .where(*_in_scope(owner))
        .order_by(conversations.c.id)
    )
    return {int(r.id): r.session_id for r in rows}


async def erase_history(conn: AsyncConnection, owner: Owner, conv_ids: Sequence[int]) -> int:
    """Delete `owner`'s conversations `conv_ids` (a provider deleted its own rows of them
    first) with their messages, parts, origins and every vector of the owner. Returns the number
    of messages deleted."""
    count = 0
    for chunk in chunks(list(conv_ids)):
        count += int(
            await conn.scalar(
                sa.select(sa.func.count()).where(messages.c.conversation_id.in_(chunk))
            )
            or 0
        )
        in_convs = sa.select(messages.c.id).where(messages.c.conversation_id.in_(chunk))
        await conn.execute(parts.delete().where(parts.c.message_id.in_(in_convs)))
        await conn.execute(origins.delete().where(origins.c.message_id.in_(in_convs)))
        await conn.execute(messages.delete().where(messages.c.conversation_id.in_(chunk)))
        await conn.execute(conversations.delete().where(conversations.c.id.in_(chunk)))
    # After the messages, as in `delete_messages`: a vector an embedding pass stores now
    # either waited for this transaction (its messages gone, it stores none) or is seen.
    await conn.execute(
        embeddings.delete().where(
            embeddings.c.user_id == owner.user_id, embeddings.c.agent_id == owner.agent_id
        )
    )
    return count


async def owner_counts(engine: AsyncEngine, owner: Owner) -> tuple[int, int]:
    """(conversations, messages) of `owner`: what an erasure would delete."""
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                sa.select(
                    sa.func.count(sa.distinct(conversations.c.id)), sa.func.count(messages.c.id)
                )
                .select_from(conversations)
                .outerjoin(messages, messages.c.conversation_id == conversations.c.id)
                .where(*_in_scope(owner))
            )
        ).one()
    return int(row[0]), int(row[1])


def shared_scope(user_id: int) -> bool:
    """A memory every member of a group shares: Telegram gives groups negative chat ids
    (users' ids are positive), and a group's memory scope is its chat id."""
    return user_id < 0


# Rows outside the memory's own tables that hold an owner's words (a front-end's queued
# updates, owed answers): their owners register a hook, which an erasure runs inside its
# transaction; it returns {what: how many rows} for the erasure's record.
EraseHook = Callable[[AsyncConnection, Owner], Awaitable[dict[str, int]]]
_erase_hooks: dict[str, EraseHook] = {}


# Rows outside the history that cite messages (follow-ups, memory/followups/store.py):
# their owners register a hook, which `delete_messages` runs in the forget's transaction
# with the ids forgotten.
ForgetHook = Callable[[AsyncConnection, Sequence[int]], Awaitable[object]]
_forget_hooks: dict[str, ForgetHook] = {}


def on_forget_messages(name: str, hook: ForgetHook) -> None:
    """Register (or replace) the message-forget hook `name`."""
    _forget_hooks[name] = hook


def on_erase(name: str, hook: EraseHook) -> None:
    """Register (or replace) the erasure hook `name`."""
    _erase_hooks[name] = hook


async def run_erase_hooks(conn: AsyncConnection, owner: Owner, report: ErasureReport) -> None:
    for hook in _erase_hooks.values():
        for what, count in (await hook(conn, owner)).items():
            report.extra[what] = report.extra.get(what, 0) + count


# -- the front-ends' entry points ------------------------------------------------------


@dataclass
class ForgetPreview:
    """What a forget would do; `ids` is what the confirmation forgets."""

    owner: Owner
    items: list[ForgetItem]
    dependents: Dependents
    needles: tuple[str, ...] = ()

    @property
    def ids(self) -> list[int]:
        return [i.id for i in self.items]


MIN_TEXT = 3  # a shorter text matches too much to be what someone meant


def engine_of(provider: Provider) -> AsyncEngine:
    """The database of an SQL provider (a traced one forwards only its capabilities)."""
    engine: AsyncEngine = unwrap(provider).engine
    return engine


class SelectorError(InvalidArgument):
    """The words do not name anything forgettable (said to the person as they are)."""


def forgetter(provider: Provider) -> Forgetter:
    """`provider` as the `Forgetter` every caller has checked it is (a traced provider
    answers as its inner one does)."""
    narrowed = capability(provider, Forgetter)
    if narrowed is None:
        raise Unsupported(f"the {provider.name} provider cannot forget")
    return narrowed


async def preview(provider: Provider, owner: Owner, selector: str) -> ForgetPreview:
    """The messages `selector` (a message id, a summary id, or text) names in `owner`'s
    memory, with their tool partners, and what depends on them. Nothing changes."""
    # Cleaned as stored text was (U+FFFD for NUL and lone surrogates): the needle is also
    # compared in Python, with notes, summaries and the profile.
    selector = storable(selector).strip()
    needles: tuple[str, ...] = ()
    ids: list[int]
    if selector.isdigit() and len(selector) <= 18:
        ids = [int(selector)]
    elif selector.startswith("sum_") and " " not in selector:
        ids = await forgetter(provider).summary_sources(owner, selector)
    else:
        if len(selector) < MIN_TEXT:
            raise SelectorError(f"the text to forget needs at least {MIN_TEXT} characters")
        needles = (selector,)
        async with engine_of(provider).connect() as conn:
            ids = await matching_text(conn, owner, selector)
        if len(ids) > MAX_SELECTED:
            raise SelectorError(
                f"more than {MAX_SELECTED} messages hold that text: forget everything instead"
            )
    return await preview_of(provider, owner, ids, needles)


async def preview_of(
    provider: Provider, owner: Owner, ids: Sequence[int], needles: tuple[str, ...] = ()
) -> ForgetPreview:
    """The preview of forgetting messages `ids` of `owner` (others' left out) with their
    tool partners, and what depends on them. Nothing changes."""
    async with engine_of(provider).connect() as conn:
        ids = await with_tool_partners(conn, ids)
        found = await owned_items(conn, owner, ids)
    dependents = await forgetter(provider).forget_dependents(owner, [i.id for i in found], needles)
    if found:
        dependents.quoting_stores = await quoting_stores(provider, owner, found, needles)
        async with engine_of(provider).connect() as conn:
            dependents.facts = await resting_on(conn, [i.id for i in found])
            dependents.facts_back = await retracted_by(conn, [i.id for i in found])
    return ForgetPreview(owner, found, dependents, needles)


MIN_QUOTE = 8  # shorter message texts are too common to say something quotes them


async def quoted_texts(
    engine: AsyncEngine, found: Sequence[ForgetItem], needles: Sequence[str]
) -> list[str]:
    """What a note or store "quotes" a forgotten message by: the whole text of one of
    them (of at least MIN_QUOTE characters), or the text forgotten by, case-folded."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(messages.c.content).where(
                messages.c.id.in_([i.id for i in found][:_IN_CHUNK])
            )
        )
        texts = [c.strip().casefold() for c in rows.scalars()]
    return [t for t in texts if len(t) >= MIN_QUOTE] + [n.casefold() for n in needles]


async def quoting_stores(
    provider: Provider, owner: Owner, found: Sequence[ForgetItem], needles: Sequence[str]
) -> list[str]:
    """Which of `owner`'s profile, soul and rules quote the forgotten messages."""
    quoted = await quoted_texts(engine_of(provider), found, needles)
    if not quoted:
        return []
    out = []
    # A traced provider has exactly its inner one's capabilities (memory/contract/tracing.py).
    if isinstance(provider, ProfileStore):
        for name, read in (("profile", provider.get_profile), ("soul", provider.get_soul)):
            text = (await read(owner.user_id, owner.agent_id)).casefold()
            if any(q in text for q in quoted):
                out.append(name)
    if isinstance(provider, ConstraintStore):
        for rule in await provider.get_constraints(owner.user_id, owner.agent_id):
            if any(q in rule.text.casefold() for q in quoted):
                out.append(f"rule {rule.id}")
    return out


async def forget(
    provider: Provider, owner: Owner, ids: Sequence[int], needles: Sequence[str] = ()
) -> ForgetReport:
    """Forget messages `ids` of `owner` (ids outside the owner's memory are ignored) and
    everything derived from them; then leave no trace in the database's bytes."""
    report = await forgetter(provider).forget_messages(owner, ids, needles)
    await after_forget(provider, owner)
    return report


async def erase(provider: Provider, owner: Owner, by: str) -> ErasureReport:
    report = await forgetter(provider).erase_owner(owner, by)
    await after_forget(provider, owner)
    return report


async def after_forget(provider: Provider, owner: Owner) -> None:
    """The copies outside the transaction: SQLite's index segments and WAL, and this
    process's cached vectors of the owner (other replicas reload theirs when they find
    rows gone, memory/search/semantic/index.py)."""
    await scrub(engine_of(provider))
    snapshots.moved()  # a forget that removed a fact moved its owner's snapshots
    semantic = getattr(unwrap(provider), "semantic", None)
    if semantic is not None:
        semantic.index.forget(owner.user_id, owner.agent_id)


def changelog_text(report: ForgetReport) -> str:
    """The forget's changelog row: counts, never content."""
    return (
        f"{report.messages} message(s) forgotten; {report.summaries_rebuilt} summaries "
        f"rebuilt, {report.summaries_removed} removed"
    )


def forget_entry(owner: Owner, session_id: str, report: ForgetReport) -> ChangeEntry:
    """The content-free changelog row of one conversation's forget (its source, user,
    system, reflect or operator, comes from the caller's context, with the operator's
    name when one acted)."""
    actor = actor_from_context()
    return ChangeEntry(
        user_id=owner.user_id,
        agent_id=owner.agent_id,
        scope=FORGET_SCOPE,
        action="delete",
        source="",
        session_id=session_id,
        after_text=changelog_text(report) + (f" (by {actor})" if actor else ""),
    )


def erasure_entry(owner: Owner, report: ErasureReport, by: str) -> ChangeEntry:
    """The one row an erasure leaves: that it happened, by whom, when, how much."""
    return ChangeEntry(
        user_id=owner.user_id,
        agent_id=owner.agent_id,
        scope=ERASURE_SCOPE,
        action="delete",
        source="",
        after_text=f"erased by {by}: {report.describe()}"[:2000],
    )


@asynccontextmanager
async def owner_transaction(engine: AsyncEngine, owner: Owner) -> AsyncIterator[AsyncConnection]:
    """A write transaction holding `owner`'s erasure lock (PostgreSQL: across replicas;
    SQLite's single writer serialises anyway)."""
    async with write_transaction(engine) as conn:
        await lock_for_transaction(conn, f"owner:{owner.user_id}:{owner.agent_id}")
        yield conn


async def expired(engine: AsyncEngine, cutoff: datetime) -> dict[Owner, list[int]]:
    """Messages created before `cutoff`, by owner: what retention forgets."""
    out: dict[Owner, list[int]] = {}
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(messages.c.id, conversations.c.user_id, conversations.c.agent_id)
            .join(conversations, conversations.c.id == messages.c.conversation_id)
            .where(messages.c.created_at < cutoff)
            .order_by(conversations.c.user_id, conversations.c.agent_id, messages.c.id)
        )
        for msg_id, user_id, agent_id in rows:
            out.setdefault(Owner(int(user_id), agent_id), []).append(int(msg_id))
    return out
