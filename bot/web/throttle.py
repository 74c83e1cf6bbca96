"""Failed console logins, counted per address, in bounded memory that cannot be flushed.

An address with `limit` failures within `window_s` is held (refused) until the oldest of
them is `window_s` old. At most `capacity` addresses are tracked, each with at most
`limit` failure times. An address leaves the table only when its newest failure is older
than the window, which a held one never is: a flood from many addresses cannot push a
held address out (issue #32: clearing the table at 10,000 addresses released it).

When the table is full, the addresses it has no room for share one budget, `overflow`
failures per window, and are all refused once it is spent: the global floor. A scan
from more addresses than the table holds then gets `capacity * limit + overflow`
failures per window in all, not one more, until entries age out.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

LIMIT, WINDOW_S = 10, 300.0  # a token has 256 bits: this keeps the log quiet, a script slow
CAPACITY, OVERFLOW = 10_000, 100


class LoginThrottle:
    def __init__(
        self,
        *,
        limit: int = LIMIT,
        window_s: float = WINDOW_S,
        capacity: int = CAPACITY,
        overflow: int = OVERFLOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit, self.window_s, self.capacity = limit, window_s, capacity
        self._clock = clock
        # address -> its recent failure times; ordered by each address's newest failure
        # (re-inserted on each), so the expired ones are always at the front.
        self._seen: dict[str, deque[float]] = {}
        self._overflow: deque[float] = deque(maxlen=overflow)

    def throttled(self, address: str) -> bool:
        """Whether a login from `address` is refused now."""
        now = self._expire()
        seen = self._seen.get(address)
        if seen is not None:
            return sum(1 for t in seen if t > now - self.window_s) >= self.limit
        full_budget = len(self._overflow) == self._overflow.maxlen
        return len(self._seen) >= self.capacity and full_budget

    def failed(self, address: str) -> None:
        """Count a failed login from `address`."""
        now = self._expire()
        seen = self._seen.pop(address, None)
        if seen is None and len(self._seen) >= self.capacity:
            self._overflow.append(now)  # no room: the shared budget
            return
        if seen is None:
            seen = deque(maxlen=self.limit)
        seen.append(now)
        self._seen[address] = seen

    @property
    def tracked(self) -> int:
        """How many addresses the table holds (at most `capacity`)."""
        return len(self._seen)

    def _expire(self) -> float:
        now = self._clock()
        cutoff = now - self.window_s
        while self._seen:
            first = next(iter(self._seen))
            if self._seen[first][-1] > cutoff:
                break
            del self._seen[first]
        while self._overflow and self._overflow[0] <= cutoff:
            self._overflow.popleft()
        return now
