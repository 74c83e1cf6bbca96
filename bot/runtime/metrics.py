"""Prometheus metrics of a running bot, and the small functions that record them.

The metrics live in one module-level registry (`REGISTRY`, with the process collector)
that `bot.runtime.health` serves at `/metrics`. Callers never touch the metric objects: the conversation service
calls `record_turn`, the LLM client `record_llm_call`, the compaction path
`record_compaction`, the reflect job `record_reflect_run`; `trace_hook` plugs into
`memory.contract.tracing.with_tracing` and counts every provider operation; `instrument_engine`
counts every database error the engine sees, whoever caused it.

Label values are closed sets (outcome, kind, operation, provider name): never a session
id or user id, which would grow the series without bound.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.tracing import TraceEvent
from memory.contract.types import CompactionResult

log = logging.getLogger(__name__)

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)

# Turns and LLM calls are seconds long: buckets up to two minutes.
_SLOW_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120)
# Memory operations are mostly milliseconds (compaction calls the summarizer: seconds).
_FAST_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30)
_TOKEN_BUCKETS = (100, 500, 1000, 5000, 10000, 20000, 50000, 100000, 200000, 500000)

TURNS = Counter(
    "mnemo_turns",
    "Conversation turns handled, by outcome (ok|error).",
    ["outcome"],
    registry=REGISTRY,
)
TURN_SECONDS = Histogram(
    "mnemo_turn_duration_seconds",
    "Wall time of one turn, user message to stored reply.",
    buckets=_SLOW_BUCKETS,
    registry=REGISTRY,
)
LLM_SECONDS = Histogram(
    "mnemo_llm_request_duration_seconds",
    "Latency of LLM requests (kind: chat|summary|reflect|transcription), successful or not.",
    ["kind"],
    buckets=_SLOW_BUCKETS,
    registry=REGISTRY,
)
LLM_ERRORS = Counter(
    "mnemo_llm_errors",
    "LLM requests that failed after retries, by kind and error class.",
    ["kind", "error"],
    registry=REGISTRY,
)
LLM_TOKENS = Counter(
    "mnemo_llm_tokens",
    "Tokens of model calls, by kind (chat|summary|reflect|search|embedding|transcription), "
    "model and type (prompt|cached_prompt|completion; cached_prompt is part of prompt); "
    "the server's report, or our estimate when it sent none.",
    ["kind", "model", "type"],
    registry=REGISTRY,
)
MODEL_CALLS = Counter(
    "mnemo_model_calls",
    "Model calls accounted, by kind, model and usage (reported|estimated).",
    ["kind", "model", "usage"],
    registry=REGISTRY,
)
LIMITED_TURNS = Counter(
    "mnemo_limited_turns",
    "Messages stored but not answered: their user was over a token limit (limits.*).",
    registry=REGISTRY,
)
BACKGROUND_DEFERRED = Counter(
    "mnemo_background_deferred",
    "Background work (summary|reflect|embedding) the spend guard held back.",
    ["kind"],
    registry=REGISTRY,
)
COMPACTIONS = Counter(
    "mnemo_compactions",
    "Compaction runs by provider, mode (incremental|full) and outcome (changed|unchanged|error).",
    ["provider", "mode", "outcome"],
    registry=REGISTRY,
)
COMPACTION_TOKENS_BEFORE = Histogram(
    "mnemo_compaction_tokens_before",
    "Context tokens of a session before a compaction.",
    ["provider"],
    buckets=_TOKEN_BUCKETS,
    registry=REGISTRY,
)
COMPACTION_TOKENS_AFTER = Histogram(
    "mnemo_compaction_tokens_after",
    "Context tokens of a session after a compaction.",
    ["provider"],
    buckets=_TOKEN_BUCKETS,
    registry=REGISTRY,
)
REFLECT_RUNS = Counter(
    "mnemo_reflect_runs",
    "Reflect reviews of one session, by outcome (changed|unchanged|nothing_new|busy|failed; "
    "error: the whole cycle raised).",
    ["outcome"],
    registry=REGISTRY,
)
FOLLOWUPS = Counter(
    "mnemo_followups",
    "Follow-ups by event (created|sent|dismissed|dropped).",
    ["event"],
    registry=REGISTRY,
)
DB_ERRORS = Counter(
    "mnemo_db_errors",
    "Database errors raised through the engine, by exception class.",
    ["error"],
    registry=REGISTRY,
)
MEMORY_OPS = Counter(
    "mnemo_memory_operations",
    "Memory provider calls, by provider, operation and outcome.",
    ["provider", "operation", "outcome"],
    registry=REGISTRY,
)
MEMORY_OP_SECONDS = Histogram(
    "mnemo_memory_operation_duration_seconds",
    "Duration of memory provider calls.",
    ["provider", "operation"],
    buckets=_FAST_BUCKETS,
    registry=REGISTRY,
)


def _outcome(ok: bool) -> str:
    return "ok" if ok else "error"


def record_turn(duration_s: float, *, ok: bool, limited: bool = False) -> None:
    """One turn finished (the reply stored, or the turn failed); `limited`: refused for
    the user's token limit (counted ok: nothing failed)."""
    TURNS.labels(_outcome(ok)).inc()
    TURN_SECONDS.observe(max(duration_s, 0.0))
    if limited:
        LIMITED_TURNS.inc()


def record_llm_call(duration_s: float, *, kind: str = "chat", error: str | None = None) -> None:
    """One LLM request (after the client's retries); `error` is the exception class name."""
    LLM_SECONDS.labels(kind).observe(max(duration_s, 0.0))
    if error is not None:
        LLM_ERRORS.labels(kind, error).inc()


def record_usage_row(row: Any) -> None:
    """One model call's usage (a memory.storage.usage.UsageRow): its tokens by kind, model and
    type, and the call, reported or estimated."""
    usage = row.tokens
    for kind_of_token in ("prompt", "cached_prompt", "completion"):
        LLM_TOKENS.labels(row.kind, row.model, kind_of_token).inc(getattr(usage, kind_of_token))
    MODEL_CALLS.labels(row.kind, row.model, "estimated" if usage.estimated else "reported").inc()


def record_background_deferred(kind: str) -> None:
    """The spend guard held back one piece of background work of `kind`."""
    BACKGROUND_DEFERRED.labels(kind).inc()


def record_compaction(provider: str, mode: str, result: CompactionResult) -> None:
    """A compaction returned `result` (changed or not)."""
    outcome = "changed" if result.changed else "unchanged"
    COMPACTIONS.labels(provider, str(mode), outcome).inc()
    if result.changed:
        COMPACTION_TOKENS_BEFORE.labels(provider).observe(result.tokens_before)
        COMPACTION_TOKENS_AFTER.labels(provider).observe(result.tokens_after)


def record_compaction_failure(provider: str, mode: str) -> None:
    """A compaction raised: nothing changed, or (a full lcm compaction stopped part way,
    `CompactionIncomplete`) the rounds before the failure were kept."""
    COMPACTIONS.labels(provider, str(mode), "error").inc()


def record_reflect_run(outcome: str) -> None:
    """One reflect review of one session (its outcome status), or `error` for a cycle
    that raised."""
    REFLECT_RUNS.labels(outcome).inc()


def record_reflect_report(report: Any) -> None:
    """Every session outcome of one reflect cycle (`bot.jobs.reflect.CycleReport`)."""
    for outcome in report.sessions:
        record_reflect_run(outcome.status)


def count_followup(event: str) -> None:
    FOLLOWUPS.labels(event).inc()


def record_db_error(error: str) -> None:
    DB_ERRORS.labels(error).inc()


def trace_hook(event: TraceEvent) -> None:
    """A `memory.contract.tracing` hook: counts and times every provider call."""
    MEMORY_OPS.labels(event.provider, event.operation, _outcome(event.ok)).inc()
    MEMORY_OP_SECONDS.labels(event.provider, event.operation).observe(event.duration_s)


_instrumented: weakref.WeakSet[object] = weakref.WeakSet()


def instrument_engine(engine: AsyncEngine) -> None:
    """Count every DBAPI error this engine raises (idempotent per engine)."""
    sync = engine.sync_engine
    if sync in _instrumented:
        return
    _instrumented.add(sync)

    def on_error(ctx) -> None:  # type: ignore[no-untyped-def]
        # Rollbacks of cancelled tasks are not database faults worth an alert.
        original = ctx.original_exception
        if isinstance(original, BaseException) and not isinstance(original, Exception):
            return
        record_db_error(type(original).__name__)

    event.listen(sync, "handle_error", on_error)


def sample(name: str, labels: dict[str, str] | None = None) -> float:
    """Current value of one sample (0 when it was never recorded): for status pages and
    tests that compare before and after."""
    value = REGISTRY.get_sample_value(name, labels or {})
    return float(value or 0.0)
