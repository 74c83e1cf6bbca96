"""Compaction for the conversation service: automatic compaction in the background after a turn, and
`/compact` now.

Automatic compaction runs *after* the reply, as a background task outside the session's
turn lock: the provider takes its own lock only for the short transaction that swaps
items for the summary, so no user waits for a summarizer. A failure logs a warning and
changes nothing. A compaction that changed the context also moved the session's
snapshot (profile, soul, rules) to the current version: the prompt's cached prefix is
rebuilt once for both.
"""

from __future__ import annotations

import asyncio
import logging

from bot.config.settings import Settings
from bot.conversation.budgets import Budgets
from bot.conversation.session_binding import bind_session
from bot.runtime.metrics import record_compaction, record_compaction_failure
from memory.contract.capabilities import Compactor, Provider
from memory.contract.context import with_change_source
from memory.contract.errors import CompactionIncomplete, Unsupported
from memory.contract.tracing import capability
from memory.contract.types import ChangeSource, CompactionMode, CompactionResult, Session
from memory.storage import snapshots
from memory.storage.usage import UsageRecorder
from memory.text.tokens import Calibration

log = logging.getLogger(__name__)

# Automatic compactions running at once in this process. Sessions cross the threshold in
# bursts (a busy hour, a restart); unbounded, each burst plans every compaction on the
# loop at once, delaying the replies being assembled meanwhile, and fires as many
# summarizer calls at the model as there are sessions. The rest wait their turn: nobody
# waits for them, the context stays within the budget meanwhile.
COMPACTIONS_AT_ONCE = 2


def _rebuilt(result: CompactionResult) -> None:
    """A compaction that changed the context moved the session's snapshot with it (in its
    transaction, `SharedStores.record_compaction`): the next turn reads it again."""
    if result.changed:
        snapshots.moved()


class CompactionScheduler:
    """At most one automatic compaction per session at a time, `COMPACTIONS_AT_ONCE` in
    all; `compact` waits for a session's running one before compacting it fully."""

    def __init__(
        self,
        provider: Provider,
        settings: Settings,
        *,
        usage: UsageRecorder | None = None,
        calibration: Calibration | None = None,
        budgets: Budgets | None = None,
    ) -> None:
        self.provider = provider
        self.settings = settings
        # The summaries' usage is stored with the compaction; the spend guard may put an
        # automatic one off; the threshold is in the server's tokens, as calibrated.
        self.usage = usage or UsageRecorder()
        self.calibration = calibration or Calibration()
        self.budgets = budgets
        self._compactor = isinstance(provider, Compactor)  # a Protocol check: once
        self._compacting: dict[str, asyncio.Task[None]] = {}
        self.background_tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(COMPACTIONS_AT_ONCE)
        self._closed = False

    @property
    def automatic(self) -> bool:
        return self._compactor and self.settings.compaction.max_tokens != -1

    def schedule(self, session: Session) -> None:
        """Compact `session` in the background if it needs it (checked by the task)."""
        if not self.automatic or self._closed:
            return
        running = self._compacting.get(session.id)
        if running is not None and not running.done():
            return  # the next turn checks again
        task = asyncio.create_task(self._auto_compact(session), name=f"compact:{session.id}")
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
            with bind_session(session), with_change_source(ChangeSource.SYSTEM):
                compactor = capability(self.provider, Compactor)
                if compactor is None or not await compactor.needs_compaction(
                    session, self._threshold()
                ):
                    return
                if self.budgets is not None and not await self.budgets.allow_background(
                    "summary", session.user_id
                ):
                    return  # put off: the next turn asks again
                async with self._slots, self.usage.collecting(committed_on_success=True):
                    result = await compactor.compact(session, CompactionMode.INCREMENTAL)
            _rebuilt(result)
            record_compaction(self.provider.name, CompactionMode.INCREMENTAL, result)
            log.info(
                "auto-compacted %s: %d messages, %d -> %d tokens",
                session.id,
                result.messages_compacted,
                result.tokens_before,
                result.tokens_after,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            record_compaction_failure(self.provider.name, CompactionMode.INCREMENTAL)
            log.warning(
                "automatic compaction of %s failed (nothing changed): %s: %s",
                session.id,
                type(exc).__name__,
                exc,
            )

    def _threshold(self) -> int:
        """`compaction.max_tokens` (server tokens) in estimated tokens for the model."""
        limit = self.settings.compaction.max_tokens
        if limit <= 0:
            return limit
        return self.calibration.scaled_budget(self.settings.llm.model, limit)

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
                async with self.usage.collecting(committed_on_success=True):
                    result = await self.provider.compact(session, CompactionMode.FULL)
            except CompactionIncomplete as exc:
                # The rounds it finished are kept: they count as a compaction, and the
                # failure of the rest as an error.
                _rebuilt(exc.result)
                record_compaction(name, CompactionMode.FULL, exc.result)
                record_compaction_failure(name, CompactionMode.FULL)
                raise
            except Exception:
                record_compaction_failure(name, CompactionMode.FULL)
                raise
        _rebuilt(result)
        record_compaction(name, CompactionMode.FULL, result)
        return result

    async def drain(self) -> None:
        """Wait for every background task (tests, shutdown)."""
        while self.background_tasks:
            await asyncio.gather(*list(self.background_tasks), return_exceptions=True)

    async def close(self, *, timeout_s: float = 10.0) -> None:
        """No more scheduling; let running compactions finish (up to `timeout_s`),
        cancel the rest."""
        self._closed = True
        tasks = list(self.background_tasks)
        if not tasks:
            return
        _done, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
