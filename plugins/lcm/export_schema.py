"""The schema of lcm's section of a session export (`provider.data`): its summary DAG
and context window, checked whole with the rest of the document before an import
writes anything (`memory.transfer.schema`).

Beyond types and sizes, the DAG must be one lcm could have built: unique summary ids; a
leaf (depth 0) covers messages of this document and contains no summary; a condensed
summary contains only existing summaries, all exactly one level below it, so no summary
can contain itself, directly or through others; each context item names exactly one
existing message or summary, at a distinct ordinal.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ValidationInfo, model_validator

from memory.transfer.schema import (
    BigInt,
    Count,
    Strict,
    Text,
    Timestamp,
    bounded,
    message_seqs,
    refused_at,
)
from plugins.lcm.dag import CONDENSED, LEAF
from plugins.lcm.models import summaries

SummaryId = bounded(summaries.c.id)


class SummaryRecord(Strict):
    id: SummaryId  # type: ignore[valid-type]
    kind: Literal["leaf", "condensed"]
    depth: Count
    content: Text
    token_count: Count
    earliest_at: Timestamp | None
    latest_at: Timestamp | None
    descendant_count: Count
    descendant_token_count: BigInt
    created_at: Timestamp
    message_seqs: list[BigInt]
    child_ids: list[SummaryId]  # type: ignore[valid-type]


class ContextItemRecord(Strict):
    ordinal: BigInt
    message_seq: BigInt | None
    summary_id: SummaryId | None  # type: ignore[valid-type]
    token_count: Count


class LcmOverlay(Strict):
    summaries: list[SummaryRecord]
    context_items: list[ContextItemRecord]

    @model_validator(mode="after")
    def _dag(self, info: ValidationInfo) -> LcmOverlay:
        seqs = message_seqs(info)
        depth = _check_summaries(self.summaries, seqs)
        _check_items(self.context_items, seqs, depth)
        return self


def _check_summaries(summaries: list[SummaryRecord], seqs: set[int]) -> dict[str, int]:
    """Unique ids; leaves cover existing messages; a condensed summary's children exist
    one level below it. Returns each summary's depth."""
    depth: dict[str, int] = {}
    for i, s in enumerate(summaries):
        if s.id in depth:
            raise refused_at(("summaries", i, "id"), f"{s.id!r} appears twice")
        depth[s.id] = s.depth
    for i, s in enumerate(summaries):
        at = ("summaries", i)
        if s.kind == LEAF:
            if s.depth != 0 or s.child_ids or not s.message_seqs:
                raise refused_at(at, "a leaf summary is at depth 0 and covers messages only")
        elif s.kind == CONDENSED and (s.message_seqs or not s.child_ids):
            raise refused_at(at, "a condensed summary contains summaries only")
        for seq in s.message_seqs:
            if seq not in seqs:
                raise refused_at((*at, "message_seqs"), f"no message with seq {seq}")
        for child in s.child_ids:
            if child not in depth:
                raise refused_at((*at, "child_ids"), f"no summary {child!r}")
            # Strictly one level down: a summary can never contain itself.
            if depth[child] != s.depth - 1:
                raise refused_at(
                    (*at, "child_ids"),
                    f"{child!r} is at depth {depth[child]}, not {s.depth - 1}",
                )
    return depth


def _check_items(items: list[ContextItemRecord], seqs: set[int], depth: dict[str, int]) -> None:
    """Unique ordinals; each item names exactly one existing message or summary."""
    ordinals: set[int] = set()
    for i, item in enumerate(items):
        at = ("context_items", i)
        if item.ordinal in ordinals:
            raise refused_at((*at, "ordinal"), f"{item.ordinal} appears twice")
        ordinals.add(item.ordinal)
        if (item.message_seq is None) == (item.summary_id is None):
            raise refused_at(at, "names exactly one of message_seq and summary_id")
        if item.message_seq is not None and item.message_seq not in seqs:
            raise refused_at((*at, "message_seq"), f"no message with seq {item.message_seq}")
        if item.summary_id is not None and item.summary_id not in depth:
            raise refused_at((*at, "summary_id"), f"no summary {item.summary_id!r}")
