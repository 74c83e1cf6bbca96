"""What a caller asks of a provider on append and on store writes, passed explicitly.

`AppendOptions` travels as `append(session, *msgs, options=...)`, `WriteOptions` as the
`options=` keyword of the store writes (set_profile, set_soul, add_constraint,
remove_constraint, rollback). memory/contract/capabilities.py states what a provider must do
with each; the conformance kit (memory/testing/conformance.py) checks it.

A provider written before these options existed (`append(session, *msgs)`) still
loads: `append_messages` calls it without them and logs once what to change; the
duties then fall back to what such a provider always gave (the hook does not run, so
`AppendHook.ran` stays False and the caller writes its record right after the append;
an archived session is not refused).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memory.contract.append_hook import AppendHook
from memory.contract.context import change_source_from_context, session_id_from_context
from memory.contract.types import ChangeSource, Message, Session

if TYPE_CHECKING:
    from memory.contract.capabilities import Provider

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AppendOptions:
    """`live_only`: refuse an archived session (`SessionArchived`, nothing stored).
    `hook`: run `hook.write(conn)` once, inside the transaction that stores the
    messages, after them; its failure rolls the append back and propagates."""

    live_only: bool = False
    hook: AppendHook | None = None


@dataclass(frozen=True)
class WriteOptions:
    """Who writes: the changelog row of a store write records `source` and
    `session_id` (the session the write came from; "" for none)."""

    source: ChangeSource = ChangeSource.AGENT
    session_id: str = ""

    @classmethod
    def from_context(cls) -> WriteOptions:
        """The options of a caller that tagged its context (`memory.contract.context`) instead:
        what the shared stores use when a write comes without options."""
        return cls(change_source_from_context(), session_id_from_context())


# Provider classes told already that their append predates options.
_LEGACY_WARNED: set[type] = set()


def takes_options(method: Callable[..., object]) -> bool:
    """Whether `method` accepts an `options` keyword (or any keyword). Asked on every
    append, so answered once per function (a method replaced on an instance is another
    function, and is asked again)."""
    func = getattr(method, "__func__", method)
    try:
        return _accepts_options(func)
    except TypeError:  # unhashable: ask directly
        return _signature_takes_options(func)


@functools.lru_cache(maxsize=256)
def _accepts_options(func: Callable[..., object]) -> bool:
    return _signature_takes_options(func)


def _signature_takes_options(func: Callable[..., object]) -> bool:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return True  # cannot tell: assume today's contract
    return any(p.name == "options" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


async def append_messages(
    provider: Provider, session: Session, msgs: Sequence[Message], options: AppendOptions
) -> None:
    """`provider.append(session, *msgs, options=options)`; a provider whose `append`
    predates options is called without them (see the module docstring)."""
    from memory.contract.tracing import unwrap  # (tracing imports the capabilities)

    inner = unwrap(provider)
    # Asked on every call (microseconds): `append` may be replaced on an instance.
    if takes_options(inner.append):
        await provider.append(session, *msgs, options=options)
        return
    if type(inner) not in _LEGACY_WARNED:
        _LEGACY_WARNED.add(type(inner))
        log.warning(
            "memory provider %r: append() takes no `options`, so live-session-only and "
            "the same-transaction hook are not honoured; declare `append(self, session, "
            "*msgs, options: AppendOptions | None = None)` (memory/contract/capabilities.py)",
            getattr(inner, "name", type(inner).__name__),
        )
    await provider.append(session, *msgs)


async def store_write(provider: Any, name: str, *args: Any, options: WriteOptions) -> Any:
    """`provider.<name>(*args, options=options)` for a store write (`set_profile`,
    `add_constraint`, ...); a provider whose method predates options is called without
    them, and its changelog then reads the change source the caller set in context."""
    from memory.contract.tracing import unwrap  # (tracing imports the capabilities)

    method = getattr(provider, name)
    if takes_options(getattr(unwrap(provider), name)):
        return await method(*args, options=options)
    return await method(*args)
