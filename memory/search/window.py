"""A search restricted to a date range: `SearchQuery.since` (inclusive) and `before`
(exclusive), so "what did we decide last week?" searches last week only.

A row is in the window when its time is: a message's `created_at`; an item with a time
span (lcm's summaries, `earliest_at`..`latest_at`) when the span overlaps the window, so
a summary of March and April is found for "March". The window is a condition of the SQL
that finds the candidates (a ranked search ranks within the window, it is not the head
of an unfiltered list cut afterwards); sources outside the database (simple's notes and
archives, by their time) and the nearest vectors of a hybrid search are checked after
being found, from a deeper pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import sqlalchemy as sa

from memory.contract.errors import InvalidArgument
from memory.contract.types import SearchQuery, SearchResult, as_utc


class TextIndex(Protocol):
    """What the window reads of memory/search/lexical.py's `TextIndex` (which imports
    this module)."""

    @property
    def table(self) -> str: ...
    @property
    def rowid(self) -> str: ...
    @property
    def stamp(self) -> str: ...
    @property
    def start_stamp(self) -> str | None: ...


# Sources checked after being found are asked for this many times more candidates.
DEEPER = 4
# Stored times are UTC; SQLite keeps them as naive text, which this type binds alike.
_STAMP = sa.DateTime(timezone=True)


@dataclass(frozen=True)
class Window:
    since: datetime | None = None
    before: datetime | None = None

    def __bool__(self) -> bool:
        return self.since is not None or self.before is not None

    def holds(self, when: datetime | None) -> bool:
        """Whether a time is in the window (an unknown time is not, in a window)."""
        if not self:
            return True
        if when is None:
            return False
        when = as_utc(when)
        return (self.since is None or when >= self.since) and (
            self.before is None or when < self.before
        )

    def keep(self, results: list[SearchResult]) -> list[SearchResult]:
        return [r for r in results if self.holds(r.timestamp)] if self else results

    def condition(self, index: TextIndex, alias: str = "") -> str:
        """SQL true for `index`'s rows in the window (its columns prefixed by `alias`)."""
        clauses = []
        if self.since is not None:
            clauses.append(f"{alias}{index.stamp} >= :w_since")
        if self.before is not None:
            clauses.append(f"{alias}{index.start_stamp or index.stamp} < :w_before")
        return " AND ".join(clauses) or "TRUE"

    def rows(self, index: TextIndex) -> str:
        """SQL selecting the keys of the window's rows in the conversations `:convs`."""
        return (
            f"SELECT {index.rowid} FROM {index.table} "
            f"WHERE conversation_id IN :convs AND {self.condition(index)}"
        )

    def bind(self, statement: sa.TextClause) -> sa.TextClause:
        binds = []
        if self.since is not None:
            binds.append(sa.bindparam("w_since", self.since, type_=_STAMP))
        if self.before is not None:
            binds.append(sa.bindparam("w_before", self.before, type_=_STAMP))
        return statement.bindparams(*binds)


ANY_TIME = Window()  # no range: every row


def of(query: SearchQuery) -> Window:
    """The window `query` asks for, validated (naive datetimes are UTC)."""
    since, before = query.since, query.before
    for name, value in (("since", since), ("before", before)):
        if value is not None and not isinstance(value, datetime):
            raise InvalidArgument(f"search {name} must be a datetime")
    window = Window(as_utc(since), as_utc(before))
    if window.since is not None and window.before is not None and window.since >= window.before:
        raise InvalidArgument("search since must be earlier than before")
    return window
