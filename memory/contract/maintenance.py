"""Optional maintenance capabilities a provider offers to the operator commands
(`mnemo memory export|import|doctor`).

The shared tables (history, stores, snapshots) are exported, imported and checked by
`memory.transfer.session` and `memory.transfer.integrity` for every provider. What only a provider
knows (lcm's summary DAG and context items, simple's compaction markers) it exposes
through these protocols, so the bot never reads a plugin's tables itself: a provider
may change its tables without breaking the operator commands.

References between a provider's rows and the history use the message's `seq` within its
conversation, never database ids: ids differ after an import, seqs do not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncConnection

from memory.contract.errors import InvalidArgument


@dataclass(frozen=True)
class Fault:
    """One integrity fault: a stable `code` (what scripts match on), where it is, and
    what is wrong in words."""

    code: str
    where: str
    detail: str

    def __str__(self) -> str:
        return f"{self.code}: {self.where}: {self.detail}"


def parse_timestamp(value: Any, where: str) -> datetime:
    """An imported ISO-8601 timestamp, which must carry its UTC offset (a naive one is
    ambiguous); InvalidArgument naming `where` otherwise."""
    try:
        parsed = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise InvalidArgument(
            f"{where}: expected an ISO-8601 timestamp with offset, got {value!r:.60}"
        )
    return parsed


class StagedFiles(Protocol):
    """Files an import wrote beside their place, to be put there only once the import's
    transaction has committed (a provider keeping data outside the database)."""

    def publish(self) -> None:
        """Put the files in place (called after the commit)."""
        ...

    def discard(self) -> None:
        """Remove them (called when the import fails before or at the commit)."""
        ...


@runtime_checkable
class Exporter(Protocol):
    async def export_overlay(self, session_id: str) -> dict[str, Any] | None:
        """The provider's own data about the session as JSON-ready values (None when it
        has none). Must be deterministic: export -> import -> export is compared."""
        ...

    async def import_overlay(
        self,
        conn: AsyncConnection,
        conversation_id: int,
        data: dict[str, Any],
        message_ids: Mapping[int, int],
    ) -> StagedFiles | None:
        """Write `data` (as `export_overlay` produced it) inside the importer's
        transaction; `message_ids` maps each message seq to its new row id. Raise
        `memory.contract.errors.InvalidArgument` for data that does not fit: nothing is kept.
        Data kept outside the database is returned staged, never written in place here:
        the importer publishes it after the commit and discards it on failure."""
        ...

    def overlay_markdown(self, data: dict[str, Any]) -> str:
        """The overlay as Markdown for `export --format markdown`."""
        ...


@runtime_checkable
class IntegrityChecker(Protocol):
    async def check_integrity(self) -> list[Fault]:
        """Faults in the provider's own rows across the whole database (empty = clean)."""
        ...


@runtime_checkable
class OverlaySchema(Protocol):
    """An `Exporter` whose `provider.data` has a schema: validated with the rest of the
    document, before anything is written. The validation context carries `seqs`, the
    document's message seqs, for the provider's references to messages."""

    overlay_model: type[BaseModel]
