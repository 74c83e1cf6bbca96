"""Session rotation (`/new`): which session of a conversation is live.

A channel hands the conversation service a *base* session (say one per private chat); its live session is
generation n of it (`Session.at_generation`, stored as `<base>#<n>`; the base session
itself is generation 0). `/new` archives the live session through `SessionManager`
(`SessionInfo.archived`); the live generation is then found again after a restart as "the
highest generation stored for this base, plus one if that one is archived". With a
provider that is not a SessionManager the generation lives in memory only (a restart
returns to the base session; its history is never lost either way).

A channel resolves the live session before the turn takes its lock, so a `/new` (on any
replica) can archive it in between. With a provider on `memory.storage.history` the user's
message is appended with `AppendOptions(live_only=True)`: refused there (`SessionArchived`), the
turn runs again in the live session, resolved afresh (`live_after_archive`), and the
message is stored once.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from memory.contract.capabilities import Provider, SessionManager
from memory.contract.errors import NotFound
from memory.contract.types import ListOptions, Session, SessionInfo, parse_session_id

log = logging.getLogger(__name__)

CURRENT_CACHE_SIZE = 10_000


class SessionRotation:
    """The live session of each conversation, cached per process (bounded), and `/new`.

    `replicas`: another process may change this store's sessions, so a cached session is
    checked before use. `hold`: the whole-turn lock of a session id (never archive a
    session under a running turn)."""

    def __init__(
        self,
        provider: Provider,
        *,
        replicas: bool,
        hold: Callable[[str], AbstractAsyncContextManager[None]],
    ) -> None:
        self.provider = provider
        self._replicas = replicas
        self._hold = hold
        # base id -> live session, most recently used last (bounded: see current)
        self._current: OrderedDict[str, Session] = OrderedDict()

    def _manager(self) -> SessionManager | None:
        return self.provider if isinstance(self.provider, SessionManager) else None

    async def current(self, base: Session) -> Session:
        """The live session of the conversation `base` stands for (see module doc).

        The cache is per process, so where replicas share the store (distributed turn
        locks: PostgreSQL) a cached session is checked (one read by the unique session
        id) not to have been archived since by a `/new` on another replica. A `/new`
        landing between this check and the turn's append is caught by the append
        itself (see the module doc). On SQLite one process serves (docs/OPERATIONS.md),
        and its own `/new` updates this cache."""
        cached = self._current.get(base.id)
        if cached is not None:
            self._current.move_to_end(base.id)
            if not self._replicas or not await self.archived(cached):
                return cached
        session = await self._resolve(base)
        self._remember(base.id, session)
        return session

    def _remember(self, base_id: str, session: Session) -> None:
        self._current[base_id] = session
        self._current.move_to_end(base_id)
        while len(self._current) > CURRENT_CACHE_SIZE:
            self._current.popitem(last=False)  # resolved again from the store when needed

    async def live_after_archive(self, archived: Session) -> Session:
        """The live session of the conversation `archived` belonged to, resolved from
        the store (its cached entry is stale)."""
        base = archived.base()
        self._current.pop(base.id, None)
        return await self.current(base)

    async def archived(self, session: Session) -> bool:
        """Whether a `/new` archived `session` (False when that cannot be told)."""
        manager = self._manager()
        if manager is None:
            return False  # the generation lives in this process only
        try:
            return (await manager.load_info(session.id)).archived
        except NotFound:
            return False  # nothing stored in it yet: live
        except Exception as exc:  # the turn itself reports a store that is down
            log.warning("could not check whether session %s is archived: %s", session.id, exc)
            return False

    async def _resolve(self, base: Session) -> Session:
        manager = self._manager()
        if manager is None:
            return base
        infos = await manager.list_info(
            ListOptions(agent_id=base.agent_id, user_id=base.user_id, include_archived=True)
        )
        best: SessionInfo | None = None
        best_generation = 0
        for info in infos:
            info_base, generation = parse_session_id(info.id)
            if info_base == base.id and (best is None or generation > best_generation):
                best, best_generation = info, generation
        if best is None:
            return base
        return base.at_generation(best_generation + 1 if best.archived else best_generation)

    async def new(self, base: Session) -> Session:
        """Archive the live session of `base` and return the next one (`/new`)."""
        current = await self.current(base)
        async with self._hold(current.id):  # never archive under a running turn
            manager = self._manager()
            if manager is not None:
                try:
                    info = await manager.load_info(current.id)
                except NotFound:
                    info = SessionInfo(
                        id=current.id,
                        agent_id=current.agent_id,
                        user_id=current.user_id,
                        channel=current.channel,
                    )
                await manager.save_info(dataclasses.replace(info, archived=True))
            nxt = base.at_generation(current.generation + 1)
            self._remember(base.id, nxt)
        return nxt
