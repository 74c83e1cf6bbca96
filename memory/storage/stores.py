"""The shared stores every SQL provider offers: profile, soul and constraints per (user, agent) with
one version counter, the changelog, versioned reads, rollback and session snapshots.

`SharedStores` is a mixin: a provider that has `self.engine` inherits it and thereby
implements ProfileStore, ConstraintStore, VersionedProfileStore,
VersionedConstraintStore, ChangelogReader, ChangelogWriter, SessionSnapshotStore and
FactStore (memory/facts/, on the same version counter and write path).

Decisions worth knowing:
- Every store write, including one that leaves the text unchanged, is a new version
  with its changelog row: a write is an event the history must show.
- Changelog rows of scope `constraint` carry the whole list as JSON in
  `before_text`/`after_text` (not just the one constraint), so a versioned read of the
  constraints is one row lookup, exactly like profile and soul.
- Versioned reads take the `after_text` of the newest row of the scope whose
  `version_after` <= V ("" when none); V <= 0 means "current" (the Go contract).
- `write_changelog` takes any scope except profile/soul/constraint (those rows are the
  stores' own and drive versioned reads); its rows never bump the version.
- The profile's text is its current facts rendered (memory/facts/render.py), then the
  free text `set_profile` writes; a versioned read renders the facts of that version.
  `set_profile` drops lines that render a current fact, so a text read and written back
  does not copy the facts into the free text.
- Text is made storable (NUL and lone surrogates replaced) as the message history does.
- A write's changelog row records `options.source` and `options.session_id`
  (memory/contract/options.py `WriteOptions`); a write without options takes them from the
  caller's context (`memory.contract.context`), as every write did before options existed.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.contract.context import change_source_from_context, session_id_from_context
from memory.contract.errors import Conflict, InvalidArgument, NotFound, StoreCorrupt
from memory.contract.facts import Fact
from memory.contract.options import WriteOptions
from memory.contract.types import (
    Action,
    ChangeEntry,
    ChangeSource,
    ConstraintEntry,
    Scope,
    Session,
    SessionSnapshot,
    as_utc,
    utcnow,
)
from memory.facts.forgetting import erase_facts
from memory.facts.models import facts as facts_table
from memory.facts.render import render_profile, strip_fact_lines
from memory.facts.rows import read_facts
from memory.facts.store import FactStores
from memory.storage.db import conflict_insert, write_transaction
from memory.storage.store_models import MemoryChangelog, MemoryState, SessionSnapshotRow
from memory.storage.usage import write_pending
from memory.text.sanitize import storable

state_table: sa.Table = MemoryState.__table__  # type: ignore[attr-defined]
changelog_table: sa.Table = MemoryChangelog.__table__  # type: ignore[attr-defined]
snapshot_table: sa.Table = SessionSnapshotRow.__table__  # type: ignore[attr-defined]

MAX_CONSTRAINT_CHARS = 2000
# Profile and soul go into every system prompt; anything near this is a mistake.
MAX_TEXT_CHARS = 100_000
MAX_AGENT_ID_CHARS = 128
MAX_SESSION_ID_CHARS = 255

# The scopes whose rows the stores write themselves, and the state column of each.
_COLUMNS: dict[Scope, str] = {
    Scope.PROFILE: "profile",
    Scope.SOUL: "soul",
    Scope.CONSTRAINT: "constraints",
}

# Given the locked transaction, the current version and the old text of a scope: the new
# text and the changelog action. Raising aborts the write (the transaction rolls back).
Change = Callable[[AsyncConnection, int, str], Awaitable[tuple[str, Action]]]


def _check_owner(user_id: int, agent_id: str) -> None:
    if isinstance(user_id, bool) or not isinstance(user_id, int):
        raise InvalidArgument(f"user_id must be an integer, got {user_id!r}")
    if not isinstance(agent_id, str) or not agent_id.strip():
        raise InvalidArgument("agent_id must be a non-empty string")
    if len(agent_id) > MAX_AGENT_ID_CHARS:
        raise InvalidArgument(f"agent_id is longer than {MAX_AGENT_ID_CHARS} characters")


def _check_session_id(session_id: str) -> None:
    if not isinstance(session_id, str) or not session_id:
        raise InvalidArgument("session_id must be a non-empty string")
    if len(session_id) > MAX_SESSION_ID_CHARS:
        raise InvalidArgument(f"session_id is longer than {MAX_SESSION_ID_CHARS} characters")


def _scope(scope: str, allowed: tuple[Scope, ...]) -> Scope:
    try:
        value = Scope(scope)
    except ValueError:
        value = None
    if value not in allowed:
        names = ", ".join(s.value for s in allowed)
        raise InvalidArgument(f"unknown scope {scope!r}: expected one of {names}")
    return value


def _text_change(content: str) -> Change:
    if not isinstance(content, str):
        raise InvalidArgument("content must be a string")
    if len(content) > MAX_TEXT_CHARS:
        raise InvalidArgument(f"content is longer than {MAX_TEXT_CHARS} characters")
    new = storable(content)

    async def change(_conn: AsyncConnection, _version: int, old: str) -> tuple[str, Action]:
        if not old and new:
            return new, Action.CREATE
        if old and not new:
            return new, Action.DELETE
        return new, Action.UPDATE

    return change


def parse_constraints(raw: str) -> list[ConstraintEntry]:
    """The stored JSON list (or "" for none) as entries; StoreCorrupt if unreadable."""
    if not raw.strip():
        return []
    try:
        items = json.loads(raw)
        return [
            ConstraintEntry(id=str(i["id"]), text=str(i["text"]), created_at=str(i["created_at"]))
            for i in items
        ]
    except (ValueError, TypeError, KeyError) as exc:
        raise StoreCorrupt(f"stored constraints are not a valid JSON list: {exc}") from exc


def dump_constraints(entries: list[ConstraintEntry]) -> str:
    return json.dumps([e.to_dict() for e in entries], ensure_ascii=False)


def _new_constraint_id(taken: set[str]) -> str:
    while True:
        cid = f"c_{secrets.token_hex(4)}"
        if cid not in taken:
            return cid


def _owner(table: sa.Table, user_id: int, agent_id: str) -> sa.ColumnElement[bool]:
    return sa.and_(table.c.user_id == user_id, table.c.agent_id == agent_id)


async def _lock_state(
    conn: AsyncConnection, user_id: int, agent_id: str
) -> sa.Row[*tuple[Any, ...]]:
    """The state row of (user, agent), created at version 0 if absent, locked until the
    transaction ends (PostgreSQL: FOR UPDATE; SQLite: BEGIN IMMEDIATE already holds
    the single write lock)."""
    await conn.execute(
        conflict_insert(conn, state_table)
        .values(
            user_id=user_id,
            agent_id=agent_id,
            profile="",
            soul="",
            constraints="[]",
            version=0,
            updated_at=utcnow(),
        )
        .on_conflict_do_nothing(index_elements=["user_id", "agent_id"])
    )
    query = sa.select(state_table).where(_owner(state_table, user_id, agent_id))
    if conn.dialect.name == "postgresql":
        query = query.with_for_update()
    return (await conn.execute(query)).one()


async def _current_version(conn: AsyncConnection, user_id: int, agent_id: str) -> int:
    version = await conn.scalar(
        sa.select(state_table.c.version).where(_owner(state_table, user_id, agent_id))
    )
    return int(version or 0)


async def _text_at(
    conn: AsyncConnection, user_id: int, agent_id: str, scope: Scope, version: int
) -> str:
    """The text of `scope` as it was at `version` (> 0), from the changelog."""
    # Rows of one (user, agent) are written under its row lock, so ids grow with versions.
    text = await conn.scalar(
        sa.select(changelog_table.c.after_text)
        .where(
            _owner(changelog_table, user_id, agent_id),
            changelog_table.c.scope == scope.value,
            changelog_table.c.version_after.is_not(None),
            changelog_table.c.version_after <= version,
        )
        .order_by(changelog_table.c.id.desc())
        .limit(1)
    )
    return text or ""


async def _current_facts(conn: AsyncConnection, user_id: int, agent_id: str) -> list[Fact]:
    return await read_facts(
        conn,
        sa.select(facts_table).where(
            facts_table.c.user_id == user_id,
            facts_table.c.agent_id == agent_id,
            facts_table.c.state == "current",
        ),
    )


def changelog_entry(row: sa.Row[*tuple[Any, ...]]) -> ChangeEntry:
    """A changelog row as a `ChangeEntry` (the stores' reads and the web console's)."""
    return ChangeEntry(
        id=row.id,
        user_id=row.user_id,
        agent_id=row.agent_id,
        session_id=row.session_id,
        scope=row.scope,
        action=row.action,
        source=row.source,
        version_before=row.version_before,
        version_after=row.version_after,
        before_text=row.before_text,
        after_text=row.after_text,
        created_at=as_utc(row.created_at),
    )


async def _bump(
    conn: AsyncConnection,
    entry: ChangeEntry,
    old_version: int,
    before: str,
    after: str,
    columns: dict[str, str],
) -> int:
    """The owner's next version, with `columns` of memory_state written, and the
    write's changelog row (`entry`'s owner, scope, action, source and session); in the
    caller's transaction, its row locked. Returns the changelog row's id."""
    version, now = old_version + 1, utcnow()
    await conn.execute(
        sa.update(state_table)
        .where(_owner(state_table, entry.user_id, entry.agent_id))
        .values({**columns, "version": version, "updated_at": now})
    )
    result = await conn.execute(
        sa.insert(changelog_table)
        .values(
            user_id=entry.user_id,
            agent_id=entry.agent_id,
            session_id=entry.session_id[:MAX_SESSION_ID_CHARS],
            scope=entry.scope,
            action=entry.action,
            source=entry.source,
            version_before=old_version,
            version_after=version,
            before_text=before,
            after_text=after,
            created_at=now,
        )
        .returning(changelog_table.c.id)
    )
    return int(result.scalar_one())


def _snapshot(row: sa.Row[*tuple[Any, ...]]) -> SessionSnapshot:
    return SessionSnapshot(
        session_id=row.session_id,
        user_id=row.user_id,
        agent_id=row.agent_id,
        version=int(row.version),
        updated_at=as_utc(row.updated_at),
    )


class SharedStores(FactStores):
    """Mixin implementing the shared-store capabilities over `self.engine`."""

    engine: AsyncEngine

    # -- the one write path -------------------------------------------------------

    def _check_owner(self, user_id: int, agent_id: str) -> None:
        _check_owner(user_id, agent_id)

    async def _versioned_write(
        self,
        user_id: int,
        agent_id: str,
        scope: Scope,
        options: WriteOptions | None,
        body: Callable[[AsyncConnection, int, ChangeSource], Awaitable[tuple[Action, str, str]]],
    ) -> tuple[int, int]:
        """A write of rows outside memory_state (the facts) on the same counter: lock the
        owner's row, run `body(conn, new version, source)` for the action and the
        changelog texts, bump the version, record the row, in one transaction. Returns
        (version, changelog id)."""
        _check_owner(user_id, agent_id)
        who = options or WriteOptions.from_context()
        try:
            source = ChangeSource(who.source)
        except ValueError as exc:
            raise InvalidArgument(f"unknown change source {who.source!r}") from exc
        async with write_transaction(self.engine) as conn:
            row = await _lock_state(conn, user_id, agent_id)
            version = int(row.version) + 1
            action, before, after = await body(conn, version, source)
            entry = ChangeEntry(
                user_id, agent_id, scope.value, action.value, source.value, who.session_id
            )
            changelog_id = await _bump(conn, entry, int(row.version), before, after, {})
        return version, changelog_id

    async def _write_scope(
        self,
        user_id: int,
        agent_id: str,
        scope: Scope,
        change: Change,
        options: WriteOptions | None,
    ) -> tuple[int, str]:
        """Apply `change` to `scope` in one transaction: lock the row, write the new
        text, bump the version, record the changelog row. Returns (version, new text)."""
        _check_owner(user_id, agent_id)
        column = _COLUMNS[scope]
        who = options or WriteOptions.from_context()
        try:
            source = ChangeSource(who.source)
        except ValueError as exc:
            raise InvalidArgument(f"unknown change source {who.source!r}") from exc
        async with write_transaction(self.engine) as conn:
            row = await _lock_state(conn, user_id, agent_id)
            before = getattr(row, column)
            after, action = await change(conn, int(row.version), before)
            if scope == Scope.PROFILE:
                after = strip_fact_lines(after, await _current_facts(conn, user_id, agent_id))
            entry = ChangeEntry(
                user_id, agent_id, scope.value, action.value, source.value, who.session_id
            )
            await _bump(conn, entry, int(row.version), before, after, {column: after})
        return int(row.version) + 1, after

    async def _current_text(self, user_id: int, agent_id: str, scope: Scope) -> str:
        _check_owner(user_id, agent_id)
        column = state_table.c[_COLUMNS[scope]]
        async with self.engine.connect() as conn:
            text = await conn.scalar(
                sa.select(column).where(_owner(state_table, user_id, agent_id))
            )
        return text or ""

    async def _versioned_text(self, user_id: int, agent_id: str, scope: Scope, version: int) -> str:
        if isinstance(version, bool) or not isinstance(version, int):
            raise InvalidArgument(f"version must be an integer, got {version!r}")
        if version <= 0:
            return await self._current_text(user_id, agent_id, scope)
        _check_owner(user_id, agent_id)
        async with self.engine.connect() as conn:
            return await _text_at(conn, user_id, agent_id, scope, version)

    # -- ProfileStore ---------------------------------------------------------------

    async def get_profile(self, user_id: int, agent_id: str) -> str:
        return await self.get_profile_at(user_id, agent_id, 0)

    async def set_profile(
        self, user_id: int, agent_id: str, content: str, options: WriteOptions | None = None
    ) -> int:
        version, _ = await self._write_scope(
            user_id, agent_id, Scope.PROFILE, _text_change(content), options
        )
        return version

    async def get_soul(self, user_id: int, agent_id: str) -> str:
        return await self._current_text(user_id, agent_id, Scope.SOUL)

    async def set_soul(
        self, user_id: int, agent_id: str, content: str, options: WriteOptions | None = None
    ) -> int:
        version, _ = await self._write_scope(
            user_id, agent_id, Scope.SOUL, _text_change(content), options
        )
        return version

    # -- ConstraintStore ------------------------------------------------------------

    async def get_constraints(self, user_id: int, agent_id: str) -> list[ConstraintEntry]:
        return parse_constraints(await self._current_text(user_id, agent_id, Scope.CONSTRAINT))

    async def add_constraint(
        self, user_id: int, agent_id: str, text: str, options: WriteOptions | None = None
    ) -> list[ConstraintEntry]:
        if not isinstance(text, str) or not text.strip():
            raise InvalidArgument("a constraint needs some text")
        text = storable(text.strip())
        if len(text) > MAX_CONSTRAINT_CHARS:
            raise InvalidArgument(
                f"a constraint is at most {MAX_CONSTRAINT_CHARS} characters, got {len(text)}"
            )

        async def change(_conn: AsyncConnection, _version: int, old: str) -> tuple[str, Action]:
            entries = parse_constraints(old)
            entries.append(
                ConstraintEntry(
                    id=_new_constraint_id({e.id for e in entries}),
                    text=text,
                    created_at=utcnow().isoformat(timespec="seconds"),
                )
            )
            return dump_constraints(entries), Action.CREATE

        _, after = await self._write_scope(user_id, agent_id, Scope.CONSTRAINT, change, options)
        return parse_constraints(after)

    async def remove_constraint(
        self,
        user_id: int,
        agent_id: str,
        constraint_id: str,
        options: WriteOptions | None = None,
    ) -> list[ConstraintEntry]:
        wanted = constraint_id.strip() if isinstance(constraint_id, str) else ""
        if not wanted:
            raise InvalidArgument("a constraint id is required")

        async def change(_conn: AsyncConnection, _version: int, old: str) -> tuple[str, Action]:
            entries = parse_constraints(old)
            kept = [e for e in entries if e.id != wanted]
            if len(kept) == len(entries):
                # Raised inside the transaction: it rolls back and nothing is written.
                raise NotFound(f"no constraint with id {wanted!r}")
            return dump_constraints(kept), Action.DELETE

        _, after = await self._write_scope(user_id, agent_id, Scope.CONSTRAINT, change, options)
        return parse_constraints(after)

    # -- VersionedProfileStore / VersionedConstraintStore ---------------------------

    async def memory_version(self, user_id: int, agent_id: str) -> int:
        _check_owner(user_id, agent_id)
        async with self.engine.connect() as conn:
            return await _current_version(conn, user_id, agent_id)

    async def get_profile_at(self, user_id: int, agent_id: str, version: int) -> str:
        free = await self._versioned_text(user_id, agent_id, Scope.PROFILE, version)
        return render_profile(await self.facts_at(user_id, agent_id, version), free)

    async def get_soul_at(self, user_id: int, agent_id: str, version: int) -> str:
        return await self._versioned_text(user_id, agent_id, Scope.SOUL, version)

    async def get_constraints_at(
        self, user_id: int, agent_id: str, version: int
    ) -> list[ConstraintEntry]:
        return parse_constraints(
            await self._versioned_text(user_id, agent_id, Scope.CONSTRAINT, version)
        )

    async def rollback(
        self,
        user_id: int,
        agent_id: str,
        scope: str,
        version: int,
        options: WriteOptions | None = None,
    ) -> int:
        """Write `scope` as it was at `version` (1..current) as a new version.

        Unlike reads, version <= 0 is refused rather than read as "current": rolling
        back to the current text would only add a meaningless version.
        """
        target = _scope(scope, tuple(_COLUMNS))
        _check_owner(user_id, agent_id)
        if isinstance(version, bool) or not isinstance(version, int) or version <= 0:
            raise InvalidArgument(f"version must be a positive integer, got {version!r}")

        async def change(conn: AsyncConnection, current: int, _old: str) -> tuple[str, Action]:
            if version > current:
                raise InvalidArgument(f"no version {version}: the current version is {current}")
            return await _text_at(conn, user_id, agent_id, target, version), Action.UPDATE

        new_version, _ = await self._write_scope(user_id, agent_id, target, change, options)
        return new_version

    # -- ChangelogReader / ChangelogWriter ------------------------------------------

    async def read_changelog(
        self, user_id: int, agent_id: str, scope: str = "", limit: int = 20
    ) -> list[ChangeEntry]:
        """Newest first; empty scope = all scopes; limit <= 0 = no limit."""
        _check_owner(user_id, agent_id)
        query = (
            sa.select(changelog_table)
            .where(_owner(changelog_table, user_id, agent_id))
            .order_by(changelog_table.c.id.desc())
        )
        if scope:
            query = query.where(changelog_table.c.scope == scope)
        if limit > 0:
            query = query.limit(limit)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [changelog_entry(r) for r in rows]

    async def write_changelog(self, entry: ChangeEntry) -> None:
        """Record an event that is not a store write (e.g. scope `compaction`).

        Empty `source` and `session_id` come from the context; absent versions are the
        current version (the event happened at it; it does not create one).
        """
        async with write_transaction(self.engine) as conn:
            await self.record_changelog(conn, entry)

    async def record_compaction(
        self, conn: AsyncConnection, session: Session, before_text: str, after_text: str
    ) -> None:
        """The changelog row of a compaction of `session`, inside the transaction that
        applies it; the source is the caller's (user for /compact, system when automatic).

        The session's snapshot moves to the current version in the same transaction: the
        compaction rewrites the start of the context, so the model server's cached prefix
        is lost anyway, and what reflect or the agent's own writes changed in profile,
        soul and rules reaches the system prompt at no extra cache cost. (Whoever serves
        turns in this process calls `memory.storage.snapshots.moved()` once it committed.) The
        summaries' usage (the context's ledger, memory/storage/usage.py) is stored with it."""
        await self._advance_snapshot_in(conn, session.id, session.user_id, session.agent_id)
        await write_pending(conn)
        await self.record_changelog(
            conn,
            ChangeEntry(
                user_id=session.user_id,
                agent_id=session.agent_id,
                scope=Scope.COMPACTION,
                action=Action.COMPACT,
                source="",
                session_id=session.id,
                before_text=before_text,
                after_text=after_text,
            ),
        )

    async def record_changelog(self, conn: AsyncConnection, entry: ChangeEntry) -> None:
        """`write_changelog` inside the caller's write transaction, so the event and its
        record commit together (a provider's compaction, say)."""
        _check_owner(entry.user_id, entry.agent_id)
        if not entry.scope or entry.scope in {s.value for s in (*_COLUMNS, Scope.FACT)}:
            raise InvalidArgument(
                f"write_changelog cannot record scope {entry.scope!r}: profile, soul, "
                "constraint and fact rows are written by the stores themselves"
            )
        if not entry.action:
            raise InvalidArgument("a changelog entry needs an action")
        try:
            source = ChangeSource(entry.source) if entry.source else change_source_from_context()
        except ValueError as exc:
            raise InvalidArgument(f"unknown change source {entry.source!r}") from exc
        session_id = entry.session_id or session_id_from_context()
        current = await _current_version(conn, entry.user_id, entry.agent_id)
        await conn.execute(
            sa.insert(changelog_table).values(
                user_id=entry.user_id,
                agent_id=entry.agent_id,
                session_id=session_id[:MAX_SESSION_ID_CHARS],
                scope=entry.scope[:32],
                action=entry.action[:32],
                source=source.value,
                version_before=current if entry.version_before is None else entry.version_before,
                version_after=current if entry.version_after is None else entry.version_after,
                before_text=storable(entry.before_text),
                after_text=storable(entry.after_text),
                created_at=as_utc(entry.created_at) or utcnow(),
            )
        )

    async def erase_stores(self, conn: AsyncConnection, user_id: int, agent_id: str) -> int:
        """Delete (user, agent)'s profile, soul, constraints, facts, all their versions
        (the changelog) and session snapshots, in the caller's transaction (an erasure,
        which then records itself). Returns how many changelog rows went."""
        await erase_facts(conn, user_id, agent_id)
        rows = int(
            await conn.scalar(
                sa.select(sa.func.count())
                .select_from(changelog_table)
                .where(_owner(changelog_table, user_id, agent_id))
            )
            or 0
        )
        await conn.execute(
            changelog_table.delete().where(_owner(changelog_table, user_id, agent_id))
        )
        await conn.execute(state_table.delete().where(_owner(state_table, user_id, agent_id)))
        await conn.execute(snapshot_table.delete().where(_owner(snapshot_table, user_id, agent_id)))
        return rows

    # -- SessionSnapshotStore -------------------------------------------------------

    async def get_or_create_snapshot(
        self, session_id: str, user_id: int, agent_id: str
    ) -> SessionSnapshot:
        """The session's frozen version; the first call freezes the current one."""
        _check_session_id(session_id)
        _check_owner(user_id, agent_id)
        query = sa.select(snapshot_table).where(snapshot_table.c.session_id == session_id)
        # Every turn asks, and only a session's first turn creates: read first, so the
        # common case takes no write lock (SQLite has one writer for everything).
        async with self.engine.connect() as conn:
            row = (await conn.execute(query)).one_or_none()
        if row is None:
            row = await self._create_snapshot(query, session_id, user_id, agent_id)
        if row.user_id != user_id or row.agent_id != agent_id:
            raise Conflict(f"session {session_id!r} belongs to another user or agent")
        return _snapshot(row)

    async def _create_snapshot(
        self, query: sa.Select[*tuple[Any, ...]], session_id: str, user_id: int, agent_id: str
    ) -> sa.Row[*tuple[Any, ...]]:
        async with write_transaction(self.engine) as conn:
            row = (await conn.execute(query)).one_or_none()
            if row is None:  # (another writer may have created it since our read)
                await _insert_current_snapshot(conn, session_id, user_id, agent_id)
                row = (await conn.execute(query)).one()
        return row

    async def advance_snapshot(self, session_id: str, user_id: int, agent_id: str) -> None:
        """Move the session's snapshot to the current version (creating it if needed)."""
        async with write_transaction(self.engine) as conn:
            await self._advance_snapshot_in(conn, session_id, user_id, agent_id)

    async def _advance_snapshot_in(
        self, conn: AsyncConnection, session_id: str, user_id: int, agent_id: str
    ) -> None:
        """`advance_snapshot` inside the caller's write transaction."""
        _check_session_id(session_id)
        _check_owner(user_id, agent_id)
        version = await _insert_current_snapshot(conn, session_id, user_id, agent_id)
        owner = (
            await conn.execute(
                sa.select(snapshot_table.c.user_id, snapshot_table.c.agent_id).where(
                    snapshot_table.c.session_id == session_id
                )
            )
        ).one()
        if owner.user_id != user_id or owner.agent_id != agent_id:
            raise Conflict(f"session {session_id!r} belongs to another user or agent")
        await conn.execute(
            sa.update(snapshot_table)
            .where(snapshot_table.c.session_id == session_id)
            .values(version=version, updated_at=utcnow())
        )


async def _insert_current_snapshot(
    conn: AsyncConnection, session_id: str, user_id: int, agent_id: str
) -> int:
    """Give `session_id` a snapshot at the owner's current version unless it has one
    (a concurrent creator wins); the current version."""
    version = await _current_version(conn, user_id, agent_id)
    await conn.execute(
        conflict_insert(conn, snapshot_table)
        .values(
            session_id=session_id,
            user_id=user_id,
            agent_id=agent_id,
            version=version,
            updated_at=utcnow(),
        )
        .on_conflict_do_nothing(index_elements=["session_id"])
    )
    return version
