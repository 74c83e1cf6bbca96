"""The pool: every channel's way into a conversation.

One runner slot (a lock) per session: two messages for one session never interleave their
turns, different sessions run in parallel, and idle slots are reaped. A turn:

1. bootstrap the session; seed the identity files (SOUL.md, USER.md) once per
   (user, agent); get or create the session's snapshot version;
2. append the user's message on its own (so it is kept even if the model then fails);
3. build the system prompt (base + soul + profile + constraints at the snapshot version),
   assemble the history within `memory.budget_tokens` / `memory.fresh_tail`;
4. run the model with the memory tool (tool writes tagged `agent`);
5. append the rest of the turn (assistant tool calls, tool results, final answer) in one
   call, or nothing at all when the model failed: no half assistant turn is ever stored.

Images sent with a message (`chat(images=...)`, `bot.images`) go to the model with the
turn's user message in its model calls only: never stored, logged or resumed; each counts
`IMAGE_TOKENS` against `memory.budget_tokens`. A server that rejects them (400) fails the
turn like any model failure: the text is kept, the user gets the apology.

Automatic compaction runs *after* the reply, as a background task outside the session's
lock: the provider takes its own lock only for the short transaction that swaps items for
the summary, so no user waits for a summarizer. A failure logs a warning and changes
nothing.

Session rotation (`/new`): a channel hands the pool a *base* session (say one per private
chat); the live session is the base id plus a generation suffix, `<base>#<n>` (the base id
itself is generation 0). `/new` archives the live session through `SessionManager`
(`SessionInfo.archived`); the live generation is then found again after a restart as "the
highest generation stored for this base, plus one if that one is archived". With a
provider that is not a SessionManager the generation lives in memory only (a restart
returns to the base session; its history is never lost either way).

A channel resolves the live session before the turn takes its lock, so a `/new` (on any
replica) can archive it in between. With a provider on `memory.history` the user's
message is appended with `AppendOptions(live_only=True)`: refused there
(`SessionArchived`), the turn runs again in the live session, resolved afresh, and the
message is stored once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import time
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from sqlalchemy.ext.asyncio import AsyncConnection

from bot.config import Settings
from bot.images import IMAGE_TOKENS, Image
from bot.llm import LLMError, OnDelta
from bot.metrics import record_compaction, record_compaction_failure, record_turn
from bot.prompt import MemoryReader, build_system_prompt
from bot.runner import Completer, Tool, run_turn
from memory.append_hook import AppendHook
from memory.capabilities import (
    ChangelogReader,
    Compactor,
    ProfileStore,
    Provider,
    SessionManager,
)
from memory.context import with_agent_id, with_change_source, with_session_id, with_user_id
from memory.db import RECONNECT_ATTEMPTS, CommitUncertain, retry_on_disconnect
from memory.duties import AppendOptions, append_messages
from memory.errors import CompactionIncomplete, NotFound, SessionArchived, Unsupported
from memory.identity import IdentityStore, seed_identity
from memory.tokens import estimate_tokens
from memory.types import (
    ChangeSource,
    CompactionMode,
    CompactionResult,
    ListOptions,
    Message,
    Session,
    SessionInfo,
)

log = logging.getLogger(__name__)

GENERATION_SEP = "#"
DEFAULT_IDLE_S = 900.0
CURRENT_CACHE_SIZE = 10_000
SEEDED_CACHE_SIZE = 10_000  # (user, agent) pairs known seeded; forgetting one costs a read
# The history never gets less than this, whatever the system prompt costs.
MIN_HISTORY_BUDGET = 256
# Automatic compactions running at once in this process. Sessions cross the threshold in
# bursts (a busy hour, a restart); unbounded, each burst plans every compaction on the
# loop at once, delaying the replies being assembled meanwhile, and fires as many
# summarizer calls at the model as there are sessions. The rest wait their turn: nobody
# waits for them, the context stays within the budget meanwhile.
COMPACTIONS_AT_ONCE = 2
# Times one message follows its session to the next generation (each needs another /new
# to commit meanwhile); the last try appends wherever it is, archived or not: kept.
SESSION_MOVES = 3


@dataclass
class Reply:
    """What a channel shows: the answer, or (error=True) one plain line of apology.
    `skipped`: the message was stored elsewhere already (`AlreadyStored`): nothing to
    show, `text` is empty and whoever stored it answers it."""

    text: str
    error: bool = False
    skipped: bool = False


@dataclass
class _Slot:
    lock: asyncio.Lock
    last_used: float
    users: int = 0  # turns holding or waiting for the lock: never reaped while > 0


ToolFactory = Callable[[Any, Session], list[Tool]]


class AlreadyStored(Exception):
    """Raised by `Receipt.write`: the message was already stored elsewhere (another
    replica got the same delivery). The append rolls back, and the turn ends quietly
    with `Reply(skipped=True)`: a normal event, not a failure."""


class Receipt(Protocol):
    """A channel's record that a user message is stored (Telegram: its update id, so a
    redelivered update is neither stored nor answered twice)."""

    async def write(self, conn: AsyncConnection, *, session: Session) -> None:
        """Inside the append's own transaction (providers on `memory.history`), with the
        session the message went to. Raises `AlreadyStored` when the message was already
        stored elsewhere."""

    async def stored(self, atomic: bool) -> None:
        """After the append committed; `atomic`: `write` ran in its transaction."""


class TurnLocks(Protocol):
    """Whole-turn locks per session, e.g. `memory.session_lock.SessionLocks`, which also
    serialises one session's turns across replicas on PostgreSQL."""

    def hold(self, session_id: str) -> AbstractAsyncContextManager[None]: ...


# provider -> its tool schema (None: no actions). The schema depends only on the
# provider's capabilities, and building it runs many Protocol isinstance checks.
_schemas: weakref.WeakKeyDictionary[Any, dict[str, Any] | None] = weakref.WeakKeyDictionary()


def _tool_schema(provider: Provider) -> dict[str, Any] | None:
    from memory import tool as memory_tool

    try:
        return _schemas[provider]
    except (KeyError, TypeError):  # TypeError: a provider that takes no weak reference
        pass
    try:
        schema: dict[str, Any] | None = memory_tool.build_tool(provider)
    except ValueError:  # a provider with no tool actions at all
        schema = None
    with contextlib.suppress(TypeError):
        _schemas[provider] = schema
    return schema


def memory_tools(provider: Provider, session: Session) -> list[Tool]:
    """The `memory` tool for `session`, from `memory.tool` (every write tagged `agent`)."""
    from memory import tool as memory_tool

    schema = _tool_schema(provider)
    if schema is None:
        return []

    async def handler(args: dict[str, Any]) -> str:
        with bind_session(session), with_change_source(ChangeSource.AGENT):
            return await memory_tool.run_tool(provider, session, args)

    return [Tool(schema=schema, handler=handler)]


@contextmanager
def bind_session(session: Session) -> Iterator[None]:
    """Session, user and agent ids in the context, for stores that tag their writes."""
    with ExitStack() as stack:
        stack.enter_context(with_session_id(session.id))
        stack.enter_context(with_user_id(session.user_id))
        stack.enter_context(with_agent_id(session.agent_id))
        yield


def generation_of(base_id: str, session_id: str) -> int | None:
    """The generation of `session_id` under `base_id`, or None if it is not one of its."""
    if session_id == base_id:
        return 0
    prefix = base_id + GENERATION_SEP
    if session_id.startswith(prefix) and session_id[len(prefix):].isdigit():
        return int(session_id[len(prefix):])
    return None


def with_generation(base: Session, generation: int) -> Session:
    if generation == 0:
        return base
    return dataclasses.replace(base, id=f"{base.id}{GENERATION_SEP}{generation}")


# What a user reads when the memory store fails: what failed and whether their message
# is kept, never an exception's name (the traceback goes to the log).
MEMORY_DOWN = ("Sorry, my memory store failed, so your message was NOT saved. "
               "Please send it again.")
MEMORY_FAILED_KEPT = ("Sorry, my memory store failed before I could answer. Your message "
                      "is saved; please try again.")
ANSWER_NOT_SAVED = ("Sorry, my memory store failed while saving the answer, so I can't "
                    "show it. Your message is saved; please try again.")


def apology(reason: str) -> str:
    return f"Sorry, I couldn't answer: {reason}. Your message is saved; please try again."


class Pool:
    def __init__(self, provider: Provider, llm: Completer, settings: Settings, *,
                 locks: TurnLocks | None = None, idle_s: float = DEFAULT_IDLE_S,
                 tools: ToolFactory | None = memory_tools,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`locks`: shared turn locks (the app passes `SessionLocks`); without them the
        pool keeps in-process locks, one slot per session, reaped after `idle_s`."""
        self.provider = provider
        self._locks = locks
        self.llm = llm
        self.settings = settings
        self.idle_s = idle_s
        self._tools = tools
        self._clock = clock
        self._slots: dict[str, _Slot] = {}
        # (user, agent) pairs seeded by this process, most recently used last (bounded)
        self._seeded: OrderedDict[tuple[int, str], None] = OrderedDict()
        # Capability checks are Protocol isinstance calls: made once, not every turn.
        # Can another process change this store's sessions? Unknown locks: assume so.
        self._replicas = getattr(locks, "distributed", True)
        self._memory = MemoryReader(provider, cache_snapshots=not self._replicas)
        self._compactor = isinstance(provider, Compactor)
        self._can_seed = (isinstance(provider, ProfileStore)
                          and isinstance(provider, ChangelogReader))
        self._tool_tokens: tuple[tuple[Any, ...], int] | None = None
        # base id -> live session, most recently used last (bounded: see current_session)
        self._current: OrderedDict[str, Session] = OrderedDict()
        self._compacting: dict[str, asyncio.Task[None]] = {}
        self.background_tasks: set[asyncio.Task[None]] = set()
        self._compaction_slots = asyncio.Semaphore(COMPACTIONS_AT_ONCE)
        self._closed = False

    # --- slots ----------------------------------------------------------------------

    @property
    def active_sessions(self) -> int:
        return len(self._slots)

    def reap_idle(self) -> int:
        """Drop slots unused for `idle_s`; returns how many went."""
        now = self._clock()
        idle = [k for k, s in self._slots.items()
                if s.users == 0 and now - s.last_used >= self.idle_s]
        for key in idle:
            del self._slots[key]
        return len(idle)

    @contextmanager
    def _slot(self, session_id: str) -> Iterator[_Slot]:
        self.reap_idle()
        slot = self._slots.get(session_id)
        if slot is None:
            slot = self._slots[session_id] = _Slot(asyncio.Lock(), self._clock())
        slot.users += 1
        try:
            yield slot
        finally:
            slot.users -= 1
            slot.last_used = self._clock()

    @asynccontextmanager
    async def _hold(self, session_id: str) -> AsyncIterator[None]:
        """The session's turn lock: turns of one session never interleave."""
        if self._locks is not None:
            async with self._locks.hold(session_id):
                yield
            return
        with self._slot(session_id) as slot:
            async with slot.lock:
                yield

    # --- turns ----------------------------------------------------------------------

    async def chat(self, session: Session, text: str, *, on_delta: OnDelta | None = None,
                   receipt: Receipt | None = None, images: Sequence[Image] = ()) -> Reply:
        """One user message in, one reply out. Never raises for model or memory failures:
        those become `Reply(error=True)` with a plain line naming the problem. `receipt`
        is written with the user's message (see `Receipt`); a message it finds stored
        already gives `Reply(skipped=True)`, to be shown nothing. `images` go to the
        model with this message, in this turn only (see the module doc)."""
        if self._closed:
            raise RuntimeError("the pool is closed")
        if not text.strip():
            return Reply("There is nothing to answer: the message is empty.", error=True)
        started = time.monotonic()
        entered = False
        moves = 0
        try:
            while True:
                try:
                    async with self._hold(session.id):
                        entered = True
                        with bind_session(session):
                            reply = await self._turn(session, text, on_delta, receipt,
                                                     live_only=moves < SESSION_MOVES,
                                                     images=images)
                    break
                except SessionArchived:  # nothing stored: follow it to the live session
                    entered = False
                    moves += 1
                    session = await self._live_after_archive(session)
        except Exception:
            if entered:
                raise
            # The turn lock lives in the database on PostgreSQL: a database that is down
            # fails here, before anything was stored.
            log.exception("could not take the turn lock of session %s", session.id)
            reply = Reply(MEMORY_DOWN, error=True)
        if reply.skipped:
            return reply  # no turn happened here
        return self._turn_done(session, reply, started)

    def _turn_done(self, session: Session, reply: Reply, started: float) -> Reply:
        """A turn's metrics, and the compaction check that follows a successful one."""
        record_turn(time.monotonic() - started, ok=not reply.error)
        if not reply.error:
            self._schedule_compaction(session)
        return reply

    async def _turn(self, session: Session, text: str, on_delta: OnDelta | None,
                    receipt: Receipt | None, *, live_only: bool = False,
                    images: Sequence[Image] = ()) -> Reply:
        kept = False
        what = f"turn of session {session.id}"
        try:
            version = await retry_on_disconnect(lambda: self._prepare(session), what)
            hook = await self._append(session, [Message(role="user", content=text)],
                                      receipt=receipt, live_only=live_only)
            kept = True
            if receipt is not None and hook is not None:
                await receipt.stored(atomic=hook.ran)
            system, tools, history = await retry_on_disconnect(
                lambda: self._context(session, version, images=len(images)), what)
        except AlreadyStored as exc:
            log.info("message for session %s was already stored elsewhere, not again: %s",
                     session.id, exc)
            return Reply("", skipped=True)
        except SessionArchived:
            raise  # archived by a /new since the channel resolved it: chat() moves on
        except Exception:
            log.exception("memory failed before the model was called (session %s)", session.id)
            return Reply(MEMORY_FAILED_KEPT if kept else MEMORY_DOWN, error=True)
        return await self._answer(session, system, tools, history, on_delta, images)

    async def _prepare(self, session: Session) -> int | None:
        """The session's record, identity files and snapshot version (all idempotent)."""
        await self.provider.bootstrap(session)
        await self._seed_identity(session)
        return await self._memory.snapshot_version(session)

    async def _append(self, session: Session, msgs: Sequence[Message], *,
                      receipt: Receipt | None = None,
                      live_only: bool = False) -> AppendHook | None:
        """Append `msgs` (with `receipt`, in their transaction) in one transaction, run
        again whole on a new connection when the server dropped the old one
        (`retry_on_disconnect`). A COMMIT whose answer was lost is not repeated
        blindly: the session's newest stored message tells whether it went through.
        Returns the hook of the attempt that stored them."""
        what = f"append to session {session.id}"
        hooks: list[AppendHook | None] = []

        async def once() -> None:
            # A fresh hook each time: one that ran in a rolled-back attempt must run again.
            hook = (AppendHook(functools.partial(receipt.write, session=session))
                    if receipt is not None else None)
            hooks.append(hook)
            await append_messages(self.provider, session, msgs,
                                  AppendOptions(live_only=live_only, hook=hook))

        for attempt in range(1, RECONNECT_ATTEMPTS + 1):
            try:
                await retry_on_disconnect(once, what)
                return hooks[-1]
            except CommitUncertain:
                if await retry_on_disconnect(lambda: self._stored_last(session, msgs[-1]),
                                             what):
                    log.info("%s: the lost COMMIT went through", what)
                    return hooks[-1]
                if attempt == RECONNECT_ATTEMPTS:
                    raise
                log.warning("%s: the lost COMMIT did not go through; appending again", what)
        raise AssertionError("unreachable")

    async def _stored_last(self, session: Session, msg: Message) -> bool:
        """Whether `msg` is the session's newest stored message (same role and creation
        time, to the microsecond: under the turn lock nobody else appends)."""
        manager = self._manager()
        if manager is None:
            return False  # cannot tell: the caller reports the failure
        history = await manager.load_history(session.id)
        return bool(history) and (history[-1].role, history[-1].created_at) == (
            msg.role, msg.created_at)

    async def _context(self, session: Session, version: int | None, *,
                       images: int = 0) -> tuple[str, list[Tool], list[Message]]:
        """The system prompt, the tools and the history the model gets (next to
        `images` images)."""
        provider = self.provider
        system = build_system_prompt(self.settings.agent.system_prompt,
                                     await self._memory.read(session, version))
        tools = self._tools(provider, session) if self._tools else []
        overhead = (estimate_tokens(system) + self._schema_tokens(tools)
                    + images * IMAGE_TOKENS)
        budget = max(MIN_HISTORY_BUDGET, self.settings.memory.budget_tokens - overhead)
        history = await provider.assemble(session, budget, self.settings.memory.fresh_tail)
        return system, tools, history

    async def _answer(self, session: Session, system: str, tools: list[Tool],
                      history: list[Message], on_delta: OnDelta | None,
                      images: Sequence[Image] = (), *, live_only: bool = False) -> Reply:
        """Call the model on `history` (its last user message with `images`) and append
        what it said."""
        try:
            result = await run_turn(self.llm, [Message(role="system", content=system), *history],
                                    tools, max_rounds=self.settings.llm.max_tool_rounds,
                                    on_delta=_guarded(on_delta, session), images=images)
        except LLMError as exc:
            log.warning("turn of session %s failed after %d attempt(s): %s",
                        session.id, exc.attempts, exc.reason)
            return Reply(apology(exc.reason), error=True)
        try:
            # (memory.tool advanced the snapshot after each of its writes already)
            await self._append(session, result.messages, live_only=live_only)
        except SessionArchived:
            raise  # only when live_only: resume() drops the answer
        except Exception:
            log.exception("could not store the answer of session %s", session.id)
            return Reply(ANSWER_NOT_SAVED, error=True)
        return Reply(result.text)

    async def resume(self, session: Session, *, on_delta: OnDelta | None = None) -> Reply | None:
        """Answer what the session's last stored message asked, if nobody has: a turn
        cut short by a stop or a crash after its message was stored. None when the
        conversation does not end with a user message (it was answered meanwhile) or
        was archived by a /new (for providers on `memory.history`, which check that).
        The turn's images were never stored: a resumed photo is answered from its text."""
        if self._closed:
            raise RuntimeError("the pool is closed")
        started = time.monotonic()
        what = f"resuming session {session.id}"
        async with self._hold(session.id):
            with bind_session(session):
                try:
                    version = await retry_on_disconnect(
                        lambda: self._memory.snapshot_version(session), what)
                    system, tools, history = await retry_on_disconnect(
                        lambda: self._context(session, version), what)
                except Exception:
                    log.exception("memory failed before resuming session %s", session.id)
                    return Reply(MEMORY_FAILED_KEPT, error=True)
                if not history or history[-1].role != "user":
                    return None
                try:
                    # A /new since the message was stored: the user has moved on.
                    reply = await self._answer(session, system, tools, history,
                                               on_delta, live_only=True)
                except SessionArchived:
                    log.info("session %s was archived before its owed answer", session.id)
                    return None
        return self._turn_done(session, reply, started)

    async def stored_answer(self, session: Session) -> str | None:
        """The answer the session's last turn stored, read back (no model call): for a
        channel that could not send it. None when the conversation does not end with an
        answer, or was archived by a /new since (the user has moved on, as in `resume`)."""
        if self._closed:
            raise RuntimeError("the pool is closed")
        async with self._hold(session.id):  # not half-way through a turn
            with bind_session(session):
                if await self._archived(session):
                    return None
                history = await self.provider.assemble(
                    session, self.settings.memory.budget_tokens,
                    self.settings.memory.fresh_tail)
        if not history or history[-1].role != "assistant" or history[-1].tool_calls:
            return None
        return history[-1].content

    def _schema_tokens(self, tools: list[Tool]) -> int:
        """What the tool schemas cost in the prompt; counted again only when the tool
        factory hands out other schema objects (the default one reuses them)."""
        schemas = tuple(t.schema for t in tools)
        if self._tool_tokens is not None:
            known, tokens = self._tool_tokens
            if len(known) == len(schemas) and all(
                    a is b for a, b in zip(known, schemas, strict=True)):
                return tokens
        tokens = estimate_tokens(json.dumps(list(schemas)))
        self._tool_tokens = (schemas, tokens)  # holding them keeps their identity valid
        return tokens

    async def _seed_identity(self, session: Session) -> None:
        key = (session.user_id, session.agent_id)
        if key in self._seeded:
            self._seeded.move_to_end(key)
            return
        if not self._can_seed:
            return  # seeding needs the changelog to tell "never set" from "cleared"
        # Idempotent (the changelog tells what was seeded), so a pair evicted below is
        # merely checked again on its next turn.
        await seed_identity(cast(IdentityStore, self.provider), Path(self.settings.data_dir),
                            session.user_id, session.agent_id)
        self._seeded[key] = None
        while len(self._seeded) > SEEDED_CACHE_SIZE:
            self._seeded.popitem(last=False)

    # --- compaction ------------------------------------------------------------------

    @property
    def auto_compaction(self) -> bool:
        return self._compactor and self.settings.compaction.max_tokens != -1

    def _schedule_compaction(self, session: Session) -> None:
        if not self.auto_compaction or self._closed:
            return
        running = self._compacting.get(session.id)
        if running is not None and not running.done():
            return  # the next turn checks again
        task = asyncio.create_task(self._auto_compact(session),
                                   name=f"compact:{session.id}")
        self._compacting[session.id] = task
        self.background_tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.background_tasks.discard(task)
        for key, value in list(self._compacting.items()):
            if value is task:
                del self._compacting[key]

    async def _auto_compact(self, session: Session) -> None:
        try:
            compactor = cast(Compactor, self.provider)  # (scheduled only for a Compactor)
            with bind_session(session), with_change_source(ChangeSource.SYSTEM):
                if not await compactor.needs_compaction(
                        session, self.settings.compaction.max_tokens):
                    return
                async with self._compaction_slots:
                    result = await compactor.compact(session, CompactionMode.INCREMENTAL)
            record_compaction(self.provider.name, CompactionMode.INCREMENTAL, result)
            log.info("auto-compacted %s: %d messages, %d -> %d tokens", session.id,
                     result.messages_compacted, result.tokens_before, result.tokens_after)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            record_compaction_failure(self.provider.name, CompactionMode.INCREMENTAL)
            log.warning("automatic compaction of %s failed (nothing changed): %s: %s",
                        session.id, type(exc).__name__, exc)

    async def compact(self, session: Session) -> CompactionResult:
        """Full compaction now (`/compact`). Raises Unsupported without a Compactor."""
        name: str = self.provider.name  # read before the check narrows it to a Compactor
        if not isinstance(self.provider, Compactor):
            raise Unsupported(f"the {name} memory provider does not compact")
        running = self._compacting.get(session.id)
        if running is not None:
            await asyncio.wait([running])  # its result is logged by the task itself
        with bind_session(session), with_change_source(ChangeSource.USER):
            try:
                result = await self.provider.compact(session, CompactionMode.FULL)
            except CompactionIncomplete as exc:
                # The rounds it finished are kept: they count as a compaction, and the
                # failure of the rest as an error.
                record_compaction(name, CompactionMode.FULL, exc.result)
                record_compaction_failure(name, CompactionMode.FULL)
                raise
            except Exception:
                record_compaction_failure(name, CompactionMode.FULL)
                raise
        record_compaction(name, CompactionMode.FULL, result)
        return result

    async def drain(self) -> None:
        """Wait for every background task (tests, shutdown)."""
        while self.background_tasks:
            await asyncio.gather(*list(self.background_tasks), return_exceptions=True)

    # --- session rotation ------------------------------------------------------------

    def _manager(self) -> SessionManager | None:
        return self.provider if isinstance(self.provider, SessionManager) else None

    async def current_session(self, base: Session) -> Session:
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
            if not self._replicas or not await self._archived(cached):
                return cached
        session = await self._resolve_current(base)
        self._remember(base.id, session)
        return session

    def _remember(self, base_id: str, session: Session) -> None:
        self._current[base_id] = session
        self._current.move_to_end(base_id)
        while len(self._current) > CURRENT_CACHE_SIZE:
            self._current.popitem(last=False)  # resolved again from the store when needed

    async def _live_after_archive(self, archived: Session) -> Session:
        """The live session of the conversation `archived` belonged to, resolved from
        the store (its cached entry is stale)."""
        base_id = next((b for b, s in self._current.items() if s == archived), None)
        if base_id is None:  # not resolved here: its id tells its base
            head, sep, gen = archived.id.rpartition(GENERATION_SEP)
            base_id = head if sep and gen.isdigit() else archived.id
        self._current.pop(base_id, None)
        return await self.current_session(dataclasses.replace(archived, id=base_id))

    async def _archived(self, session: Session) -> bool:
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

    async def _resolve_current(self, base: Session) -> Session:
        manager = self._manager()
        if manager is None:
            return base
        infos = await manager.list_info(ListOptions(agent_id=base.agent_id,
                                                    user_id=base.user_id,
                                                    include_archived=True))
        best: tuple[int, SessionInfo] | None = None
        for info in infos:
            gen = generation_of(base.id, info.id)
            if gen is not None and (best is None or gen > best[0]):
                best = (gen, info)
        if best is None:
            return base
        gen, info = best
        return with_generation(base, gen + 1 if info.archived else gen)

    async def new_session(self, base: Session) -> Session:
        """Archive the live session of `base` and return the next one (`/new`)."""
        current = await self.current_session(base)
        gen = generation_of(base.id, current.id) or 0
        async with self._hold(current.id):  # never archive under a running turn
            manager = self._manager()
            if manager is not None:
                try:
                    info = await manager.load_info(current.id)
                except NotFound:
                    info = SessionInfo(id=current.id, agent_id=current.agent_id,
                                       user_id=current.user_id, channel=current.channel)
                await manager.save_info(dataclasses.replace(info, archived=True))
            nxt = with_generation(base, gen + 1)
            self._remember(base.id, nxt)
        return nxt

    # --- lifecycle -------------------------------------------------------------------

    async def close(self, *, timeout_s: float = 10.0) -> None:
        """Let background compactions finish (up to `timeout_s`), cancel the rest."""
        self._closed = True
        tasks = list(self.background_tasks)
        if not tasks:
            return
        _done, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)


def _guarded(on_delta: OnDelta | None, session: Session) -> OnDelta | None:
    """Streaming is cosmetic: a channel callback that fails (a rejected message edit) is
    logged once and then left alone; the turn itself goes on and the final reply is
    still delivered whole."""
    if on_delta is None:
        return None
    failed = False

    async def call(text: str) -> None:
        nonlocal failed
        if failed:
            return
        try:
            await on_delta(text)
        except Exception as exc:
            failed = True
            log.warning("streaming to the channel failed for %s (the reply still comes): %s",
                        session.id, exc)

    return call
