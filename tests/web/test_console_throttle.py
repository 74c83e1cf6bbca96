"""The login throttle cannot be flushed (issue #32, item 6c: failures from more than
10,000 addresses cleared the whole table, releasing a held address).

Over HTTP, logins come from many loopback addresses (127.0.0.0/8 is all local on
Linux: each client binds its own, which the console sees as the peer) against a console
whose throttle is made small (capacity 20) so a flood past it takes 40 requests, not
10,000; the throttle's own interface, with a clock the test moves, shows the same at
the real capacity and that entries still age out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.web.console import Console
from bot.web.throttle import CAPACITY, LIMIT, WINDOW_S, LoginThrottle
from memory.testing.reference import ReferenceProvider
from tests.web.site import OPERATOR_TOKEN, client, csrf_of, serve, settings_for

HELD = "127.0.0.2"


async def attempt(base: str, address: str, token: str) -> int:
    """One login from `address`: the status it answers (303 -> 200 on success)."""
    async with client(local_addr=(address, 0)) as http:
        page = await (await http.get(f"{base}/login")).text()
        r = await http.post(f"{base}/login", data={"token": token, "csrf": csrf_of(page)})
        assert r.status in (200, 403, 429), await r.text()
        if r.status == 429:
            assert "Too many failed logins" in await r.text()
        return r.status


@pytest.fixture
async def small(engine: AsyncEngine, tmp_path: Path) -> AsyncIterator[tuple[str, Console]]:
    settings = settings_for(str(engine.url), tmp_path, "simple")
    console = Console(settings, engine, ReferenceProvider(engine))
    console.throttle = LoginThrottle(capacity=20, overflow=5)
    async with serve(settings, engine, console.provider, console) as base:
        yield base, console


async def test_a_flood_from_many_addresses_releases_no_held_one(
    small: tuple[str, Console],
) -> None:
    base, console = small
    for _ in range(LIMIT):
        assert await attempt(base, HELD, "wrong") == 403
    assert await attempt(base, HELD, "wrong") == 429
    assert await attempt(base, HELD, OPERATOR_TOKEN) == 429  # held, even with the token
    # 40 more addresses, one failure each: 19 fill the table (with the held one), 5 spend
    # the shared budget of the addresses it has no room for, the rest are refused.
    statuses = [await attempt(base, f"127.0.1.{i}", "wrong") for i in range(1, 41)]
    assert await attempt(base, HELD, OPERATOR_TOKEN) == 429  # still held
    assert statuses == [403] * 24 + [429] * 16
    assert console.throttle.tracked == 20  # bounded
    assert await attempt(base, "127.0.1.1", "wrong") == 403  # one failure: not held
    assert await attempt(base, "127.0.2.1", OPERATOR_TOKEN) == 429  # the global floor
    # An address the table holds, not held, still logs in.
    assert await attempt(base, "127.0.1.2", OPERATOR_TOKEN) == 200


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_throttle_at_its_real_capacity_holds_and_ages_out() -> None:
    clock = Clock()
    throttle = LoginThrottle(clock=clock)
    for _ in range(LIMIT):
        throttle.failed(HELD)
    assert throttle.throttled(HELD)
    clock.now += 1
    for i in range(2 * CAPACITY):  # a scan from twice as many addresses as it tracks
        address = f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}"
        if not throttle.throttled(address):
            throttle.failed(address)
    assert throttle.tracked == CAPACITY
    assert throttle.throttled(HELD) and throttle.throttled("192.0.2.1")
    assert not throttle.throttled("10.0.0.1")  # tracked, one failure
    # The held address waits out the window from its failures; the scan's entries then
    # age out too, and the table takes new addresses again.
    clock.now += WINDOW_S - 2
    assert throttle.throttled(HELD)
    clock.now += 1  # a window after its failures
    assert not throttle.throttled(HELD)
    clock.now += 1  # and after the scan's
    assert not throttle.throttled("192.0.2.1")
    assert throttle.tracked == 0
    throttle.failed("192.0.2.1")
    assert throttle.tracked == 1


def test_an_address_failing_on_stays_held_in_bounded_memory() -> None:
    clock = Clock()
    throttle = LoginThrottle(clock=clock, capacity=3, overflow=0)
    for second in range(5 * LIMIT):  # failures that got through (e.g. before a restart)
        clock.now = 1000.0 + second
        throttle.failed(HELD)
    assert throttle.throttled(HELD) and throttle.tracked == 1
    # Held until the oldest of its last LIMIT failures is a window old.
    clock.now = 1000.0 + 5 * LIMIT - LIMIT + WINDOW_S - 0.5
    assert throttle.throttled(HELD)
    clock.now += 1
    assert not throttle.throttled(HELD)
    for address in ("a", "b", "c"):  # full with overflow 0: the next is refused at once
        throttle.failed(address)
    assert throttle.tracked == 3 and throttle.throttled("d")
