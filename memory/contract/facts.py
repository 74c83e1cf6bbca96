"""Facts: the profile as dated statements with their evidence (issue #29).

A fact is a short statement about a memory's owner under a key that groups what can
supersede it ("home city", "employer"). One call applies a list of operations atomically
(`FactStore.apply_facts`); the semantics (memory/facts/ holds the shared implementation):

- `set` on a key without a current fact creates one; with a current fact of the same
  normalized value it is a restatement (the cited messages join its evidence, no new
  fact); with another value it supersedes it (the old one closes: `valid_to` = the new
  one's `valid_from`, `version_to` = the new version, `replaced_by` = the new id).
- `retract` closes the key's current fact (state `retracted`, `valid_to` = the date of
  the cited message, else now).
- `merge` replaces the current facts of `merged_keys` (and of `key`) by one new fact:
  the way under the cap on current facts (`FactCapReached` says so).
- Cited message ids outside the owner's memory, or unknown, are dropped, never stored.

Two clocks: a fact's valid time [`valid_from`, `valid_to`) is when it was true in the
world; its version interval [`version_from`, `version_to`) is when it was the current
fact of the memory (what a session's snapshot at version V renders). A reverted change
(`revert_fact_change`) is a new version: what it created is closed with state
`reverted` (its valid interval emptied: it was never true), what it closed is reopened
as a copy current from the revert's version, so every earlier version still reads as
it did.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from memory.contract.errors import InvalidArgument
from memory.contract.options import WriteOptions

MAX_KEY_CHARS = 64
MAX_VALUE_CHARS = 500
MAX_OPS = 50  # per call: a reflect cycle or one tool call, not a bulk import
DEFAULT_MAX_FACTS = 200  # current facts per (user, agent): `memory.max_facts`


class FactState(enum.StrEnum):
    CURRENT = "current"
    SUPERSEDED = "superseded"
    RETRACTED = "retracted"
    REVERTED = "reverted"  # created by a change that was reverted: never true


class FactOpKind(enum.StrEnum):
    SET = "set"
    RETRACT = "retract"
    MERGE = "merge"


@dataclass(frozen=True)
class FactOp:
    """One operation. `message_ids`: the history row ids of the messages supporting it
    (for a retract, saying it stopped). `valid_from`: when it became true (a retract:
    when it stopped), if the text says so; else the earliest cited message's date, else
    now. `merged_keys`: for `merge`, the keys whose current facts the new one replaces."""

    kind: str
    key: str
    value: str = ""
    message_ids: Sequence[int] = ()
    valid_from: datetime | None = None
    merged_keys: Sequence[str] = ()


@dataclass(frozen=True)
class Fact:
    id: str
    user_id: int
    agent_id: str
    key: str
    value: str
    state: str
    valid_from: datetime
    valid_to: datetime | None
    version_from: int
    version_to: int | None
    source: str
    session_id: str = ""
    replaced_by: str | None = None
    created_at: datetime | None = None
    evidence: tuple[int, ...] = ()  # message ids, ascending

    def to_dict(self) -> dict[str, object]:
        """JSON-ready (changelog rows and exports): datetimes as ISO-8601 UTC."""
        return {
            "id": self.id,
            "key": self.key,
            "value": self.value,
            "state": self.state,
            "valid_from": self.valid_from.isoformat(),
            "valid_to": self.valid_to.isoformat() if self.valid_to else None,
            "version_from": self.version_from,
            "version_to": self.version_to,
            "source": self.source,
            "session_id": self.session_id,
            "replaced_by": self.replaced_by,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "evidence": list(self.evidence),
        }


@dataclass(frozen=True)
class FactChange:
    """What one operation did: `action` is created | restated | superseded | retracted |
    merged | reverted | reopened; `fact` the fact it created or touched (after), `closed`
    the facts it closed (after), `dropped_ids` the cited ids that were not stored (outside
    the memory, or not in what the caller may cite)."""

    action: str
    fact: Fact
    closed: tuple[Fact, ...] = ()
    dropped_ids: tuple[int, ...] = ()
    version: int = 0
    changelog_id: int | None = None


class FactCapReached(InvalidArgument):
    """A create would pass the cap on current facts: nothing was written; the caller
    merges facts (a `merge` op) or retracts one first."""

    def __init__(self, cap: int) -> None:
        super().__init__(
            f"this memory already holds {cap} current facts (the cap, memory.max_facts): "
            "merge related facts into one with a `merge` operation, or retract one, "
            "before adding another"
        )
        self.cap = cap


@runtime_checkable
class FactStore(Protocol):
    """Dated facts with evidence, on the version counter of profile, soul and rules.

    Every write is one transaction: the rows, the version bump and one changelog row of
    scope `fact` (before/after: JSON lists of the facts it changed) commit together."""

    async def apply_facts(
        self,
        user_id: int,
        agent_id: str,
        ops: Sequence[FactOp],
        options: WriteOptions | None = None,
    ) -> list[FactChange]:
        """Apply `ops` in order, all or nothing; one new version for the whole list."""
        ...

    async def current_facts(self, user_id: int, agent_id: str) -> list[Fact]:
        """Sorted by key."""
        ...

    async def facts_at(self, user_id: int, agent_id: str, version: int) -> list[Fact]:
        """The facts current at memory version `version` (<= 0: now), sorted by key."""
        ...

    async def facts_as_of(self, user_id: int, agent_id: str, when: datetime) -> list[Fact]:
        """The facts true at `when` as known now (valid time), sorted by key."""
        ...

    async def fact_history(
        self, user_id: int, agent_id: str, topic: str | None = None
    ) -> list[Fact]:
        """Every fact in any state, ordered by valid_from; `topic` keeps those whose key
        or value holds it (case-insensitive)."""
        ...

    async def revert_fact_change(
        self,
        user_id: int,
        agent_id: str,
        changelog_id: int,
        options: WriteOptions | None = None,
    ) -> list[FactChange]:
        """Undo the fact changelog row `changelog_id` as a new version. NotFound for a
        row that is not this owner's fact change; Conflict when a later change touched
        the same facts (revert that one first)."""
        ...
