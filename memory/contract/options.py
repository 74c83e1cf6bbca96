"""What a caller asks of a provider on append and on store writes, passed explicitly.

`AppendOptions` travels as `append(session, *msgs, options=...)`, `WriteOptions` as the
`options=` keyword of the store writes (set_profile, set_soul, add_constraint,
remove_constraint, rollback). memory/contract/capabilities.py states what a provider must do
with each; the conformance kit (memory/testing/conformance.py) checks it.

Every provider takes them: the shims for providers written before the options
existed are gone (docs/PROVIDERS.md, "Changes to the contract").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from memory.contract.append_hook import AppendHook
from memory.contract.context import change_source_from_context, session_id_from_context
from memory.contract.types import ChangeSource, Message, Session


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


class Appender(Protocol):
    """What `append_messages` needs of a provider: `Provider.append` (named here
    structurally, since memory/contract/capabilities.py imports this module)."""

    async def append(
        self, session: Session, *msgs: Message, options: AppendOptions | None = None
    ) -> None: ...


async def append_messages(
    provider: Appender, session: Session, msgs: Sequence[Message], options: AppendOptions
) -> None:
    """`provider.append(session, *msgs, options=options)`, for callers holding a list."""
    await provider.append(session, *msgs, options=options)
