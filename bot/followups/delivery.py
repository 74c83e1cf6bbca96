"""The follow-up job on the root's scheduler: every `followups.interval` it sends what is
due, each follow-up once (claimed in the database, memory/followups/store.py).

Per due follow-up, in order: its channel must have a sender in this process; it waits
out the user's quiet hours (theirs, else `followups.quiet_hours`, in their zone); a
proactive one (made by reflect) goes only when proactive ones are on for the user, in
private chats unless `followups.groups`, under `followups.max_per_day` and the user's
token limits, phrased by one model call counted as theirs. Then it is claimed; sent late
with its original time if delivery is behind, or past `followups.grace` replaced by a
one-line note that it was missed (a proactive one is dropped unsaid). A channel refusing
the user for good (Telegram's 403: they blocked the bot) releases it and pauses that
user's follow-ups until they write to the bot again (a turn: bot/conversation/turns.py),
use `/memory followups` or make a new one; any other failure releases it for the next run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Protocol

from memory.contract.types import Message, Session, utcnow
from memory.followups import replies, store, times
from memory.followups.store import Followup

log = logging.getLogger(__name__)

LATE_AFTER = timedelta(minutes=2)  # behind by more (and two runs): said to be late
PHRASE_PROMPT = (
    "You set yourself a follow-up with the user: {text!r}. Write the one or two friendly "
    "sentences you now send them about it, in their language, with no preamble."
)


class Blocked(Exception):
    """The channel refuses this user for good (they blocked the bot)."""


class Sender(Protocol):
    async def send(self, item: Followup, text: str) -> None:
        """Send `text` for `item` where it was asked; Blocked if the user blocked us."""
        ...


class FollowupDelivery:
    """Sends the due follow-ups of one database through this process's senders."""

    def __init__(
        self,
        engine: Any,
        settings: Any,
        *,
        senders: dict[str, Sender] | None = None,
        llm: Any = None,
        budgets: Any = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.engine = engine
        self.settings = settings  # bot.config.settings.FollowupsSettings
        self.senders: dict[str, Sender] = senders if senders is not None else {}
        self.llm = llm
        self.budgets = budgets
        self.clock = clock

    async def tick(self) -> int:
        """Send what is due now; how many went (notes included)."""
        now = self.clock()
        sent = 0
        if not self.senders:
            return 0
        for item in await store.due(self.engine, now, list(self.senders)):
            try:
                sent += await self._one(item, now)
            except Exception:  # one follow-up's failure never stops the others
                log.exception("follow-up %s failed", item.id)
        return sent

    async def _one(self, item: Followup, now: datetime) -> int:
        sender = self.senders.get(item.channel)
        if sender is None or item.chat_id is None:
            return 0
        prefs = await store.get_prefs(self.engine, item.owner)
        quiet = prefs.quiet or self.settings.quiet_hours
        zone = prefs.timezone or item.timezone  # where the user is now
        deliver_at = times.after_quiet(item.due_at, zone, quiet)
        if deliver_at > now or times.after_quiet(now, zone, quiet) > now:
            return 0  # quiet hours
        if item.proactive and not await self._proactive_allowed(item, prefs, now):
            return 0
        if not await store.claim(self.engine, item, now):
            return 0  # another process took it
        behind = now - deliver_at
        state = store.SENT
        missed = behind > timedelta(seconds=self.settings.grace_s)
        if missed and item.proactive:  # a check-in nobody asked for: dropped unsaid
            await store.finish(self.engine, item.id, store.DROPPED, now)
            return 0
        try:
            if missed:
                text, state = replies.dropped(item), store.DROPPED
            else:
                quote = await store.source_text(self.engine, item)
                # Behind by more than a run or two of the job: the bot was down.
                slack = max(LATE_AFTER, timedelta(seconds=2 * self.settings.interval_s))
                text = replies.delivered(item, quote, late=behind > slack)
                if item.proactive:
                    text = await self._phrased(item, text)
            await sender.send(item, text)
        except Blocked:
            log.info("follow-ups of user %s paused: the channel refuses them", item.user_id)
            await store.release(self.engine, item, pause=True)
            return 0
        except BaseException:
            await store.release(self.engine, item, pause=False)
            raise
        await store.finish(self.engine, item.id, state, self.clock())
        return 1

    async def _proactive_allowed(self, item: Followup, prefs: store.Prefs, now: datetime) -> bool:
        """A proactive follow-up goes only if the user wants them, in a private chat (or
        groups are allowed), under the day's count and the user's token limits. One that
        may never go (off, a group) is dismissed, so it is not looked at every run."""
        private = item.user_id > 0 and (item.chat_id or 0) > 0
        if not prefs.proactive or (not private and not self.settings.groups):
            if await store.claim(self.engine, item, now):
                await store.finish(self.engine, item.id, store.DISMISSED, now)
            return False
        day_ago = now - timedelta(days=1)
        if await store.sent_since(self.engine, item.owner, day_ago) >= self.settings.max_per_day:
            return False
        limits = self.budgets
        return limits is None or await limits.refusal(item.user_id) is None

    async def _phrased(self, item: Followup, fallback: str) -> str:
        """One model call, as the user's (their usage and limits), to phrase a proactive
        follow-up; the plain text when there is no model or it fails."""
        if self.llm is None:
            return fallback
        from bot.conversation.session_binding import bind_session

        session = Session(item.session_id, item.agent_id, item.user_id, item.channel)
        prompt = [Message(role="user", content=PHRASE_PROMPT.format(text=item.text))]
        try:
            with bind_session(session):  # the usage row is the user's, of kind chat
                turn = await self.llm.complete(prompt, kind="chat")
            said = (turn.content or "").strip()
        except Exception as exc:
            log.warning("could not phrase follow-up %s: %s", item.id, type(exc).__name__)
            return fallback
        return f"⏰ {said}\n{fallback.partition(chr(10))[2]}".strip() if said else fallback


def start_followups(scheduler: Any, services: Any) -> None:
    """The root's job (bot/app/services.py `background_jobs`): `services.followups`
    every `followups.interval`, one run at a time."""
    delivery: FollowupDelivery | None = getattr(services, "followups", None)
    if delivery is None or not services.settings.followups.enabled:
        return
    scheduler.add_job(
        delivery.tick,
        "interval",
        seconds=services.settings.followups.interval_s,
        max_instances=1,
        coalesce=True,
        id="followups",
    )
