"""`Conversations`: every channel's way into a conversation.

A facade over the modules beside it: `turn_locks` (one turn at a time per session),
`turns` (one turn, resumed or read back), `rotation` (`/new`), `compaction` (after a
turn, and `/compact`). A turn whose session a `/new` archived meanwhile
(`SessionArchived`: nothing stored) follows the message to the live session, at most
`SESSION_MOVES` times.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager

from bot.config.settings import Settings
from bot.conversation.budgets import Budgets
from bot.conversation.compaction import COMPACTIONS_AT_ONCE, CompactionScheduler
from bot.conversation.rotation import SessionRotation
from bot.conversation.session_binding import bind_session
from bot.conversation.store_wait import StoreWait, no_wait
from bot.conversation.turn_locks import DEFAULT_IDLE_S, LocalTurnLocks, TurnLocks
from bot.conversation.turns import (
    MEMORY_DOWN,
    MEMORY_FAILED_KEPT,
    AlreadyStored,
    Receipt,
    Reply,
    ToolFactory,
    Turns,
    memory_tools,
)
from bot.model.client import OnDelta
from bot.model.images import Image
from bot.model.prompt import MemoryReader
from bot.model.tool_loop import Completer
from bot.runtime.metrics import record_turn
from memory.actions import origins, provenance
from memory.contract.capabilities import Provider
from memory.contract.errors import SessionArchived
from memory.contract.types import CompactionResult, Origin, Session

# What channels and tests take from here; each lives in the module named above.
__all__ = [
    "COMPACTIONS_AT_ONCE",
    "AlreadyStored",
    "Conversations",
    "Receipt",
    "Reply",
    "TurnLocks",
    "bind_session",
    "memory_tools",
]

log = logging.getLogger(__name__)

# Times one message follows its session to the next generation (each needs another /new
# to commit meanwhile); the last try appends wherever it is, archived or not: kept.
SESSION_MOVES = 3


class Conversations:
    def __init__(
        self,
        provider: Provider,
        llm: Completer,
        settings: Settings,
        *,
        locks: TurnLocks | None = None,
        idle_s: float = DEFAULT_IDLE_S,
        tools: ToolFactory | None = memory_tools,
        clock: Callable[[], float] = time.monotonic,
        budgets: Budgets | None = None,
    ) -> None:
        """`locks`: shared turn locks (the app passes `SessionLocks`); without them the
        service keeps in-process locks, one slot per session, reaped after `idle_s`.
        `budgets`: token limits and the background spend guard (bot.conversation.budgets)."""
        self.provider = provider
        self.llm = llm
        self.settings = settings
        self._local_locks = LocalTurnLocks(idle_s=idle_s, clock=clock)
        self._locks: TurnLocks = locks if locks is not None else self._local_locks
        # Can another process change this store's sessions? Unknown locks: assume so.
        replicas = getattr(locks, "distributed", True)
        memory = MemoryReader(provider, cache_snapshots=not replicas)
        self.budgets = budgets
        self._turns = Turns(provider, llm, settings, tools=tools, memory=memory, budgets=budgets)
        self.recaller = self._turns.recaller
        self._rotation = SessionRotation(provider, replicas=replicas, hold=self._hold)
        self._compaction = CompactionScheduler(
            provider,
            settings,
            usage=self._turns.usage,
            calibration=self._turns.calibration,
            budgets=budgets,
        )
        # Told of each session whose memory a reflect review changed (a channel sends
        # the user a digest: bot/channels/telegram/review/digest.py); best effort.
        self.reflect_listeners: list[Callable[[Session], Awaitable[None]]] = []
        self._closed = False

    def _hold(self, session_id: str) -> AbstractAsyncContextManager[None]:
        """The session's turn lock: turns of one session never interleave."""
        return self._locks.hold(session_id)

    # --- slots ----------------------------------------------------------------------

    @property
    def idle_s(self) -> float:
        """How long an unused in-process slot is kept."""
        return self._local_locks.idle_s

    @property
    def active_sessions(self) -> int:
        return self._local_locks.active

    def reap_idle(self) -> int:
        """Drop slots unused for `idle_s`; returns how many went."""
        return self._local_locks.reap_idle()

    # --- turns ----------------------------------------------------------------------

    async def chat(
        self,
        session: Session,
        text: str,
        *,
        on_delta: OnDelta | None = None,
        receipt: Receipt | None = None,
        images: Sequence[Image] = (),
        origin: Origin | None = None,
        wait: StoreWait | None = None,
    ) -> Reply:
        """One user message in, one reply out. Never raises for model or memory failures:
        those become `Reply(error=True)` with a plain line naming the problem. `receipt`
        is written with the user's message (see `Receipt`); a message it finds stored
        already gives `Reply(skipped=True)`, to be shown nothing. `images` go to the
        model with this message, in this turn only (see `bot.conversation.turns`). `origin`: where the
        channel received it, stored with it (memory/actions/origins.py). `wait`: how long the
        turn may wait for a memory store that is down (`bot.conversation.store_wait`; none by
        default)."""
        if self._closed:
            raise RuntimeError("the conversation service is closed")
        if not text.strip():
            return Reply("There is nothing to answer: the message is empty.", error=True)
        wait = wait or no_wait()
        started = time.monotonic()
        moves = 0
        archived: Session | None = None  # to follow to its live session
        while True:
            entered = False
            try:
                if archived is not None:
                    session = await self._rotation.live_after_archive(archived)
                    archived = None
                async with self._hold(session.id):
                    entered = True
                    with bind_session(session):
                        reply = await self._turns.run(
                            session,
                            text,
                            on_delta,
                            receipt,
                            live_only=moves < SESSION_MOVES,
                            images=images,
                            origin=origin,
                            wait=wait,
                        )
                break
            except SessionArchived:  # nothing stored: follow it to the live session
                moves += 1
                archived = session
            except Exception as exc:
                if entered:
                    raise
                # The turn lock lives in the database on PostgreSQL: a database that is
                # down fails here (or finding the live session), before anything was stored.
                if await wait.pause(exc, f"the turn lock of session {session.id}"):
                    continue
                log.exception("could not take the turn lock of session %s", session.id)
                reply = Reply(MEMORY_DOWN, error=True)
                break
        if reply.skipped:
            return reply  # no turn happened here
        return self._turn_done(session, reply, started)

    async def chat_unstored(
        self,
        session: Session,
        text: str,
        *,
        on_delta: OnDelta | None = None,
        images: Sequence[Image] = (),
    ) -> Reply:
        """Answer `text` in `session` storing nothing of it (`Turns.unstored`: a group
        member who opted out), under the session's turn lock so it reads the
        conversation between turns. Never raises for model or memory failures."""
        if self._closed:
            raise RuntimeError("the conversation service is closed")
        if not text.strip():
            return Reply("There is nothing to answer: the message is empty.", error=True)
        started = time.monotonic()
        async with self._hold(session.id):
            with bind_session(session):
                reply = await self._turns.unstored(session, text, on_delta, images)
        record_turn(
            time.monotonic() - started, ok=not reply.error or reply.limited, limited=reply.limited
        )
        return reply

    def _turn_done(self, session: Session, reply: Reply, started: float) -> Reply:
        """A turn's metrics, and the compaction check that follows a successful one."""
        record_turn(
            time.monotonic() - started, ok=not reply.error or reply.limited, limited=reply.limited
        )
        if not reply.error:
            self._compaction.schedule(session)
        return reply

    async def resume(self, session: Session, *, on_delta: OnDelta | None = None) -> Reply | None:
        """Answer what the session's last stored message asked, if nobody has: a turn
        cut short by a stop or a crash after its message was stored. None when the
        conversation does not end with a user message (it was answered meanwhile) or
        was archived by a /new (for providers on `memory.storage.history`, which check that).
        The turn's images were never stored: a resumed photo is answered from its text."""
        if self._closed:
            raise RuntimeError("the conversation service is closed")
        started = time.monotonic()
        async with self._hold(session.id):
            with bind_session(session):
                try:
                    context = await self._turns.owed(session)
                except Exception:
                    log.exception("memory failed before resuming session %s", session.id)
                    return Reply(MEMORY_FAILED_KEPT, error=True)
                if context is None:
                    return None
                try:
                    # A /new since the message was stored: the user has moved on.
                    reply = await self._turns.answer(session, context, on_delta, live_only=True)
                except SessionArchived:
                    log.info("session %s was archived before its owed answer", session.id)
                    return None
        return self._turn_done(session, reply, started)

    async def stored_answer(self, session: Session) -> str | None:
        """The answer the session's last turn stored, read back (no model call): for a
        channel that could not send it. None when the conversation does not end with an
        answer, or was archived by a /new since (the user has moved on, as in `resume`)."""
        if self._closed:
            raise RuntimeError("the conversation service is closed")
        async with self._hold(session.id):  # not half-way through a turn
            with bind_session(session):
                if await self._rotation.archived(session):
                    return None
                return await self._turns.last_answer(session)

    async def answered(self, session: Session, asked: Origin) -> Reply | None:
        """The stored answer to the message received from `asked`, its sources found
        again from its turn (memory.actions.provenance's `answered`): for a channel sending it
        again after a restart. None when it cannot be read back that way."""
        with bind_session(session):
            found = await provenance.answered(self.provider, session, asked)
        return None if found is None else Reply(found.text, sources=found.sources)

    async def unshown(self, session: Session, asked: Origin) -> Reply | None:
        """The stored answer to the message from `asked` when no channel has reported it
        sent (memory.actions.origins' `answer_shown`), its sources found again as in `answered`:
        an answer a crash cut off between storing and sending. None when it was sent,
        is not stored, or the provider cannot tell. Call it holding `turn_lock`."""
        if await self.answer_shown(session, asked) is not False:
            return None
        return await self.answered(session, asked)

    async def answer_shown(self, session: Session, asked: Origin) -> bool | None:
        """Whether the stored answer to the message from `asked` was reported sent
        (memory.actions.origins' `answer_shown`); None when that cannot be told."""
        with bind_session(session):
            return await origins.answer_shown(self.provider, session, asked)

    def turn_lock(self, session: Session) -> AbstractAsyncContextManager[None]:
        """The session's turn lock (across replicas on PostgreSQL), for a channel that
        sends a stored answer once: a second process waits, then finds it sent."""
        return self._hold(session.id)

    async def answer_id(self, session: Session, asked: Origin) -> str | None:
        """The id of the stored answer to the message from `asked` (memory.actions.origins'
        `answer_id`), looked up while it is being sent; None when there is none."""
        with bind_session(session):
            return await origins.answer_id(self.provider, session, asked)

    async def answer_sent(
        self, session: Session, asked: Origin, sent: Origin, answer: str | None = None
    ) -> bool:
        """The stored answer to the message from `asked` (id `answer`, when looked up
        already) went out as `sent`: recorded as its origin (memory.actions.origins'
        `answer_sent`); False when nothing was recorded."""
        with bind_session(session):
            return await origins.answer_sent(self.provider, session, asked, sent, answer)

    # --- compaction ------------------------------------------------------------------

    @property
    def auto_compaction(self) -> bool:
        return self._compaction.automatic

    @property
    def background_tasks(self) -> set[asyncio.Task[None]]:
        """Automatic compactions running or queued (asyncio tasks)."""
        return self._compaction.background_tasks

    async def compact(self, session: Session) -> CompactionResult:
        """Full compaction now (`/compact`). Raises Unsupported without a Compactor."""
        return await self._compaction.compact(session)

    def schedule_compaction(self, session: Session) -> None:
        """Compact `session` in the background if it needs it, as after a turn (the
        sessions a chat import filled, say)."""
        self._compaction.schedule(session)

    async def drain(self) -> None:
        """Wait for every background task (tests, shutdown)."""
        await self._compaction.drain()

    # --- session rotation ------------------------------------------------------------

    async def current_session(self, base: Session) -> Session:
        """The live session of the conversation `base` stands for (see `bot.conversation.rotation`)."""
        return await self._rotation.current(base)

    async def new_session(self, base: Session) -> Session:
        """Archive the live session of `base` and return the next one (`/new`)."""
        return await self._rotation.new(base)

    # --- lifecycle -------------------------------------------------------------------

    async def close(self, *, timeout_s: float = 10.0) -> None:
        """Let background compactions finish (up to `timeout_s`), cancel the rest."""
        self._closed = True
        await self._compaction.close(timeout_s=timeout_s)
