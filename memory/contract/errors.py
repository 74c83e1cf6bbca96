"""Errors a provider raises through the contract.

The bot turns these into one plain line for the user; anything else is a bug and is
logged with its traceback, never shown.
"""

from memory.contract.types import CompactionResult


class ContractError(Exception):
    """Base of every error the memory contract defines."""


class NotFound(ContractError):
    """The thing asked for does not exist, or does not belong to the caller (we never
    say which: a summary id alone must not reveal another user's memory)."""


class InvalidArgument(ContractError):
    """The caller passed something malformed (empty text, bad id, bad scope)."""


class Conflict(ContractError):
    """The write would break a uniqueness rule (duplicate note name, alias clash)."""


class SessionArchived(Conflict):
    """An append that asked for a live session (`AppendOptions(live_only=True)`)
    found it archived, by a `/new` that committed first: nothing was written, and the
    caller appends to the session that replaced it instead."""


class Unsupported(ContractError):
    """The provider lacks the capability asked for."""


class StoreCorrupt(ContractError):
    """A persisted store cannot be read; it is left untouched for the operator."""


class CompactionIncomplete(ContractError):
    """A full compaction failed part way after some of its rounds were applied.

    `result` is what those rounds did: it is kept (each round commits on its own and leaves
    the context consistent), so running the compaction again continues from there. The
    error that stopped it is `__cause__`. A compaction that applied nothing raises that
    error itself, never this."""

    def __init__(self, result: CompactionResult, cause: BaseException) -> None:
        super().__init__(
            f"compaction stopped part way ({type(cause).__name__}: {cause}); what it had done "
            f"is kept: {result.messages_compacted} messages compacted, context "
            f"{result.tokens_before} -> {result.tokens_after} tokens"
        )
        self.result = result


class StopRequested(Exception):
    """The operator asked a long command to stop (Ctrl-C): raised by a step (a summarizer
    call, an embedding batch) before it starts, so every finished step is kept. A full
    compaction stopped this way applies what it planned and raises CompactionIncomplete
    with this as the cause. Not a ContractError: no provider turns it into an answer."""
