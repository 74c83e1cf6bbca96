"""Extra writes in the transaction that appends a message.

A channel that must know, durably and exactly once, that a message it received is
stored (the Telegram channel records each handled update id, so a redelivery after a
crash is not stored or answered twice) passes an `AppendHook` to one `append`, in
`AppendOptions.hook` (memory/contract/options.py). The shared history
(`memory.storage.history.HistoryStore.insert_messages`, used by lcm and simple) runs it on the
same connection, inside the same transaction as the message rows: both commit together
or neither does.

A provider that cannot run it (one written before `AppendOptions`) leaves
`AppendHook.ran` False, and the caller writes its record right after the append instead
(at least once).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection


@dataclass
class AppendHook:
    """`write(conn)` runs once, in the transaction of the append it was passed to."""

    write: Callable[[AsyncConnection], Awaitable[None]]
    ran: bool = False

    async def run(self, conn: AsyncConnection) -> None:
        """Called by the store inside the append's transaction, after the message rows;
        an exception rolls the append back with it."""
        if self.ran:
            return
        await self.write(conn)
        self.ran = True
