"""Scheduling the reflect cycle with APScheduler: on the application's scheduler while
the bot runs (`schedule_reflect`, from `bot.app.root`), or with a scheduler of its own in a
dedicated worker (`run_forever`).

Every replica schedules the job; the job body claims the cycle's slot, so each cycle
runs once (see `bot.jobs.reflect.state`). The first run is aligned just past the next
slot boundary so that replicas fire in the same slot rather than drifting across two.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from bot.jobs.reflect.reflector import Reflector

log = logging.getLogger(__name__)

JOB_NAME = "reflect"


def first_delay(interval_s: float, now: float | None = None) -> float:
    """Seconds until just after the next slot boundary (a small margin keeps clock
    jitter from computing the previous slot)."""
    now = time.time() if now is None else now
    margin = min(1.0, interval_s / 100)
    return interval_s - (now % interval_s) + margin


def _job_kwargs(interval_s: float) -> dict[str, Any]:
    # One run at a time per process; a run missed while the previous one was still
    # going is dropped, not queued (the next slot reviews whatever is left).
    return {"max_instances": 1, "coalesce": True, "misfire_grace_time": max(1, int(interval_s / 2))}


def schedule_reflect(scheduler: Any, reflector: Reflector) -> Any | None:
    """Add the repeating reflect job to an APScheduler `scheduler` (started or not);
    returns the job, or None (with one log line) when `reflect.enabled` is false."""
    from datetime import UTC, datetime, timedelta

    cfg = reflector.config
    if not cfg.enabled:
        log.info("reflect: disabled (reflect.enabled is false)")
        return None
    job = scheduler.add_job(
        reflector.run_scheduled,
        "interval",
        seconds=cfg.interval_s,
        id=JOB_NAME,
        name=JOB_NAME,
        next_run_time=datetime.now(UTC) + timedelta(seconds=first_delay(cfg.interval_s)),
        **_job_kwargs(cfg.interval_s),
    )
    log.info("reflect: every %gs, up to %d session(s) per cycle", cfg.interval_s, cfg.batch)
    return job


async def run_forever(reflector: Reflector, stop: asyncio.Event) -> None:
    """Run the job on an APScheduler of our own until `stop` is set."""
    from datetime import UTC

    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    scheduler = AsyncIOScheduler(timezone=UTC)
    if schedule_reflect(scheduler, reflector) is None:
        return
    scheduler.start()
    try:
        await stop.wait()
    finally:
        # wait=False cancels nothing by itself; a cycle in flight ends with the loop and
        # its session lease expires, so the next cycle reviews that session again.
        scheduler.shutdown(wait=False)
