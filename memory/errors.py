"""Errors a provider raises through the contract.

The bot turns these into one plain line for the user; anything else is a bug and is
logged with its traceback, never shown.
"""


class MemoryError_(Exception):  # noqa: N801 - trailing underscore avoids the builtin
    """Base of every error the memory contract defines."""


class NotFound(MemoryError_):
    """The thing asked for does not exist, or does not belong to the caller (we never
    say which: a summary id alone must not reveal another user's memory)."""


class InvalidArgument(MemoryError_):
    """The caller passed something malformed (empty text, bad id, bad scope)."""


class Conflict(MemoryError_):
    """The write would break a uniqueness rule (duplicate note name, alias clash)."""


class Unsupported(MemoryError_):
    """The provider lacks the capability asked for."""


class StoreCorrupt(MemoryError_):
    """A persisted store cannot be read; it is left untouched for the operator."""
