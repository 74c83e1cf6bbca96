"""One reflect cycle: review the sessions with new activity and let the model update the
user's profile, the agent's soul and the user's constraints.

The plugin does not import `bot`: the caller injects `run_turn`, an async callable that
runs one LLM conversation with one tool until the model answers in text (the bot passes
its runner's tool loop, so there is one tool loop in the project, not two).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from sqlalchemy.ext.asyncio import AsyncEngine

from bot.jobs.reflect import runs
from bot.jobs.reflect.activity import activity_source
from bot.jobs.reflect.prompt import build_messages
from bot.jobs.reflect.state import Candidate, Lease, ReflectState
from memory.actions.spec import FrontEnd
from memory.actions.tool import build_tool, run_tool, tool_actions
from memory.contract.capabilities import ConstraintStore, ProfileStore, Provider, Reviewer
from memory.contract.context import with_agent_id, with_change_source, with_session_id, with_user_id
from memory.contract.facts import FactStore
from memory.contract.tracing import capability, unwrap
from memory.contract.types import ChangeSource, Message, Session, utcnow
from memory.facts.render import strip_fact_lines
from memory.facts.rows import in_conversation
from memory.storage.usage import UsageRecorder, call_kind
from memory.text.transcript import reviewed_ids

log = logging.getLogger(__name__)

# The memory tool actions reflect may use (constraint and fact ones only where supported).
REFLECT_ACTIONS = (
    "profile_get",
    "profile_update",
    "soul_get",
    "soul_update",
    "fact_list",
    "fact_set",
    "fact_retract",
    "fact_merge",
    "constraint_list",
    "constraint_add",
    "followup_add",
)
WRITE_ACTIONS = frozenset(
    {
        "profile_update",
        "fact_set",
        "fact_retract",
        "fact_merge",
        "soul_update",
        "constraint_add",
        "followup_add",
    }
)

ToolHandler = Callable[[dict[str, Any]], Awaitable[str]]
# (prompt, tool schema, tool handler) -> the model's final text; raises on LLM failure.
TurnRunner = Callable[[list[Message], dict[str, Any], ToolHandler], Awaitable[str]]


@dataclass(frozen=True)
class ReflectConfig:
    agent_id: str = "default"
    enabled: bool = True
    interval_s: float = 3600.0
    batch: int = 5
    # How long one session's review may take before another reviewer may take it over.
    lease_s: float = 900.0

    @classmethod
    def from_settings(cls, settings: Any) -> ReflectConfig:
        """From mnemo's `Settings` (read by attribute, so this plugin needs no `bot`)."""
        r = settings.reflect
        return cls(
            agent_id=settings.agent.id,
            enabled=r.enabled,
            interval_s=float(r.interval_s),
            batch=int(r.batch),
        )


@dataclass
class SessionOutcome:
    session_id: str
    # "changed" | "unchanged" | "nothing_new" | "failed" | "busy" | "deferred" (the
    # spend guard put it off: reviewed by a later cycle)
    status: str
    changes: int = 0
    detail: str = ""


@dataclass
class CycleReport:
    slot: int | None = None  # None: a manual cycle (no slot claimed)
    skipped: str = ""  # why the whole cycle did nothing, when it did nothing
    sessions: list[SessionOutcome] = field(default_factory=list)

    @property
    def reviewed(self) -> int:
        return sum(s.status in ("changed", "unchanged", "nothing_new") for s in self.sessions)

    @property
    def changes(self) -> int:
        return sum(s.changes for s in self.sessions)

    @property
    def failed(self) -> int:
        return sum(s.status == "failed" for s in self.sessions)

    @property
    def busy(self) -> int:
        return sum(s.status == "busy" for s in self.sessions)

    @property
    def deferred(self) -> int:
        return sum(s.status == "deferred" for s in self.sessions)

    def summary(self) -> str:
        if self.skipped:
            return f"reflect: cycle skipped: {self.skipped}"
        return (
            f"reflect: {self.reviewed} session(s) reviewed, {self.changes} change(s) "
            f"written, {self.failed} failed, {self.busy} skipped (busy elsewhere)"
            + (f", {self.deferred} put off (spend guard)" if self.deferred else "")
        )


def _replica_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def slot_of(now: datetime, interval_s: float) -> int:
    """The scheduled cycle a time belongs to: floor(now / interval)."""
    return int(now.timestamp() // interval_s)


class Reflector:
    def __init__(
        self,
        engine: AsyncEngine,
        provider: Provider,
        run_turn: TurnRunner,
        config: ReflectConfig,
        *,
        replica_id: str | None = None,
        usage: UsageRecorder | None = None,
        guard: Callable[[int], Awaitable[bool]] | None = None,
        on_changed: Sequence[Callable[[Session], Awaitable[None]]] = (),
    ) -> None:
        """`usage`: where the reviews' model calls are recorded (with the watermark
        they moved); `guard(user_id)`: may a review for this user spend now? (False:
        the session is put off to a later cycle, its watermark untouched.) `on_changed`:
        told of each session whose review changed the memory, after the cycle (a
        channel's digest to the user); a failing one is logged."""
        self.on_changed = on_changed
        self._reviewed_sessions: list[Session] = []
        self.provider = provider
        self.run_turn = run_turn
        self.config = config
        self.usage = usage or UsageRecorder()
        self.guard = guard
        self.engine = engine
        self.state = ReflectState(engine, config.agent_id, replica_id or _replica_id())
        self.activity = activity_source(provider, engine, self.state)

    def unsupported(self) -> str:
        """Why this provider cannot be reflected on ("" when it can)."""
        inner = unwrap(self.provider)
        missing = [cap.__name__ for cap in (Reviewer, ProfileStore) if not isinstance(inner, cap)]
        if self.activity is None:
            missing.append("SessionManager")
        if missing:
            name = getattr(self.provider, "name", type(inner).__name__)
            return f"memory provider {name!r} lacks {' and '.join(missing)}"
        return ""

    # -- cycles --------------------------------------------------------------------

    async def run_scheduled(self, now: datetime | None = None) -> CycleReport:
        """The scheduler's entry: run the cycle of the current slot if this replica wins
        it. Never raises (a scheduler job that raises only logs anyway)."""
        slot = slot_of(now or utcnow(), self.config.interval_s)
        try:
            return await self.run_cycle(slot=slot)
        except Exception as exc:
            log.exception("reflect: cycle of slot %d failed", slot)
            return CycleReport(slot=slot, skipped=f"error: {exc}")

    async def run_cycle(self, *, slot: int | None = None) -> CycleReport:
        """One cycle. With `slot`, only if this replica claims it; without, at once
        (the manual `mnemo reflect --once`; session leases still keep it from
        reviewing a session another cycle is reviewing)."""
        report = CycleReport(slot=slot)
        reason = self.unsupported()
        if reason:
            log.info("reflect: skipped: %s", reason)
            report.skipped = reason
            return report
        if slot is not None and not await self.state.claim_slot(slot):
            log.debug("reflect: slot %d already run by another replica", slot)
            report.skipped = f"slot {slot} already claimed by another replica"
            return report
        assert self.activity is not None  # unsupported() said so
        for cand in await self.activity.candidates(self.config.batch, utcnow()):
            report.sessions.append(await self._review_guarded(cand))
        if slot is not None:
            await self.state.finish_slot(slot, report.reviewed, report.changes, report.failed)
        await self._tell_changed(report)
        if report.sessions:
            log.info("%s", report.summary())
        return report

    async def _tell_changed(self, report: CycleReport) -> None:
        changed = {s.session_id for s in report.sessions if s.status == "changed"}
        for session in self._reviewed_sessions:
            if session.id not in changed:
                continue
            for listener in self.on_changed:
                try:
                    await listener(session)
                except Exception:
                    log.warning(
                        "reflect: telling of %s's changes failed", session.id, exc_info=True
                    )
        self._reviewed_sessions.clear()

    async def _review_guarded(self, cand: Candidate) -> SessionOutcome:
        session = cand.session
        self._reviewed_sessions.append(session)
        try:
            if self.guard is not None and not await self.guard(session.user_id):
                return SessionOutcome(session.id, "deferred")
            # Its calls are of kind reflect, for the session's user, and their usage
            # rows are stored with the watermark (ReflectState._finish).
            with (
                call_kind("reflect"),
                with_user_id(session.user_id),
                with_agent_id(session.agent_id),
                with_session_id(session.id),
            ):
                async with self.usage.collecting(committed_on_success=True):
                    return await self._review(cand)
        except Exception as exc:  # e.g. the database failed while recording an outcome
            log.exception("reflect: session %s failed", cand.session.id)
            return SessionOutcome(cand.session.id, "failed", detail=str(exc)[:200])

    async def _review(self, cand: Candidate) -> SessionOutcome:
        session = cand.session
        # Captured before the review starts: the watermark moves to it on success, so
        # anything said during the review is reviewed by the next cycle.
        assert self.activity is not None
        activity_at = await self.activity.activity_at(session.id) or cand.activity_at
        lease = await self.state.lease(cand, activity_at, self.config.lease_s)
        if lease is None:
            return SessionOutcome(session.id, "busy")
        writes = 0
        run = runs.Run(session, lease.watermark)
        try:
            # run_cycle refuses a provider that is not a Reviewer (`unsupported`).
            reviewer = cast(Reviewer, self.provider)
            context = await reviewer.build_review_context(session, lease.watermark)
            if not context.strip():
                await self._succeed(lease)
                return SessionOutcome(session.id, "nothing_new")
            await runs.begin(self.provider, self.engine, run)
            actions = tool_actions(self.provider, actions_only=REFLECT_ACTIONS)
            schema = build_tool(self.provider, actions_only=actions)
            allowed = set(actions)
            # A fact may cite only what this review showed (ids of other messages are
            # dropped, as an answer's citations are).
            front = FrontEnd(citable={str(i) for i in await self._shown(session, context)})

            async def handler(args: dict[str, Any]) -> str:
                nonlocal writes
                # Set here, around each call, so the tag holds however the loop runs.
                with with_change_source(ChangeSource.REFLECT):
                    out = await run_tool(
                        self.provider,
                        session,
                        args,
                        allowed_actions=allowed,
                        source=ChangeSource.REFLECT,
                        front=front,
                    )
                if args.get("action") in WRITE_ACTIONS and not out.startswith(
                    ("error", "not found")
                ):
                    writes += 1
                    run.written.append(str(args["action"]))
                return out

            prompt = await self._prompt(lease, context)
            answer = await self.run_turn(prompt, schema, handler)
        except Exception as exc:
            reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
            log.warning(
                "reflect: review of session %s failed (%d write(s) kept): %s",
                session.id,
                writes,
                reason,
            )
            await self.state.fail(lease, reason)
            await runs.record(self.provider, run, "", failed=reason)
            return SessionOutcome(session.id, "failed", writes, reason[:200])
        await runs.record(self.provider, run, answer)
        await self._succeed(lease)
        status = "changed" if writes else "unchanged"
        return SessionOutcome(session.id, status, writes, " ".join(answer.split())[:200])

    async def _shown(self, session: Session, context: str) -> set[int]:
        """The messages of the session the review context shows by id."""
        async with self.engine.connect() as conn:
            return await in_conversation(conn, session.id, reviewed_ids(context))

    async def _succeed(self, lease: Lease) -> None:
        if not await self.state.succeed(lease):
            log.warning(
                "reflect: lease on session %s expired during its review; "
                "its watermark stays for the next cycle",
                lease.session.id,
            )

    async def _prompt(self, lease: Lease, context: str) -> list[Message]:
        # The live memory, not the session's snapshot: reflect merges into what is
        # current, or it would undo a newer change.
        s = lease.session
        store = cast(ProfileStore, self.provider)  # checked by `unsupported`
        profile = await store.get_profile(s.user_id, s.agent_id)
        soul = await store.get_soul(s.user_id, s.agent_id)
        constraints = None
        rules = capability(self.provider, ConstraintStore)
        if rules is not None:
            constraints = await rules.get_constraints(s.user_id, s.agent_id)
        facts = None
        known = capability(self.provider, FactStore)
        if known is not None:
            facts = await known.current_facts(s.user_id, s.agent_id)
            profile = strip_fact_lines(profile, facts)  # the facts are listed apart
        return build_messages(context, profile, soul, constraints, facts)
