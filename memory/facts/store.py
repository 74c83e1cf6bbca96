"""`FactStores`: the FactStore capability as a mixin of `SharedStores`
(memory/storage/stores.py), which supplies the one versioned write path (lock the
owner's state row, bump the version counter shared with profile, soul and rules, write
the changelog row) and the owner check."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.contract.errors import InvalidArgument, NotFound
from memory.contract.facts import (
    DEFAULT_MAX_FACTS,
    Fact,
    FactChange,
    FactOp,
    FactState,
)
from memory.contract.options import WriteOptions
from memory.contract.types import Action, ChangeSource, Scope, as_utc
from memory.facts.apply import Applied, Writer, apply_ops
from memory.facts.models import facts
from memory.facts.revert import changelog_lists, revert_rows
from memory.facts.rows import facts_by_id, owner_clause, read_facts
from memory.storage.store_models import MemoryChangelog

changelog: sa.Table = MemoryChangelog.__table__  # type: ignore[attr-defined]


def _dump(items: Sequence[Fact]) -> str:
    return json.dumps([f.to_dict() for f in items], ensure_ascii=False)


def _action(applied: Applied) -> Action:
    kinds = {c.action for c in applied.changes}
    if kinds <= {"created"}:
        return Action.CREATE
    if kinds <= {"retracted"}:
        return Action.DELETE
    return Action.UPDATE


class FactStores:
    """Implements `memory.contract.facts.FactStore` over `self.engine`."""

    engine: AsyncEngine
    # The cap on current facts per (user, agent); providers set `memory.max_facts`.
    max_facts: int = DEFAULT_MAX_FACTS

    # -- supplied by SharedStores ----------------------------------------------------

    async def _versioned_write(
        self,
        user_id: int,
        agent_id: str,
        scope: Scope,
        options: WriteOptions | None,
        body: Callable[[AsyncConnection, int, ChangeSource], Awaitable[tuple[Action, str, str]]],
    ) -> tuple[int, int]:
        raise NotImplementedError  # pragma: no cover (SharedStores)

    def _check_owner(self, user_id: int, agent_id: str) -> None:
        raise NotImplementedError  # pragma: no cover (SharedStores)

    # -- writes ----------------------------------------------------------------------

    async def _fact_write(
        self,
        user_id: int,
        agent_id: str,
        options: WriteOptions | None,
        change: Callable[[AsyncConnection, Writer], Awaitable[Applied]],
    ) -> list[FactChange]:
        who = options or WriteOptions.from_context()
        applied = Applied()

        async def body(
            conn: AsyncConnection, version: int, source: ChangeSource
        ) -> tuple[Action, str, str]:
            nonlocal applied
            w = Writer(user_id, agent_id, version, source.value, who.session_id[:255])
            applied = await change(conn, w)
            after = await facts_by_id(conn, applied.touched)
            before = [applied.before[i] for i in applied.touched if i in applied.before]
            return (
                _action(applied),
                _dump(before),
                _dump([after[i] for i in applied.touched if i in after]),
            )

        _, changelog_id = await self._versioned_write(user_id, agent_id, Scope.FACT, who, body)
        return [
            FactChange(c.action, c.fact, c.closed, c.dropped_ids, c.version, changelog_id)
            for c in applied.changes
        ]

    async def apply_facts(
        self,
        user_id: int,
        agent_id: str,
        ops: Sequence[FactOp],
        options: WriteOptions | None = None,
    ) -> list[FactChange]:
        cap = self.max_facts

        async def change(conn: AsyncConnection, w: Writer) -> Applied:
            return await apply_ops(conn, w, ops, cap)

        return await self._fact_write(user_id, agent_id, options, change)

    async def revert_fact_change(
        self,
        user_id: int,
        agent_id: str,
        changelog_id: int,
        options: WriteOptions | None = None,
    ) -> list[FactChange]:
        if isinstance(changelog_id, bool) or not isinstance(changelog_id, int):
            raise InvalidArgument(f"a changelog id is an integer, got {changelog_id!r}")
        self._check_owner(user_id, agent_id)
        log = changelog

        async def change(conn: AsyncConnection, w: Writer) -> Applied:
            row = (
                await conn.execute(
                    sa.select(log.c.before_text, log.c.after_text).where(
                        log.c.id == changelog_id,
                        log.c.user_id == user_id,
                        log.c.agent_id == agent_id,
                        log.c.scope == Scope.FACT.value,
                    )
                )
            ).one_or_none()
            if row is None:
                raise NotFound(f"no fact change {changelog_id} in this memory")
            before, after = changelog_lists(row.before_text, row.after_text)
            return await revert_rows(conn, w, before, after)

        return await self._fact_write(user_id, agent_id, options, change)

    # -- reads -----------------------------------------------------------------------

    async def _read(
        self, user_id: int, agent_id: str, *where: sa.ColumnElement[bool]
    ) -> list[Fact]:
        self._check_owner(user_id, agent_id)
        query = (
            sa.select(facts)
            .where(owner_clause(user_id, agent_id), *where)
            .order_by(facts.c.key, facts.c.valid_from, facts.c.id)
        )
        async with self.engine.connect() as conn:
            return await read_facts(conn, query)

    async def current_facts(self, user_id: int, agent_id: str) -> list[Fact]:
        return await self._read(user_id, agent_id, facts.c.state == FactState.CURRENT.value)

    async def facts_at(self, user_id: int, agent_id: str, version: int) -> list[Fact]:
        if isinstance(version, bool) or not isinstance(version, int):
            raise InvalidArgument(f"version must be an integer, got {version!r}")
        if version <= 0:
            return await self.current_facts(user_id, agent_id)
        return await self._read(
            user_id,
            agent_id,
            facts.c.version_from <= version,
            sa.or_(facts.c.version_to.is_(None), facts.c.version_to > version),
        )

    async def facts_as_of(self, user_id: int, agent_id: str, when: datetime) -> list[Fact]:
        if not isinstance(when, datetime):
            raise InvalidArgument("facts_as_of needs a date and time")
        at = as_utc(when)
        return await self._read(
            user_id,
            agent_id,
            facts.c.state != FactState.REVERTED.value,
            facts.c.valid_from <= at,
            sa.or_(facts.c.valid_to.is_(None), facts.c.valid_to > at),
        )

    async def fact_history(
        self, user_id: int, agent_id: str, topic: str | None = None
    ) -> list[Fact]:
        every = await self._read(user_id, agent_id)
        by_id = {f.id: f for f in every}
        found = [f for f in every if not _yielded(f, by_id)]
        if topic:
            needle = " ".join(topic.split()).casefold()
            found = [f for f in found if needle in f.key or needle in f.value.casefold()]
        return sorted(found, key=lambda f: (f.valid_from, f.version_from, f.id))


def _yielded(fact: Fact, by_id: dict[str, Fact]) -> bool:
    """A closed row a revert reopened as a copy (memory/facts/revert.py): the copy tells
    its story, the row would only repeat it."""
    copy = by_id.get(fact.replaced_by or "")
    return (
        copy is not None
        and fact.valid_to == fact.valid_from
        and (copy.key, copy.value, copy.valid_from) == (fact.key, fact.value, fact.valid_from)
    )
