"""The schema of simple's section of a session export (`provider.data`): its compaction
markers and the user's notes file, checked whole with the rest of the document before an
import writes anything (`memory.transfer.schema`). Markers cover messages of the document,
each further than the one before; the notes are checked by
`plugins.simple.notes_transfer.read_entries` (names, aliases, ids, kinds)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, ValidationInfo, model_validator

from memory.contract.errors import InvalidArgument
from memory.transfer.schema import (
    BigInt,
    Count,
    Refused,
    Strict,
    Text,
    Timestamp,
    bounded,
    refused_at,
)
from memory.transfer.schema import message_seqs as document_seqs
from plugins.simple import notes_transfer
from plugins.simple.markers import markers


class MarkerRecord(Strict):
    through_seq: BigInt
    summary: Text
    archive_name: bounded(markers.c.archive_name)  # type: ignore[valid-type]
    archived_at: Timestamp
    messages_compacted: Count
    source_tokens: Count


def _notes(value: list[Any]) -> list[Any]:
    try:
        notes_transfer.read_entries(value, ".notes")
    except InvalidArgument as exc:
        raise Refused(str(exc)) from None
    return value


class SimpleOverlay(Strict):
    markers: list[MarkerRecord]
    # Exports made before notes travelled have none.
    notes: Annotated[list[Any], AfterValidator(_notes)] = []

    @model_validator(mode="after")
    def _markers(self, info: ValidationInfo) -> SimpleOverlay:
        seqs = document_seqs(info)
        previous = 0
        for i, m in enumerate(self.markers):
            if m.through_seq not in seqs:
                raise refused_at(
                    ("markers", i, "through_seq"),
                    f"{m.through_seq} is not a message of this session",
                )
            if m.through_seq <= previous:
                raise refused_at(
                    ("markers", i, "through_seq"),
                    f"{m.through_seq} does not cover more than the marker before ({previous})",
                )
            previous = m.through_seq
        return self
