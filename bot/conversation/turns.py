"""One turn of a conversation, run under the session's turn lock (the conversation service takes it):

1. bootstrap the session; seed the identity files (SOUL.md, USER.md) once per
   (user, agent); resume the owner's follow-ups if a refused send paused them (they
   blocked the bot, and now write to it again); get or create the session's snapshot
   version;
2. append the user's message on its own (so it is kept even if the model then fails);
3. build the system prompt (base + soul + profile + constraints at the snapshot version),
   assemble the history within `memory.budget_tokens` / `memory.fresh_tail`;
4. run the model with the memory tool (tool writes tagged `agent`);
5. append the rest of the turn (assistant tool calls, tool results, final answer) in one
   call, or nothing at all when the model failed: no half assistant turn is ever stored.

Images sent with a message (`chat(images=...)`, `bot.model.images`) go to the model with the
turn's user message in its model calls only: never stored, logged or resumed; each counts
`IMAGE_TOKENS` against `memory.budget_tokens`. A server that rejects them (400) fails the
turn like any model failure: the text is kept, the user gets the apology.

Every memory step is run again whole on a new connection when the database server
dropped the old one (`retry_on_disconnect`); an append whose COMMIT answer was lost is
checked before it is repeated (`Turns.append`). A channel that can hold its message
(Telegram) passes a `StoreWait`: each step is then tried again with backoff while the
store is unreachable, up to its bound (`bot.conversation.store_wait`), instead of failing the turn.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bot.config.settings import Settings
from bot.conversation.budgets import Budgets
from bot.conversation.session_binding import bind_session
from bot.conversation.store_wait import StoreWait, no_wait
from bot.model.client import LLMError, OnDelta, turn_deadline
from bot.model.delegated_recall import recaller_for
from bot.model.images import IMAGE_TOKENS, Image
from bot.model.prompt import MemoryReader, build_system_prompt
from bot.model.tool_loop import Completer, Tool, run_turn
from memory.actions import provenance
from memory.actions.citations import cite
from memory.actions.provenance import Source
from memory.actions.spec import FrontEnd, Recaller
from memory.contract.append_hook import AppendHook
from memory.contract.capabilities import ChangelogReader, ProfileStore, Provider, SessionManager
from memory.contract.context import with_change_source
from memory.contract.errors import SessionArchived
from memory.contract.options import AppendOptions, append_messages
from memory.contract.types import ChangeSource, Message, Origin, Owner, Session
from memory.followups import store as followups
from memory.storage import forgetting
from memory.storage.db import RECONNECT_ATTEMPTS, CommitUncertain, retry_on_disconnect
from memory.storage.identity import IdentityStore, seed_identity
from memory.storage.usage import Ledger, UsageRecorder, current_ledger
from memory.text.tokens import Calibration, estimate_tokens

log = logging.getLogger(__name__)

SEEDED_CACHE_SIZE = 10_000  # (user, agent) pairs known seeded; forgetting one costs a read
# The history never gets less than this, whatever the system prompt costs.
MIN_HISTORY_BUDGET = 256

# What a user reads when the memory store fails: what failed and whether their message
# is kept, never an exception's name (the traceback goes to the log).
MEMORY_DOWN = "Sorry, my memory store failed, so your message was NOT saved. Please send it again."
MEMORY_FAILED_KEPT = (
    "Sorry, my memory store failed before I could answer. Your message is saved; please try again."
)
MEMORY_DOWN_UNSTORED = "Sorry, my memory store failed before I could answer. Please try again."
ANSWER_NOT_SAVED = (
    "Sorry, my memory store failed while saving the answer, so I can't "
    "show it. Your message is saved; please try again."
)


def apology(reason: str) -> str:
    return f"Sorry, I couldn't answer: {reason}. Your message is saved; please try again."


@dataclass
class Reply:
    """What a channel shows: the answer, or (error=True) one plain line of apology.
    `skipped`: the message was stored elsewhere already (`AlreadyStored`): nothing to
    show, `text` is empty and whoever stored it answers it."""

    text: str
    error: bool = False
    skipped: bool = False
    limited: bool = False  # over the user's token limit: stored, not answered (error too)
    # What the answer cites that this turn's memory calls returned (memory/actions/provenance.py);
    # `text` numbers them ([1]); the channel shows them (links, quotes or plain lines).
    sources: list[Source] = field(default_factory=list)


class AlreadyStored(Exception):
    """Raised by `Receipt.write`: the message was already stored elsewhere (another
    replica got the same delivery). The append rolls back, and the turn ends quietly
    with `Reply(skipped=True)`: a normal event, not a failure."""


class Receipt(Protocol):
    """A channel's record that a user message is stored (Telegram: its update id, so a
    redelivered update is neither stored nor answered twice)."""

    async def write(self, conn: AsyncConnection, *, session: Session) -> None:
        """Inside the append's own transaction (providers on `memory.storage.history`), with the
        session the message went to. Raises `AlreadyStored` when the message was already
        stored elsewhere."""

    async def stored(self, atomic: bool) -> None:
        """After the append committed; `atomic`: `write` ran in its transaction."""


ToolFactory = Callable[[Any, Session, Any], list[Tool]]
# What the model gets for a turn: the system prompt, the tools and the history.
Context = tuple[str, list[Tool], list[Message]]

# provider -> its tool schema (None: no actions). The schema depends only on the
# provider's capabilities, and building it runs many Protocol isinstance checks.
_schemas: weakref.WeakKeyDictionary[Any, dict[str, Any] | None] = weakref.WeakKeyDictionary()


def _tool_schema(provider: Provider) -> dict[str, Any] | None:
    from memory.actions import tool as memory_tool

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


def memory_tools(
    provider: Provider, session: Session, recaller: Recaller | None = None
) -> list[Tool]:
    """The `memory` tool for `session`, from `memory.actions.tool` (every write tagged `agent`);
    `recaller`: the delegated recall sub-call its `recall` action runs."""
    from memory.actions import tool as memory_tool

    schema = _tool_schema(provider)
    if schema is None:
        return []

    front = FrontEnd(recaller=recaller, in_turn=True)

    async def handler(args: dict[str, Any]) -> str:
        with bind_session(session), with_change_source(ChangeSource.AGENT):
            return await memory_tool.run_tool(
                provider, session, args, source=ChangeSource.AGENT, front=front
            )

    return [Tool(schema=schema, handler=handler)]


class Turns:
    """The steps of a turn against one provider and one model. Holds no lock: the conversation service
    runs each turn under its session's turn lock, with the session bound."""

    def __init__(
        self,
        provider: Provider,
        llm: Completer,
        settings: Settings,
        *,
        tools: ToolFactory | None,
        memory: MemoryReader,
        budgets: Budgets | None = None,
    ) -> None:
        self.provider = provider
        self.llm = llm
        self.settings = settings
        self.budgets = budgets
        # The LLM client's usage recorder and calibration (a test's fake model has none).
        self.usage: UsageRecorder = getattr(llm, "usage", None) or UsageRecorder()
        self.calibration: Calibration = getattr(llm, "calibration", None) or Calibration()
        self._tools = tools
        self.recaller = recaller_for(llm, settings)
        self._memory = memory
        # Capability checks are Protocol isinstance calls: made once, not every turn.
        self._can_seed = isinstance(provider, ProfileStore) and isinstance(
            provider, ChangelogReader
        )
        try:  # follow-ups live in an SQL provider's database
            self._followups: AsyncEngine | None = forgetting.engine_of(provider)
        except AttributeError:  # a memory without one has none to resume
            self._followups = None
        self._tool_tokens: tuple[tuple[Any, ...], int] | None = None
        # (user, agent) pairs seeded by this process, most recently used last (bounded)
        self._seeded: OrderedDict[tuple[int, str], None] = OrderedDict()

    async def run(
        self,
        session: Session,
        text: str,
        on_delta: OnDelta | None,
        receipt: Receipt | None,
        *,
        live_only: bool = False,
        images: Sequence[Image] = (),
        origin: Origin | None = None,
        wait: StoreWait | None = None,
    ) -> Reply:
        """One user message in, one reply out (see the module doc). Raises
        `SessionArchived` only under `live_only`, with nothing stored. `wait`: how long
        each memory step may wait for a store that is down (none by default)."""
        wait = wait or no_wait()
        kept = False
        what = f"turn of session {session.id}"
        try:
            # Bootstrap, identity seeding and the snapshot read may all run twice.
            version = await wait.run(
                lambda: retry_on_disconnect(lambda: self._prepare(session), what, idempotent=True),
                what,
            )
            hook = await self.append(
                session,
                [Message(role="user", content=text, origin=origin)],
                receipt=receipt,
                live_only=live_only,
                ledger=current_ledger(),  # a transcription's usage, with its message
                wait=wait,
            )
            kept = True
            if receipt is not None and hook is not None:
                await receipt.stored(atomic=hook.ran)
            context = await wait.run(
                lambda: retry_on_disconnect(
                    lambda: self._context(session, version, images=len(images)), what
                ),
                what,
            )
        except AlreadyStored as exc:
            log.info(
                "message for session %s was already stored elsewhere, not again: %s",
                session.id,
                exc,
            )
            return Reply("", skipped=True)
        except SessionArchived:
            raise  # archived by a /new since the channel resolved it: the conversation service moves on
        except Exception:
            log.exception("memory failed before the model was called (session %s)", session.id)
            return Reply(MEMORY_FAILED_KEPT if kept else MEMORY_DOWN, error=True)
        return await self.answer(session, context, on_delta, images, wait=wait)

    async def unstored(
        self,
        session: Session,
        text: str,
        on_delta: OnDelta | None,
        images: Sequence[Image] = (),
    ) -> Reply:
        """A turn nothing of which is stored: a group member who opted out
        (memory/consent/). The model reads the conversation as assembled, then `text`;
        it gets no memory tool (a note or a rule would keep their words); the answer is
        shown and never appended. Only the model calls' usage rows (token counts) are
        written, under the session's user (the group), and the group's paused follow-ups
        resumed (`_prepare`: the bot is evidently back in the group)."""
        what = f"unstored turn of session {session.id}"
        try:
            version = await retry_on_disconnect(
                lambda: self._prepare(session), what, idempotent=True
            )
            system, _tools, history = await retry_on_disconnect(
                lambda: self._context(session, version, images=len(images)), what
            )
        except Exception:
            log.exception("memory failed before the model was called (session %s)", session.id)
            return Reply(MEMORY_DOWN_UNSTORED, error=True)
        if self.budgets is not None:
            refusal = await self.budgets.refusal(session.user_id)
            if refusal is not None:
                return Reply(refusal, error=True, limited=True)
        async with self.usage.collecting(join=True):
            try:
                with turn_deadline(self.settings.llm.turn_deadline_s):
                    result = await run_turn(
                        self.llm,
                        [
                            Message(role="system", content=system),
                            *history,
                            Message(role="user", content=text),
                        ],
                        [],
                        max_rounds=self.settings.llm.max_tool_rounds,
                        on_delta=_guarded(on_delta, session),
                        images=images,
                    )
            except LLMError as exc:
                log.warning("unstored turn of session %s failed: %s", session.id, exc.described())
                return Reply(
                    f"Sorry, I couldn't answer: {exc.reason}. Please try again.", error=True
                )
        return Reply(cite(result.text, {}, named=False)[0])

    async def owed(self, session: Session) -> Context | None:
        """What the model gets to answer the session's last stored message, if that is
        a user's (a turn cut short by a stop or a crash); None when it is answered.
        Raises when memory fails."""
        what = f"resuming session {session.id}"
        version = await retry_on_disconnect(lambda: self._memory.snapshot_version(session), what)
        context = await retry_on_disconnect(lambda: self._context(session, version), what)
        history = context[2]
        if not history or history[-1].role != "user":
            return None
        return context

    async def last_answer(self, session: Session) -> str | None:
        """The answer the session's last turn stored, None when it does not end with
        one."""
        history = await self.provider.assemble(
            session, self.settings.memory.budget_tokens, self.settings.memory.fresh_tail
        )
        if not history or history[-1].role != "assistant" or history[-1].tool_calls:
            return None
        return history[-1].content

    async def _prepare(self, session: Session) -> int | None:
        """The session's record, identity files, paused follow-ups resumed and snapshot
        version (all idempotent)."""
        await self.provider.bootstrap(session)
        await self._seed_identity(session)
        if self._followups is not None:  # the session's owner: a user, or a group's memory
            await followups.resume(self._followups, Owner(session.user_id, session.agent_id))
        return await self._memory.snapshot_version(session)

    async def append(
        self,
        session: Session,
        msgs: Sequence[Message],
        *,
        receipt: Receipt | None = None,
        live_only: bool = False,
        ledger: Ledger | None = None,
        wait: StoreWait | None = None,
    ) -> AppendHook | None:
        """Append `msgs` (with `receipt` and the usage rows of `ledger`, in their
        transaction) in one transaction, run again whole on a new connection when the
        server dropped the old one (`retry_on_disconnect`), and after each of `wait`'s
        pauses while the store is down. A COMMIT whose answer was lost is not repeated
        blindly: the session's newest stored message tells whether it went through
        (asked again, under `wait`, while the store is down). Returns the hook of the
        attempt that stored them."""
        wait = wait or no_wait()
        what = f"append to session {session.id}"
        hooks: list[AppendHook | None] = []
        writes: list[Callable[[AsyncConnection], Any]] = []
        if receipt is not None:
            writes.append(functools.partial(receipt.write, session=session))
        if ledger is not None:
            writes.append(ledger.write)

        async def write_all(conn: AsyncConnection) -> None:
            for write in writes:
                await write(conn)

        async def once() -> None:
            # A fresh hook each time: one that ran in a rolled-back attempt must run again.
            hook = AppendHook(write_all) if writes else None
            hooks.append(hook)
            await append_messages(
                self.provider, session, msgs, AppendOptions(live_only=live_only, hook=hook)
            )

        lost = 0  # COMMITs whose answer was lost and that did not go through
        while True:
            try:
                await retry_on_disconnect(once, what)
                return _settled(hooks[-1], ledger)
            except CommitUncertain:
                went = await wait.run(
                    lambda: retry_on_disconnect(lambda: self._stored_last(session, msgs[-1]), what),
                    what,
                )
                if went:
                    log.info("%s: the lost COMMIT went through", what)
                    return _settled(hooks[-1], ledger)
                lost += 1
                if lost == RECONNECT_ATTEMPTS:
                    raise
                log.warning("%s: the lost COMMIT did not go through; appending again", what)
            except Exception as exc:
                if not await wait.pause(exc, what):
                    raise

    async def _stored_last(self, session: Session, msg: Message) -> bool:
        """Whether `msg` is the session's newest stored message (same role and creation
        time, to the microsecond: under the turn lock nobody else appends)."""
        if not isinstance(self.provider, SessionManager):
            return False  # cannot tell: the caller reports the failure
        history = await self.provider.load_history(session.id)
        return bool(history) and (history[-1].role, history[-1].created_at) == (
            msg.role,
            msg.created_at,
        )

    async def _context(self, session: Session, version: int | None, *, images: int = 0) -> Context:
        """The system prompt, the tools and the history the model gets (next to
        `images` images)."""
        provider = self.provider
        system = build_system_prompt(
            self.settings.agent.system_prompt, await self._memory.read(session, version)
        )
        tools = self._tools(provider, session, self.recaller) if self._tools else []
        overhead = estimate_tokens(system) + self._schema_tokens(tools) + images * IMAGE_TOKENS
        # The budget is the server's tokens: in our estimate's, as calibrated for the model.
        budget_tokens = self.calibration.scaled_budget(
            self.settings.llm.model, self.settings.memory.budget_tokens
        )
        budget = max(MIN_HISTORY_BUDGET, budget_tokens - overhead)
        history = await provider.assemble(session, budget, self.settings.memory.fresh_tail)
        return system, tools, history

    async def answer(
        self,
        session: Session,
        context: Context,
        on_delta: OnDelta | None,
        images: Sequence[Image] = (),
        *,
        live_only: bool = False,
        wait: StoreWait | None = None,
    ) -> Reply:
        """Call the model on `context` (its history's last user message with `images`)
        and append what it said (under `wait` while the store is down). Raises
        `SessionArchived` only when `live_only` and the session was archived, with the
        answer dropped. A user over a token limit gets
        the budgets' line instead, with no model call (their message stays stored)."""
        if self.budgets is not None:
            refusal = await self.budgets.refusal(session.user_id)
            if refusal is not None:
                log.info("session %s is over its token limit: not answered", session.id)
                return Reply(refusal, error=True, limited=True)
        # The model calls' usage rows are stored with the answer (or alone if it is not).
        async with self.usage.collecting(join=True) as ledger:
            return await self._answer(
                session, context, on_delta, images, live_only, ledger, wait or no_wait()
            )

    async def _answer(
        self,
        session: Session,
        context: Context,
        on_delta: OnDelta | None,
        images: Sequence[Image],
        live_only: bool,
        ledger: Ledger,
        wait: StoreWait,
    ) -> Reply:
        system, tools, history = context
        try:
            # Every model call of the turn ends by this deadline (bot.model.client says how).
            with turn_deadline(self.settings.llm.turn_deadline_s):
                result = await run_turn(
                    self.llm,
                    [Message(role="system", content=system), *history],
                    tools,
                    max_rounds=self.settings.llm.max_tool_rounds,
                    on_delta=_guarded(on_delta, session),
                    images=images,
                )
        except LLMError as exc:
            log.warning(
                "turn of session %s failed after %d attempt(s): %s",
                session.id,
                exc.attempts,
                exc.described(),
            )
            return Reply(apology(exc.reason), error=True)
        try:
            # The model's own memory writes leave the snapshot where it is: the system
            # prompt shows them from the next compaction (memory/actions/spec.py `perform`).
            await self.append(
                session, result.messages, live_only=live_only, ledger=ledger, wait=wait
            )
        except SessionArchived:
            raise  # only when live_only: the conversation service's resume() drops the answer
        except Exception:
            log.exception("could not store the answer of session %s", session.id)
            return Reply(ANSWER_NOT_SAVED, error=True)
        try:
            sourced = await provenance.cited(self.provider, session, result.messages, result.text)
        except Exception:  # the answer is stored: shown without sources rather than lost
            log.warning("could not look up the sources of session %s", session.id, exc_info=True)
            return Reply(cite(result.text, {}, named=False)[0])
        return Reply(sourced.text, sources=sourced.sources)

    def _schema_tokens(self, tools: list[Tool]) -> int:
        """What the tool schemas cost in the prompt; counted again only when the tool
        factory hands out other schema objects (the default one reuses them)."""
        schemas = tuple(t.schema for t in tools)
        if self._tool_tokens is not None:
            known, tokens = self._tool_tokens
            if len(known) == len(schemas) and all(
                a is b for a, b in zip(known, schemas, strict=True)
            ):
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
        await seed_identity(
            cast(IdentityStore, self.provider),  # `_can_seed` checked both capabilities
            Path(self.settings.data_dir),
            session.user_id,
            session.agent_id,
        )
        self._seeded[key] = None
        while len(self._seeded) > SEEDED_CACHE_SIZE:
            self._seeded.popitem(last=False)


def _settled(hook: AppendHook | None, ledger: Ledger | None) -> AppendHook | None:
    """The append committed: the usage rows its hook wrote are stored."""
    if ledger is not None and hook is not None and hook.ran:
        ledger.committed()
    return hook


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
            log.warning(
                "streaming to the channel failed for %s (the reply still comes): %s",
                session.id,
                exc,
            )

    return call
