"""How long a test waits before calling something stuck: one rule for every limit.

Every limit in the tests (a fake server's `wait_for`, a subprocess's `timeout`, a
`wait_for(..., 60)` guard, pytest-timeout's per-test limit) is a generous upper bound
that only detects a hang; none asserts speed. On a busy machine everything is slower,
so each limit is multiplied by `factor()`:

- `MNEMO_TEST_TIME_SCALE` (a number, e.g. `3`), when set: exactly that;
- otherwise the machine's load per usable core (1-minute load average), read when the
  wait starts, at least 1 and at most `MAX_AUTO_FACTOR`: 30 s on an idle box, 150 s on
  two cores running ten busy processes.

    from tests.waits import scaled
    subprocess.run(..., timeout=scaled(60))
    await asyncio.wait_for(proc.communicate(), scaled(60))
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import TypeVar

ENV = "MNEMO_TEST_TIME_SCALE"
MAX_AUTO_FACTOR = 10.0  # past this a hang should still fail within a test run's patience

T = TypeVar("T")


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def factor() -> float:
    """What every limit is multiplied by now (module doc)."""
    given = os.environ.get(ENV, "").strip()
    if given:
        try:
            value = float(given)
        except ValueError:
            raise ValueError(f"{ENV} must be a number, not {given!r}") from None
        if value <= 0:
            raise ValueError(f"{ENV} must be above 0, not {given!r}")
        return value
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform
        return 1.0
    return min(MAX_AUTO_FACTOR, max(1.0, load / _cores()))


def scaled(seconds: float) -> float:
    """`seconds`, a limit meant for a quiet machine, for this machine now."""
    return seconds * factor()


async def eventually(
    read: Callable[[], Awaitable[T]],
    check: Callable[[T], bool],
    *,
    within: float = 10.0,
    what: str = "the condition",
) -> T:
    """Poll `read` (e.g. a database query: nothing signals its change) until `check`
    holds for its result, and return that result; fail showing the last one read after
    `within` seconds (scaled)."""
    loop = asyncio.get_running_loop()
    limit = scaled(within)
    deadline = loop.time() + limit
    while True:
        value = await read()
        if check(value):
            return value
        if loop.time() > deadline:
            raise AssertionError(f"{what} did not hold within {limit:.0f} s; last read: {value!r}")
        await asyncio.sleep(0.05)
