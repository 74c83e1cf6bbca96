"""Token limits per user and the spend guard of background work, read from the usage the
model calls recorded (memory/storage/usage.py), shared by every channel.

- **Limits** (`limits.tokens_per_day`, `limits.tokens_per_month`; 0 = none): a user (a
  group, in a group: the memory scope pays) whose recorded tokens today (since 00:00 UTC)
  or this month (since the 1st) reached the limit gets one line saying when it resets;
  their message is stored, not answered (nothing is lost, and it is in the context of
  the next answered turn). Every kind of call made for the user counts: the chat, and
  the summaries, reflect reviews, searches and embeddings of their conversations. The
  ids in `telegram.admin_ids` are exempt, and so is the terminal (`mnemo chat`).
- **Background guard** (`limits.background`): automatic compaction, reflect and the
  embeddings worker ask before spending; over a cap in the last `window` (calls or
  tokens, of one user or of everyone) the work is put off (the next turn, cycle or pass
  tries again) and counted (`mnemo_background_deferred_total`). A reply never waits for
  it. `/compact`, asked by the user, is not held back (it counts towards their limit).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.config.settings import LimitsSettings
from bot.runtime.metrics import record_background_deferred
from memory.contract.types import utcnow
from memory.storage.prices import Price, format_cost, total_cost
from memory.storage.usage import (
    BACKGROUND_KINDS,
    Period,
    TokenUsage,
    UsageStore,
    next_day,
    next_month,
)

log = logging.getLogger(__name__)

OPERATOR_USER_ID = 0
# How often one deferral reason is logged (the metric counts every one).
LOG_EVERY_S = 300.0


@dataclass
class Deferral:
    """The guard's last refusals in this process, for /memory status and doctor."""

    kind: str
    reason: str
    at: datetime
    count: int = 1


def _when(moment: datetime, now: datetime) -> str:
    if moment - now <= timedelta(days=1):
        return f"at {moment:%H:%M} UTC"
    return f"on {moment:%B} {moment.day} (00:00 UTC)"


class Budgets:
    """Limits and the guard over one usage store (None: nothing recorded, nothing held)."""

    def __init__(
        self,
        store: UsageStore | None,
        limits: LimitsSettings,
        *,
        exempt: Collection[int] = (),
        prices: dict[str, Price] | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.limits = limits
        # User 0 is the terminal's (`mnemo chat`, bot/channels/terminal.py): the operator's own.
        self.exempt = frozenset(exempt) | {OPERATOR_USER_ID}
        self.prices = prices or {}
        self.clock = clock
        self.deferrals: dict[tuple[str, int | None], Deferral] = {}
        self._logged: dict[str, float] = {}

    # --- limits ---------------------------------------------------------------------

    @property
    def limited(self) -> bool:
        return bool(self.limits.tokens_per_day or self.limits.tokens_per_month)

    async def refusal(self, user_id: int) -> str | None:
        """The line to answer instead of the model when `user_id` is over a limit, else
        None. A failure to read the usage lets the turn through (logged)."""
        if not self.limited or self.store is None or user_id in self.exempt:
            return None
        now = self.clock()
        try:
            period = await self.store.period(user_id, now)
        except Exception as exc:
            log.warning("could not read the usage of %s; not limiting: %s", user_id, exc)
            return None
        day = Period.total(period.today).total
        month = Period.total(period.month).total
        if self.limits.tokens_per_month and month >= self.limits.tokens_per_month:
            return (
                f"Sorry, you have used this month's {self.limits.tokens_per_month:,} tokens. "
                f"I saved your message and can answer again {_when(next_month(now), now)}."
            )
        if self.limits.tokens_per_day and day >= self.limits.tokens_per_day:
            return (
                f"Sorry, you have used today's {self.limits.tokens_per_day:,} tokens. "
                f"I saved your message and can answer again {_when(next_day(now), now)}."
            )
        return None

    # --- the background guard -------------------------------------------------------

    async def allow_background(self, kind: str, user_id: int | None) -> bool:
        """May background work of `kind` for `user_id` (None: work for everyone, as an
        embedding pass) spend now? False puts it off (recorded, logged now and then).
        A failure to read the usage lets it through."""
        guard = self.limits.background
        if self.store is None:
            return True
        since = self.clock() - timedelta(seconds=guard.window_s)
        try:
            reason = await self._over(since, user_id)
        except Exception as exc:
            log.warning("spend guard could not read the usage; letting %s run: %s", kind, exc)
            return True
        if reason is None:
            return True
        self._defer(kind, user_id, reason)
        return False

    async def _over(self, since: datetime, user_id: int | None) -> str | None:
        guard = self.limits.background
        assert self.store is not None
        if user_id is not None and (guard.calls_per_user or guard.tokens_per_user):
            calls, tokens = await self.store.window(since, BACKGROUND_KINDS, user_id)
            if guard.calls_per_user and calls >= guard.calls_per_user:
                return f"{calls} background calls for this user in {guard.window}"
            if guard.tokens_per_user and tokens >= guard.tokens_per_user:
                return f"{tokens:,} background tokens for this user in {guard.window}"
        if guard.calls_total or guard.tokens_total:
            calls, tokens = await self.store.window(since, BACKGROUND_KINDS)
            if guard.calls_total and calls >= guard.calls_total:
                return f"{calls} background calls in all in {guard.window}"
            if guard.tokens_total and tokens >= guard.tokens_total:
                return f"{tokens:,} background tokens in all in {guard.window}"
        return None

    def _defer(self, kind: str, user_id: int | None, reason: str) -> None:
        record_background_deferred(kind)
        key = (kind, user_id)
        known = self.deferrals.get(key)
        if known is None:
            self.deferrals[key] = Deferral(kind, reason, self.clock())
        else:
            known.reason, known.at, known.count = reason, self.clock(), known.count + 1
        now = time.monotonic()
        if now - self._logged.get(reason, -LOG_EVERY_S) >= LOG_EVERY_S:
            self._logged[reason] = now
            log.warning("spend guard: %s put off (%s; limits.background caps it)", kind, reason)

    def deferred_for(self, user_id: int) -> list[Deferral]:
        """This process's deferrals of work for `user_id` or for everyone, newest first,
        within the guard's window."""
        since = self.clock() - timedelta(seconds=self.limits.background.window_s)
        found = [
            d for (_, uid), d in self.deferrals.items() if uid in (user_id, None) and d.at >= since
        ]
        return sorted(found, key=lambda d: d.at, reverse=True)

    # --- what /memory status shows --------------------------------------------------

    async def status_lines(self, user_id: int) -> list[str]:
        """Usage lines of `user_id` for /memory status."""
        if self.store is None:
            return []
        period = await self.store.period(user_id, self.clock())
        lines = [
            "Usage (UTC): " + self._line("today", period.today, self.limits.tokens_per_day),
            "  " + self._line("this month", period.month, self.limits.tokens_per_month),
        ]
        if user_id in self.exempt and self.limited:
            lines.append("  (an admin: no limit applies)")
        for d in self.deferred_for(user_id):
            lines.append(
                f"Background {d.kind} put off {d.count}x, last at {d.at:%H:%M} UTC: {d.reason}"
            )
        return lines

    def _line(self, label: str, by_model: dict[str, TokenUsage], limit: int) -> str:
        usage = Period.total(by_model)
        text = (
            f"{label} {usage.total:,} tokens ({usage.prompt:,} in, of them "
            f"{usage.cached_prompt:,} cached; {usage.completion:,} out)"
        )
        if usage.estimated:
            text += ", partly estimated"
        if limit:
            text += f" of {limit:,}"
        cost = total_cost(by_model, self.prices) if self.prices else None
        if cost is not None and usage.total:
            text += f", about {format_cost(cost)} at the configured prices"
        return text
