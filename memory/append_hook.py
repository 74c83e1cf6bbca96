"""Extra writes in the transaction that appends a message.

A channel that must know, durably and exactly once, that a message it received is
stored (the Telegram channel records each handled update id, so a redelivery after a
crash is not stored or answered twice) sets an `AppendHook` around one `append`. The
shared history (`memory.history.HistoryStore.insert_messages`, used by lcm and simple)
runs it on the same connection, inside the same transaction as the message rows: both
commit together or neither does.

A provider that keeps its history elsewhere never runs the hook; `AppendHook.ran` stays
False and the caller writes its record right after the append instead (at least once).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection


@dataclass
class AppendHook:
    """`write(conn)` runs once, in the transaction of the next append of this context."""

    write: Callable[[AsyncConnection], Awaitable[None]]
    ran: bool = False


_hook: ContextVar[AppendHook | None] = ContextVar("mnemo_append_hook", default=None)


@contextmanager
def with_append_hook(hook: AppendHook | None) -> Iterator[AppendHook | None]:
    """Run `hook` inside the next append of this context (None: no hook)."""
    token = _hook.set(hook)
    try:
        yield hook
    finally:
        _hook.reset(token)


async def run_append_hook(conn: AsyncConnection) -> None:
    """Called by the store inside an append's transaction, after the message rows."""
    hook = _hook.get()
    if hook is None or hook.ran:
        return
    await hook.write(conn)  # an exception rolls the append back with it
    hook.ran = True
