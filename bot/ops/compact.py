"""`mnemo memory compact SESSION|--all`: a full compaction with the model, counted on a
progress bar; the first Ctrl-C stops after the current summary, keeping every finished
one."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, cast

from bot.config.settings import Settings
from bot.ops.common import (
    EXIT_FAULT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    Opened,
    StopFlag,
    err,
    find_session,
    open_memory,
    stop_on_ctrl_c,
)
from bot.ops.progress import ProgressBar
from memory.contract.capabilities import CompactionEstimator, Compactor
from memory.contract.errors import CompactionIncomplete, StopRequested
from memory.contract.types import (
    CompactionMode,
    CompactionResult,
    ListOptions,
    Session,
    SummarizeOptions,
)
from memory.text.display import terminal_safe


class _Steps(StopFlag):
    """The summarizer as the operator's compaction sees it: each call is a step, counted
    for the progress bar; once a stop is asked (Ctrl-C), the next call raises
    StopRequested before it starts, so every finished summary is kept."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0
        self.on_step: Any = None

    async def summarize(self, text: str, opts: SummarizeOptions) -> str:
        if self.stop:
            raise StopRequested("stopped by the operator (Ctrl-C)")
        out = cast(str, await self.inner.summarize(text, opts))
        self.calls += 1
        if self.on_step is not None:
            self.on_step()
        return out


@dataclass
class _Tally:
    total: CompactionResult = field(default_factory=CompactionResult)
    changed: int = 0
    unchanged: int = 0
    context_unchanged: int = 0  # tokens in the contexts that had nothing to compact
    failed: list[str] = field(default_factory=list)

    def add(self, result: CompactionResult) -> None:
        if not result.changed:
            self.unchanged += 1
            self.context_unchanged += result.tokens_before
            return
        self.changed += 1
        t = self.total
        t.leaf_summaries_created += result.leaf_summaries_created
        t.condensed_summaries_created += result.condensed_summaries_created
        t.messages_compacted += result.messages_compacted
        t.tokens_before += result.tokens_before
        t.tokens_after += result.tokens_after


async def compact(settings: Settings, session_id: str | None, everything: bool) -> int:
    from memory.contract.tracing import unwrap
    from memory.storage.history import HistoryStore

    if bool(session_id) == everything:
        err("give one SESSION or --all")
        return EXIT_USAGE
    from bot.model.client import MissingApiKey, require_api_key

    try:
        require_api_key(settings.llm)  # summaries need the model: say so before starting
    except MissingApiKey as exc:
        err(str(exc))
        return EXIT_USAGE
    steps: list[_Steps] = []

    def counted(summarizer: Any) -> Any:
        steps.append(_Steps(summarizer))
        return steps[0]

    started = time.monotonic()
    async with open_memory(settings, with_llm=True, wrap_summarizer=counted) as m:
        counter = steps[0]
        inner = unwrap(m.provider)
        if not isinstance(inner, Compactor):
            err(f"the {m.provider.name} provider does not compact")
            return EXIT_FAULT
        if everything:
            infos = await HistoryStore(m.engine).list_info(ListOptions(include_archived=True))
            targets = [Session(i.id, i.agent_id, i.user_id, i.channel) for i in reversed(infos)]
        else:
            one = await find_session(m.engine, session_id or "")
            if one is None:
                err(f"no session {session_id!r}")
                return EXIT_FAULT
            targets = [one]
        # Progress counts summarizer calls when the provider can estimate them (lcm: a
        # 4,000-message session is hundreds of calls, not "0/1"); else sessions.
        estimator = inner if isinstance(inner, CompactionEstimator) else None
        by_calls = estimator is not None
        if estimator is not None:
            estimate = sum([await estimator.compaction_calls(t) for t in targets])
            bar = ProgressBar(estimate, unit="summaries")
        else:
            bar = ProgressBar(len(targets), unit="sessions")
        label = [""]
        if by_calls:
            counter.on_step = lambda: bar.show(counter.calls, label[0])
        tally, stopped, done = _Tally(), False, 0
        bar.show(0)
        with stop_on_ctrl_c(counter, "summary"):
            for session in targets:
                if counter.stop:
                    stopped = True
                    break
                label[0] = terminal_safe(session.id)
                result, stopped = await _compact_one(m, session, tally)
                if result is None and stopped:
                    break
                done += 1
                if not by_calls:
                    bar.show(done, label[0])
                if stopped:
                    break
        bar.close()
        where = m.where
    _compact_report(tally, len(targets), done, counter.calls, time.monotonic() - started, where)
    if stopped:
        t = tally.total
        err(
            f"stopped by Ctrl-C: kept {t.leaf_summaries_created + t.condensed_summaries_created} "
            f"summaries of {t.messages_compacted} messages; {len(targets) - done} session(s) "
            "not started. Run the same command again to continue where it stopped."
        )
        return EXIT_INTERRUPTED
    return EXIT_FAULT if tally.failed else EXIT_OK


async def _compact_one(
    m: Opened, session: Session, tally: _Tally
) -> tuple[CompactionResult | None, bool]:
    """One session's full compaction, counted in `tally`: (what it did, None if nothing;
    whether the operator's stop ended it)."""
    from bot.runtime.metrics import record_compaction, record_compaction_failure
    from memory.contract.context import with_change_source
    from memory.contract.types import ChangeSource

    name, full = m.provider.name, CompactionMode.FULL
    stopped = False
    result: CompactionResult | None = None
    try:
        with with_change_source(ChangeSource.SYSTEM):
            result = await cast(Compactor, m.provider).compact(session, full)
    except StopRequested:  # asked before its first summary: unchanged
        return None, True
    except CompactionIncomplete as exc:  # its finished summaries are kept
        result = exc.result
        stopped = isinstance(exc.__cause__, StopRequested)
        if not stopped:
            record_compaction_failure(name, full)
            tally.failed.append(
                f"compaction stopped part way (progress kept): {session.id}: "
                f"{type(exc.__cause__).__name__}: {exc.__cause__}"
            )
    except Exception as exc:  # one broken session must not stop the others
        record_compaction_failure(name, full)
        tally.failed.append(
            f"compaction failed (session unchanged): {session.id}: {type(exc).__name__}: {exc}"
        )
    else:
        record_compaction(name, full, result)
    if result is not None:
        tally.add(result)
    return result, stopped


def _compact_report(
    tally: _Tally, sessions: int, done: int, calls: int, elapsed: float, where: str
) -> None:
    t = tally.total
    if tally.changed:
        print(
            f"compacted {tally.changed}/{sessions} session(s) in {where}: "
            f"{t.messages_compacted} messages into {t.leaf_summaries_created} leaf and "
            f"{t.condensed_summaries_created} condensed summaries ({calls} summarizer "
            f"calls), context {t.tokens_before} -> {t.tokens_after} tokens in {elapsed:.1f}s"
        )
    if tally.unchanged:
        # Not "0 -> 0 tokens": say how big those contexts are, and why they stay.
        print(
            f"nothing to compact in {tally.unchanged} session(s)"
            + (f" in {where}" if not tally.changed else "")
            + f" (context {tally.context_unchanged} tokens, all of it in the newest "
            "messages, which compaction keeps as they are, or too few older ones yet)"
        )
    for line in tally.failed:
        err(line)
