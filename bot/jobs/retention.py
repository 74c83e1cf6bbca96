"""Retention (`memory.retention.days`): messages older than that are forgotten on the
root's scheduler, through the same path as `/memory forget` (memory/storage/forgetting.py), so
the summaries built on them are rebuilt from what remains and no copy is left.

What it keeps: notes, archives of what remains, profile, soul and rules (the facts the
user or the agent chose to pin); the changelog keeps its content-free `forget` rows.
A run forgets per owner (user and agent); one owner's failure (a summarizer outage, say)
is logged and retried at the next run, and does not stop the others.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from memory.contract.capabilities import Forgetter, Provider
from memory.contract.tracing import unwrap
from memory.contract.types import utcnow
from memory.storage import forgetting as fg
from memory.storage.forgetting import ForgetReport, Owner

log = logging.getLogger(__name__)


@dataclass
class RetentionRun:
    cutoff: datetime
    owners: int = 0
    failed: int = 0
    report: ForgetReport | None = None


def cutoff_for(days: int, now: datetime | None = None) -> datetime:
    return (now or utcnow()) - timedelta(days=days)


async def run_retention(provider: Provider, cutoff: datetime) -> RetentionRun:
    """Forget every message created before `cutoff`."""
    run = RetentionRun(cutoff, report=ForgetReport())
    if not isinstance(unwrap(provider), Forgetter):
        log.warning("retention: the %s provider cannot forget; nothing done", provider.name)
        return run
    assert run.report is not None
    for owner, ids in (await fg.expired(fg.engine_of(provider), cutoff)).items():
        run.owners += 1
        try:
            report = await fg.forget(provider, owner, ids)
        except Exception:
            run.failed += 1
            log.exception("retention: forgetting %d message(s) of %s failed", len(ids), _who(owner))
            continue
        run.report.messages += report.messages
        run.report.summaries_rebuilt += report.summaries_rebuilt
        run.report.summaries_removed += report.summaries_removed
    if run.owners:
        log.info(
            "retention: %s before %s (%d owner(s), %d failed)",
            fg.changelog_text(run.report),
            cutoff.isoformat(timespec="seconds"),
            run.owners,
            run.failed,
        )
    return run


def _who(owner: Owner) -> str:
    return f"user {owner.user_id} agent {owner.agent_id}"


def start_retention(scheduler: Any, services: Any) -> Any | None:
    """Schedule retention on the root's scheduler when `memory.retention.days` is set."""
    settings = services.settings.memory.retention
    if settings.days is None:
        return None

    async def job() -> None:
        await run_retention(services.provider, cutoff_for(settings.days))

    log.info(
        "retention: messages older than %d days are forgotten every %s",
        settings.days,
        settings.interval,
    )
    return scheduler.add_job(
        job,
        "interval",
        seconds=settings.interval_s,
        next_run_time=utcnow() + timedelta(seconds=60),
        id="retention",
        max_instances=1,
        coalesce=True,
    )
