"""`with_retry`: what is retried, how often, after how long, and what it logs."""

from __future__ import annotations

import logging

import pytest
from telegram.error import BadRequest, NetworkError, RetryAfter, TimedOut

from bot.channels.telegram.delivery.sent import MAX_ATTEMPTS, with_retry


class Script:
    """Raises the scripted errors in turn, then answers 'sent'."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "sent"


async def test_server_errors_and_short_flood_waits_are_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="bot.channels.telegram.delivery.sent")
    call = Script(NetworkError("Bad Gateway"), RetryAfter(1))
    assert await with_retry(call, what="sendMessage") == "sent"
    assert call.calls == 3
    assert [r.getMessage() for r in caplog.records] == [
        "sendMessage: Bad Gateway, retrying in 0.5 s",
        "sendMessage: flood control, retrying in 1 s (attempt 2/4)",
    ]


@pytest.mark.parametrize(
    "error",
    [BadRequest("Chat not found"), TimedOut(), RetryAfter(3600)],
    ids=["400", "timeout", "long-flood"],
)
@pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
async def test_what_retrying_cannot_fix_is_raised_at_once(error: Exception) -> None:
    call = Script(error)
    with pytest.raises(type(error)):
        await with_retry(call, what="sendMessage")
    assert call.calls == 1


async def test_attempts_are_bounded() -> None:
    call = Script(*[NetworkError("down")] * 10)
    with pytest.raises(NetworkError):
        await with_retry(call, what="sendMessage", attempts=2)
    assert call.calls == 2
    assert MAX_ATTEMPTS == 4
