"""The next turn's context measured once, the way a turn builds it (bot/conversation/
turns.py): the system prompt at the session's snapshot, the memory tool's schema, and
the history the provider assembles within what the budget leaves after those two. Both
`/memory status` and the web console show these numbers, so they never disagree.

Read-only: the snapshot is read, never created (creating it would freeze the session's
view of memory before its first turn). The calibration a running bot learns per model
is left out: these are the bot's own estimates, as the budget is configured in them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from bot.config.settings import Settings
from bot.conversation.turns import MIN_HISTORY_BUDGET, memory_tools
from bot.model.prompt import build_system_prompt, read_memory
from memory.actions.spec import ContextFigures
from memory.contract.capabilities import Provider, SessionSnapshotStore
from memory.contract.tracing import unwrap
from memory.contract.types import Message, Session
from memory.storage import operator_reads
from memory.storage.forgetting import engine_of
from memory.text.tokens import estimate_tokens, message_tokens

# A summary the assembler put in the history: lcm's XML user message.
_SUMMARY = re.compile(r'^<summary id="(sum_[0-9a-f]+)"')


def summary_id(message: Message) -> str | None:
    """The id of a summary in an assembled history; None for a message."""
    m = _SUMMARY.match(message.content) if message.role == "user" else None
    return m.group(1) if m else None


@dataclass
class NextContext:
    figures: ContextFigures
    system: str
    history: list[Message]
    snapshot_version: int | None  # None: the session has no snapshot yet (current memory)


async def next_context(provider: Provider, settings: Settings, session: Session) -> NextContext:
    inner = unwrap(provider)
    version = None
    if isinstance(inner, SessionSnapshotStore):
        version = await operator_reads.snapshot_version(engine_of(provider), session.id)
    system = build_system_prompt(
        settings.agent.system_prompt, await read_memory(inner, session, version)
    )
    schemas = [t.schema for t in memory_tools(provider, session)]
    system_tokens = estimate_tokens(system)
    tool_tokens = estimate_tokens(json.dumps(schemas)) if schemas else 0
    budget = settings.memory.budget_tokens
    history_budget = max(MIN_HISTORY_BUDGET, budget - system_tokens - tool_tokens)
    history = await provider.assemble(session, history_budget, settings.memory.fresh_tail)
    summaries = sum(message_tokens(m) for m in history if summary_id(m))
    compact_above = settings.compaction.max_tokens
    stats = await provider.stats(session)
    figures = ContextFigures(
        system=system_tokens,
        tools=tool_tokens,
        summaries=summaries,
        messages=sum(message_tokens(m) for m in history) - summaries,
        budget=budget,
        compact_above=None if compact_above == -1 else compact_above,
        stored=stats.context_tokens,
        window=settings.llm.context_window or None,
    )
    return NextContext(figures, system, history, version)
