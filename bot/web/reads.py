"""What the console's pages show, read through the same parts the bot and `mnemo memory`
use: the provider, `assemble` and the system prompt (bot/model/prompt.py), and the shared
tables through memory/storage/operator_reads.py (the operators' one door to them). Every
read here is read-only: a page view never creates a snapshot or a session. The one write
is `rollback`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from bot.config.settings import Settings
from bot.conversation.context_figures import NextContext, next_context
from bot.web.params import as_int64
from memory.actions.provenance import Why, explain
from memory.contract.capabilities import (
    ChangelogReader,
    ConstraintStore,
    ProfileStore,
    Provider,
    SessionSnapshotStore,
    VersionedProfileStore,
)
from memory.contract.context import with_actor, with_change_source
from memory.contract.errors import NotFound, StoreCorrupt
from memory.contract.facts import Fact, FactOp, FactState, FactStore
from memory.contract.options import WriteOptions
from memory.contract.tracing import unwrap
from memory.contract.types import (
    ChangeEntry,
    ChangeSource,
    ConstraintEntry,
    ErasureReport,
    ForgetReport,
    ListOptions,
    Message,
    Owner,
    Session,
    SessionInfo,
)
from memory.facts.keys import normalize_key
from memory.facts.render import describe_change
from memory.followups import store as followup_store
from memory.followups.times import local_text
from memory.storage import forgetting as fg
from memory.storage import operator_reads, snapshots
from memory.storage.history import LIST_ORDERS as HISTORY_ORDERS
from memory.storage.history import HistoryStore, SessionCounts
from memory.storage.operator_reads import HistoryPage
from memory.storage.prices import format_cost, total_cost
from memory.storage.stores import parse_constraints
from memory.storage.usage import TokenUsage
from memory.transfer.session import export_session

PAGE = 50  # sessions, messages and changelog rows per page
VERSIONS = 500  # versions of one scope shown


LIST_ORDERS = HISTORY_ORDERS  # how the sessions page may be sorted


async def count_sessions(engine: AsyncEngine, opts: ListOptions) -> int:
    """How many sessions the listing `opts` holds, over all its pages."""
    return await HistoryStore(engine).count_sessions(opts)


async def list_sessions(
    provider: Provider, engine: AsyncEngine, opts: ListOptions
) -> list[SessionCounts]:
    """One page of the listing, as `mnemo memory sessions` counts it."""
    return await operator_reads.session_counts(provider, engine, opts)


async def assembled_context(
    provider: Provider, settings: Settings, session: Session
) -> NextContext:
    """The context the model would get next turn, measured as `/memory status` measures
    it (bot/conversation/context_figures.py)."""
    return await next_context(provider, settings, session)


async def history_page(
    engine: AsyncEngine, session_id: str, page: int | None, at_message: int | None
) -> HistoryPage:
    """Page `page` (1-based; None = the last) of the stored messages, PAGE a page, or
    the page holding message id `at_message`."""
    return await operator_reads.history_page(engine, session_id, page, at_message, PAGE)


# --- profile, soul, constraints ---------------------------------------------------------

SCOPES = ("profile", "soul", "constraint")


@dataclass
class Version:
    version: int
    source: str
    action: str
    created_at: datetime | None
    session_id: str
    before: str
    after: str


@dataclass
class MemoryHistory:
    user_id: int
    agent_id: str
    scope: str
    current_version: int
    current_text: str
    versions: list[Version] = field(default_factory=list)  # newest first


async def memory_history(
    provider: Provider, user_id: int, agent_id: str, scope: str
) -> MemoryHistory:
    """`scope` of (user, agent) now and every version of it (newest first, the last
    VERSIONS), through the provider's stores and changelog. Constraints are shown one
    rule a line (`[id] text`), as the system prompt lists them."""
    inner = unwrap(provider)
    hist = MemoryHistory(user_id, agent_id, scope, 0, "")
    if isinstance(inner, VersionedProfileStore):
        hist.current_version = await inner.memory_version(user_id, agent_id)
    if scope == "constraint" and isinstance(inner, ConstraintStore):
        hist.current_text = _rules(await inner.get_constraints(user_id, agent_id))
    elif scope in ("profile", "soul") and isinstance(inner, ProfileStore):
        read = inner.get_profile if scope == "profile" else inner.get_soul
        hist.current_text = await read(user_id, agent_id)
    if isinstance(inner, ChangelogReader):
        for e in await inner.read_changelog(user_id, agent_id, scope, VERSIONS):
            before, after = e.before_text, e.after_text
            if scope == "constraint":
                before, after = _rules(parse_constraints(before)), _rules(parse_constraints(after))
            hist.versions.append(
                Version(
                    version=e.version_after or 0,
                    source=e.source,
                    action=e.action,
                    created_at=e.created_at,
                    session_id=e.session_id,
                    before=before,
                    after=after,
                )
            )
    return hist


def readable_after(entry: ChangeEntry) -> str:
    """A changelog row's text after the change as a person reads it: rules one a line,
    as the system prompt lists them, not the JSON they are stored as; a reflect review,
    what it decided and what it read (bot/jobs/reflect/runs.py)."""
    if entry.scope == "reflect":
        return f"{entry.after_text} · read {entry.before_text}"
    try:
        if entry.scope == "constraint":
            return _rules(parse_constraints(entry.after_text))
        if entry.scope == "fact":  # JSON lists of the facts changed: what the change did
            return describe_change(entry.before_text, entry.after_text)
    except StoreCorrupt:  # shown as stored: the page must still draw
        pass
    return entry.after_text


def _rules(entries: list[ConstraintEntry]) -> str:
    return "\n".join(f"[{c.id}] {c.text}" for c in entries)


async def rollback(
    provider: Provider,
    engine: AsyncEngine,
    user_id: int,
    agent_id: str,
    scope: str,
    version: int,
    operator: str,
) -> int:
    """`scope` back to its text at `version`, as a new version whose changelog row has
    source `operator` and the session column `web:<operator name>` (who did it). The
    user's live sessions then read it at once (their snapshots move, as after a
    person's own `/memory` write). Raises InvalidArgument for a version out of range."""
    inner = unwrap(provider)
    if not isinstance(inner, VersionedProfileStore):
        raise NotFound(f"the {provider.name} provider keeps no versions")
    new = await inner.rollback(
        user_id, agent_id, scope, version, WriteOptions(ChangeSource.OPERATOR, f"web:{operator}")
    )
    await _move_snapshots(inner, engine, user_id, agent_id)
    return new


async def write_text(
    provider: Provider,
    engine: AsyncEngine,
    user_id: int,
    agent_id: str,
    scope: str,
    text: str,
    operator: str,
) -> int:
    """`scope` ("profile" or "soul") set to `text` by an operator, recorded as a rollback
    is; returns the new memory version (0 where the provider keeps none)."""
    inner = unwrap(provider)
    if not isinstance(inner, ProfileStore):
        raise NotFound(f"the {provider.name} provider keeps no profile")
    write = inner.set_profile if scope == "profile" else inner.set_soul
    await write(user_id, agent_id, text, WriteOptions(ChangeSource.OPERATOR, f"web:{operator}"))
    await _move_snapshots(inner, engine, user_id, agent_id)
    if isinstance(inner, VersionedProfileStore):
        return await inner.memory_version(user_id, agent_id)
    return 0


def rule_text(hist: MemoryHistory, rule_id: str) -> str | None:
    """The text of rule `rule_id` as the rules page lists it (`[id] text`); None if gone."""
    for line in hist.current_text.splitlines():
        if line.startswith(f"[{rule_id}] "):
            return line.split("] ", 1)[1]
    return None


async def write_rule(
    provider: Provider,
    engine: AsyncEngine,
    user_id: int,
    agent_id: str,
    *,
    add: str,
    remove: str,
    operator: str,
) -> int:
    """Add rule `add`, or remove rule `remove`, as an operator; the new memory version."""
    inner = unwrap(provider)
    if not isinstance(inner, ConstraintStore):
        raise NotFound(f"the {provider.name} provider keeps no rules")
    options = WriteOptions(ChangeSource.OPERATOR, f"web:{operator}")
    if remove:
        await inner.remove_constraint(user_id, agent_id, remove, options)
    else:
        await inner.add_constraint(user_id, agent_id, add, options)
    await _move_snapshots(inner, engine, user_id, agent_id)
    if isinstance(inner, VersionedProfileStore):
        return await inner.memory_version(user_id, agent_id)
    return 0


@dataclass
class FactView:
    current: list[Fact]
    earlier: list[Fact]  # superseded, retracted or reverted; newest first
    sessions: dict[int, str]  # evidence message id -> its session, for links

    def current_on(self, key: str) -> Fact | None:
        wanted = normalize_key(key)
        return next((f for f in self.current if f.key == wanted), None)


async def fact_view(
    provider: Provider, engine: AsyncEngine, user_id: int, agent_id: str, topic: str
) -> FactView:
    """The facts of (user, agent): current ones and, filtered by `topic` when given
    (key or value), the earlier ones."""
    inner = unwrap(provider)
    if not isinstance(inner, FactStore):
        raise NotFound(f"the {provider.name} provider keeps no facts")
    current = await inner.current_facts(user_id, agent_id)
    history = await inner.fact_history(user_id, agent_id, topic or None)
    earlier = [f for f in reversed(history) if f.state != FactState.CURRENT]
    ids = [i for f in (*current, *earlier) for i in f.evidence]
    return FactView(
        current, earlier, await operator_reads.sessions_of_messages(engine, user_id, ids)
    )


async def write_fact(
    provider: Provider,
    engine: AsyncEngine,
    user_id: int,
    agent_id: str,
    *,
    op: str,
    key: str,
    value: str,
    operator: str,
) -> int:
    """Set or retract the fact on `key` as an operator (no message cited: the changelog
    names who); the new memory version."""
    inner = unwrap(provider)
    if not isinstance(inner, FactStore):
        raise NotFound(f"the {provider.name} provider keeps no facts")
    options = WriteOptions(ChangeSource.OPERATOR, f"web:{operator}")
    changes = await inner.apply_facts(user_id, agent_id, [FactOp(op, key, value)], options)
    await _move_snapshots(inner, engine, user_id, agent_id)
    return max((c.version for c in changes), default=0)


async def _move_snapshots(inner: Any, engine: AsyncEngine, user_id: int, agent_id: str) -> None:
    """The user's live sessions read the change at once, as after their own `/memory`."""
    if isinstance(inner, SessionSnapshotStore):
        live = await HistoryStore(engine).list_info(ListOptions(agent_id=agent_id, user_id=user_id))
        for info in live:
            await inner.advance_snapshot(info.id, user_id, agent_id)
        snapshots.moved()


@dataclass(frozen=True)
class ErasurePlan:
    sessions: int
    messages: int

    @property
    def digest(self) -> str:
        """What the confirmation names: the counts it showed."""
        return f"{self.sessions}-{self.messages}"


async def erasure_plan(engine: AsyncEngine, user_id: int, agent_id: str) -> ErasurePlan:
    """What erasing (user, agent) would delete, counted as `mnemo memory erase` does."""
    sessions, count = await fg.owner_counts(engine, Owner(user_id, agent_id))
    return ErasurePlan(sessions, count)


async def erase(provider: Provider, owner: Owner, by: str) -> ErasureReport:
    with with_change_source(ChangeSource.OPERATOR):  # the changelog row's source
        return await fg.erase(provider, owner, by)


async def forget_preview(provider: Provider, info: SessionInfo, item: str) -> fg.ForgetPreview:
    """What forgetting message `item` (or the messages summary `item` was made of) in
    the memory of `info`'s user would do, as `/memory forget` previews it."""
    return await fg.preview(provider, Owner(info.user_id, info.agent_id), item)


async def forget(provider: Provider, preview: fg.ForgetPreview, operator: str) -> ForgetReport:
    with with_change_source(ChangeSource.OPERATOR), with_actor(f"web:{operator}"):
        return await fg.forget(provider, preview.owner, preview.ids, preview.needles)


async def export(engine: AsyncEngine, provider: Provider, session_id: str) -> dict[str, Any]:
    """The session's lossless export (as `mnemo memory export`); NotFound if unknown."""
    return await export_session(engine, session_id, provider)


# --- the changelog ----------------------------------------------------------------------


@dataclass
class ChangelogFilter:
    user_id: int | None = None
    scope: str = ""
    source: str = ""
    page: int = 1


async def changelog_page(engine: AsyncEngine, f: ChangelogFilter) -> tuple[list[ChangeEntry], bool]:
    """Newest first, PAGE rows from page `f.page`; and whether an older page exists."""
    return await operator_reads.changelog_page(
        engine, user_id=f.user_id, scope=f.scope, source=f.source, page=f.page, page_size=PAGE
    )


async def session_info(engine: AsyncEngine, session_id: str) -> SessionInfo:
    return await HistoryStore(engine).load_info(session_id)


async def session_or_user(engine: AsyncEngine, key: str) -> SessionInfo | None:
    """Session `key`, or else, when `key` is a number, that user's latest session (search
    covers every conversation of the user anyway)."""
    history = HistoryStore(engine)
    try:
        return await history.load_info(key)
    except NotFound:
        pass
    user_id = as_int64(key)  # a longer number is no user id (and would overflow BIGINT)
    if user_id is None:
        return None
    latest = await history.list_info(ListOptions(user_id=user_id, include_archived=True, limit=1))
    return latest[0] if latest else None


def as_session(info: SessionInfo) -> Session:
    return Session(info.id, info.agent_id, info.user_id, info.channel)


# --- one turn ---------------------------------------------------------------------------


def by_model(rows: Iterable[tuple[str, TokenUsage]]) -> dict[str, TokenUsage]:
    """Tokens summed per model, as `total_cost` prices them."""
    out: dict[str, TokenUsage] = {}
    for model, usage in rows:
        out[model] = out[model] + usage if model in out else usage
    return out


# A turn's usage rows are stored with its answer, a moment after the answer's own time.
USAGE_SLACK = timedelta(seconds=5)


@dataclass
class TurnView:
    """One stored answer and what it rests on: the console's `/memory why`."""

    messages: list[Message]
    why: Why | None
    usage: list[operator_reads.UsageLine]
    costs: list[str]  # formatted, per usage line ("–" without a price)
    total_cost: str
    latency_s: float | None  # from the user's message to the answer


async def turn_view(
    provider: Provider, engine: AsyncEngine, settings: Settings, info: SessionInfo, message_id: int
) -> TurnView:
    """The turn answer `message_id` of session `info` ends. NotFound: not in it."""
    turn = await operator_reads.turn_of(engine, info.id, message_id)
    why = await explain(provider, as_session(info), turn)
    first, last = turn[0].created_at, turn[-1].created_at
    usage: list[operator_reads.UsageLine] = []
    if first is not None and last is not None:
        usage = await operator_reads.usage_between(engine, info.id, first, last + USAGE_SLACK)
    prices = settings.llm.price_table()
    costs = [
        format_cost(prices[u.model].cost(u.usage)) if u.model in prices else "–" for u in usage
    ]
    total = total_cost(by_model((u.model, u.usage) for u in usage), prices)
    latency = (last - first).total_seconds() if first is not None and last is not None else None
    return TurnView(turn, why, usage, costs, "–" if total is None else format_cost(total), latency)


@dataclass(frozen=True)
class FollowupRow:
    id: int
    due: str  # in the user's zone
    timezone: str
    text: str
    state: str
    created_by: str
    proactive: bool


async def followups(engine: AsyncEngine, user_id: int, agent_id: str) -> list[FollowupRow]:
    """A user's follow-ups (every state, soonest first): the memory page lists them."""
    items = await followup_store.listed(
        engine,
        Owner(user_id, agent_id),
        (
            followup_store.PENDING,
            followup_store.SNOOZED,
            followup_store.SENDING,
            followup_store.SENT,
            followup_store.DISMISSED,
            followup_store.DROPPED,
        ),
    )
    return [
        FollowupRow(
            i.id,
            local_text(i.due_at, i.timezone),
            i.timezone,
            i.text,
            i.state,
            i.created_by,
            i.proactive,
        )
        for i in items[-100:]
    ]
