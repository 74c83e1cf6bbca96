"""lcm's part of the operator commands: export/import of the summary DAG and context
window (`memory.contract.maintenance.Exporter`) and the DAG's integrity checks
(`memory.contract.maintenance.IntegrityChecker`). Mixed into `LcmProvider`.

Export refers to messages by their seq (ids change on import) and keeps summary ids
(they are public: the model and users quote them). Checks, per conversation:
- `context_item_invalid`: an item that is neither exactly one message nor one summary
  of this conversation;
- `summary_link_foreign`: a leaf pointing at a message of another conversation, or a
  condensed summary at a summary of another conversation;
- `summary_kind_mismatch`: a leaf with children or no messages, a condensed summary with
  messages or no children;
- `summary_depth_mismatch`: a leaf not at depth 0, a condensed summary whose children
  are not all at its depth - 1;
- `summary_cycle`: a summary that contains itself;
- `summary_unreachable`: a summary neither in the context nor inside another summary;
- `message_unreachable` / `message_duplicated`: every message is covered exactly once
  by the context (directly or through summaries);
- `context_order`: the context items, in ordinal order, cover ever later messages.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.contract.errors import Conflict, InvalidArgument
from memory.contract.maintenance import Fault, parse_timestamp
from memory.contract.types import iso_utc
from memory.storage.history import HistoryStore, conversations, messages
from memory.transfer.session import DocumentReader
from plugins.lcm.dag import CONDENSED, LEAF
from plugins.lcm.export_schema import LcmOverlay
from plugins.lcm.models import context_items, summaries, summary_messages, summary_parents

_SUMMARY_FIELDS = (
    "id",
    "kind",
    "depth",
    "content",
    "token_count",
    "earliest_at",
    "latest_at",
    "descendant_count",
    "descendant_token_count",
    "created_at",
)
_TIMES = ("earliest_at", "latest_at", "created_at")


def _parse_time(value: Any, where: str) -> datetime | None:
    """Summary times may be absent (a summary of nothing has no range)."""
    return None if value is None else parse_timestamp(value, where)


def _parent_links(conv_id: int) -> sa.Select[*tuple[Any, ...]]:
    """(condensed summary, constituent) pairs of a conversation, in order."""
    return (
        sa.select(summary_parents.c.summary_id, summary_parents.c.child_id)
        .join(summaries, summaries.c.id == summary_parents.c.summary_id)
        .where(summaries.c.conversation_id == conv_id)
        .order_by(summary_parents.c.summary_id, summary_parents.c.ordinal)
    )


class LcmMaintenance:
    engine: AsyncEngine
    history: HistoryStore
    # Checked with the whole document before the import writes (memory.transfer.schema).
    overlay_model = LcmOverlay

    # -- Exporter ----------------------------------------------------------------------

    async def export_overlay(self, session_id: str) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            conv_id = await self.history.conversation_id(session_id, conn)
            if conv_id is None:
                return None
            rows = (
                (
                    await conn.execute(
                        sa.select(summaries)
                        .where(summaries.c.conversation_id == conv_id)
                        .order_by(summaries.c.pk)
                    )
                )
                .mappings()
                .all()
            )
            leaf_seqs: dict[str, list[int]] = {}
            for sid, seq in (
                await conn.execute(
                    sa.select(summary_messages.c.summary_id, messages.c.seq)
                    .join(messages, messages.c.id == summary_messages.c.message_id)
                    .join(summaries, summaries.c.id == summary_messages.c.summary_id)
                    .where(summaries.c.conversation_id == conv_id)
                    .order_by(summary_messages.c.summary_id, summary_messages.c.ordinal)
                )
            ).all():
                leaf_seqs.setdefault(sid, []).append(seq)
            children: dict[str, list[str]] = {}
            for sid, child in (await conn.execute(_parent_links(conv_id))).all():
                children.setdefault(sid, []).append(child)
            items = (
                await conn.execute(
                    sa.select(
                        context_items.c.ordinal,
                        messages.c.seq,
                        context_items.c.summary_id,
                        context_items.c.token_count,
                    )
                    .outerjoin(messages, messages.c.id == context_items.c.message_id)
                    .where(context_items.c.conversation_id == conv_id)
                    .order_by(context_items.c.ordinal)
                )
            ).all()
        return {
            "summaries": [
                {
                    **{k: (iso_utc(r[k]) if k in _TIMES else r[k]) for k in _SUMMARY_FIELDS},
                    "message_seqs": leaf_seqs.get(r["id"], []),
                    "child_ids": children.get(r["id"], []),
                }
                for r in rows
            ],
            "context_items": [
                {"ordinal": o, "message_seq": seq, "summary_id": sid, "token_count": tokens}
                for o, seq, sid, tokens in items
            ],
        }

    async def import_overlay(
        self,
        conn: AsyncConnection,
        conversation_id: int,
        data: dict[str, Any],
        message_ids: Mapping[int, int],
    ) -> None:
        raw_summaries = data.get("summaries")
        raw_items = data.get("context_items")
        if not isinstance(raw_summaries, list) or not isinstance(raw_items, list):
            raise InvalidArgument(".provider.data: expected lists `summaries` and `context_items`")
        rows, leaf_rows, parent_rows, known = _summary_rows(
            raw_summaries, conversation_id, message_ids
        )
        item_rows = _item_rows(raw_items, conversation_id, message_ids, known)
        # Summary ids are public and unique database-wide: an export imported twice (under
        # another session id) would otherwise fail on a raw unique violation.
        taken = (
            await conn.execute(
                sa.select(summaries.c.id).where(summaries.c.id.in_(list(known))).limit(1)
            )
        ).scalar()
        if taken is not None:
            raise Conflict(
                f"summary {taken!r} already exists in this database; nothing was imported"
            )
        # One row at a time: `pk` order must follow export order (it orders the next export).
        for row in rows:
            await conn.execute(sa.insert(summaries).values(**row))
        for table, batch in (
            (summary_messages, leaf_rows),
            (summary_parents, parent_rows),
            (context_items, item_rows),
        ):
            if batch:
                await conn.execute(sa.insert(table), batch)
        # The rows are in, the transaction still open: the doctor's own checks decide
        # whether the summaries and context cover every message exactly once, in order;
        # any fault refuses the import (rolled back: nothing written), so an export
        # `doctor` would call broken is never accepted.
        faults = await _check_conversation(conn, conversation_id, "the export")
        if faults:
            counts = Counter(f.code for f in faults)
            raise InvalidArgument(
                ".provider.data: the summaries and context items do not cover every message "
                "exactly once, in order ("
                + ", ".join(f"{n} {code}" for code, n in sorted(counts.items()))
                + "; `mnemo memory doctor` names these faults)"
            )

    def overlay_markdown(self, data: dict[str, Any]) -> str:
        out = [f"### Context window ({len(data['context_items'])} items, oldest first)", ""]
        for n, it in enumerate(data["context_items"], 1):
            what = (
                f"message #{it['message_seq']}"
                if it["message_seq"] is not None
                else f"summary `{it['summary_id']}`"
            )
            out.append(f"{n}. {what} ({it['token_count']} tokens)")
        out += ["", f"### Summaries ({len(data['summaries'])})"]
        for s in data["summaries"]:
            built = (
                f"messages {', '.join(f'#{q}' for q in s['message_seqs'])}"
                if s["kind"] == LEAF
                else f"summaries {', '.join(f'`{c}`' for c in s['child_ids'])}"
            )
            out += [
                "",
                f"#### `{s['id']}` · {s['kind']} · depth {s['depth']} · {s['token_count']} tokens",
                "",
                f"built from {built}; {s['earliest_at']} .. {s['latest_at']}",
                "",
                s["content"],
            ]
        return "\n".join(out) + "\n"

    # -- IntegrityChecker --------------------------------------------------------------

    async def check_integrity(self) -> list[Fault]:
        faults: list[Fault] = []
        async with self.engine.connect() as conn:
            convs = (
                await conn.execute(
                    sa.select(conversations.c.id, conversations.c.session_id).order_by(
                        conversations.c.id
                    )
                )
            ).all()
            for conv_id, session_id in convs:
                faults += await _check_conversation(conn, conv_id, f"session {session_id}")
        return faults


def _summary_rows(
    raw_summaries: list[Any], conversation_id: int, message_ids: Mapping[int, int]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], set[str]]:
    """The summaries of an export as rows (summaries, leaf links, child links) and the
    set of their ids; a bad one is an `InvalidArgument` naming it."""
    known: set[str] = set()
    rows: list[dict[str, Any]] = []
    leaf_rows: list[dict[str, Any]] = []
    parent_rows: list[dict[str, Any]] = []
    for i, s in enumerate(raw_summaries):
        where = f".provider.data.summaries[{i}]"
        if not isinstance(s, dict) or any(k not in s for k in _SUMMARY_FIELDS):
            raise InvalidArgument(f"{where}: expected an object with {', '.join(_SUMMARY_FIELDS)}")
        if s["kind"] not in (LEAF, CONDENSED) or not isinstance(s["id"], str) or s["id"] in known:
            raise InvalidArgument(f"{where}: bad or repeated summary id/kind")
        # PostgreSQL would fail on a longer id with a raw DataError, SQLite keep it.
        # Context items and child links name only ids checked here.
        DocumentReader(s, where).bounded("id", summaries.c.id)
        known.add(s["id"])
        row = {k: s[k] for k in _SUMMARY_FIELDS}
        for k in _TIMES:
            row[k] = _parse_time(s[k], f"{where}.{k}")
        rows.append({**row, "conversation_id": conversation_id})
        for n, seq in enumerate(s.get("message_seqs") or []):
            if seq not in message_ids:
                raise InvalidArgument(f"{where}.message_seqs: no message with seq {seq!r}")
            leaf_rows.append({"summary_id": s["id"], "ordinal": n, "message_id": message_ids[seq]})
        parent_rows += [
            {"summary_id": s["id"], "ordinal": n, "child_id": c}
            for n, c in enumerate(s.get("child_ids") or [])
        ]
    for p in parent_rows:
        if p["child_id"] not in known:
            raise InvalidArgument(
                f".provider.data: summary {p['summary_id']} has unknown child {p['child_id']!r}"
            )
    return rows, leaf_rows, parent_rows, known


def _item_rows(
    raw_items: list[Any], conversation_id: int, message_ids: Mapping[int, int], known: set[str]
) -> list[dict[str, Any]]:
    """The context items of an export as rows; each names one existing message or one of
    the export's summaries."""
    item_rows = []
    for i, it in enumerate(raw_items):
        where = f".provider.data.context_items[{i}]"
        if not isinstance(it, dict) or not isinstance(it.get("ordinal"), int):
            raise InvalidArgument(f"{where}: expected an object with an integer ordinal")
        seq, sid = it.get("message_seq"), it.get("summary_id")
        if (
            (seq is None) == (sid is None)
            or (seq is not None and seq not in message_ids)
            or (sid is not None and sid not in known)
        ):
            raise InvalidArgument(f"{where}: must name one existing message seq or summary id")
        item_rows.append(
            {
                "conversation_id": conversation_id,
                "ordinal": it["ordinal"],
                "message_id": message_ids[seq] if seq is not None else None,
                "summary_id": sid,
                "token_count": it.get("token_count", 0),
            }
        )
    return item_rows


@dataclass
class _Tree:
    """One conversation's messages and summary DAG as stored, for the checks below."""

    seq_of: dict[int, int]  # message id -> seq
    nodes: dict[str, Any]  # summary id -> row (id, kind, depth)
    leaf_msgs: dict[str, list[int]] = field(default_factory=dict)  # leaf -> its messages
    kids: dict[str, list[str]] = field(default_factory=dict)  # condensed -> its children


async def _check_conversation(conn: AsyncConnection, conv_id: int, where: str) -> list[Fault]:
    """Every fault of one conversation, by kind: links, summary kinds and depths, the
    context items, then what nothing reaches or reaches twice."""
    faults: list[Fault] = []
    tree = await _load_tree(conn, conv_id, where, faults)
    faults += _kind_faults(tree, where)
    seen, reached = await _walk_context(conn, conv_id, tree, where, faults)
    faults += _reach_faults(tree, seen, reached, where)
    return faults


async def _load_tree(conn: AsyncConnection, conv_id: int, where: str, faults: list[Fault]) -> _Tree:
    """The conversation's rows; links to another conversation's rows are faults
    (`summary_link_foreign`) and are left out of the tree."""
    seq_of: dict[int, int] = dict(
        (
            await conn.execute(
                sa.select(messages.c.id, messages.c.seq).where(
                    messages.c.conversation_id == conv_id
                )
            )
        ).all()
    )
    nodes = {
        r.id: r
        for r in (
            await conn.execute(
                sa.select(summaries.c.id, summaries.c.kind, summaries.c.depth).where(
                    summaries.c.conversation_id == conv_id
                )
            )
        ).all()
    }
    tree = _Tree(seq_of, nodes)
    for sid, mid, owner in (
        await conn.execute(
            sa.select(
                summary_messages.c.summary_id,
                summary_messages.c.message_id,
                messages.c.conversation_id,
            )
            .join(summaries, summaries.c.id == summary_messages.c.summary_id)
            .outerjoin(messages, messages.c.id == summary_messages.c.message_id)
            .where(summaries.c.conversation_id == conv_id)
            .order_by(summary_messages.c.summary_id, summary_messages.c.ordinal)
        )
    ).all():
        if owner != conv_id:
            faults.append(
                Fault(
                    "summary_link_foreign",
                    f"{where} summary {sid}",
                    f"leaf points at message id {mid} of another conversation",
                )
            )
            continue
        tree.leaf_msgs.setdefault(sid, []).append(mid)
    for sid, child in (await conn.execute(_parent_links(conv_id))).all():
        if child not in nodes:
            faults.append(
                Fault(
                    "summary_link_foreign",
                    f"{where} summary {sid}",
                    f"condensed summary contains {child} of another conversation",
                )
            )
            continue
        tree.kids.setdefault(sid, []).append(child)
    return tree


def _kind_faults(tree: _Tree, where: str) -> list[Fault]:
    """`summary_kind_mismatch` and `summary_depth_mismatch`: a leaf covers messages only,
    at depth 0; a condensed summary contains summaries only, one level below it."""
    faults: list[Fault] = []
    for sid, node in tree.nodes.items():
        at = f"{where} summary {sid}"
        if node.kind == LEAF:
            if sid in tree.kids or sid not in tree.leaf_msgs:
                faults.append(Fault("summary_kind_mismatch", at, "a leaf must cover messages only"))
            if node.depth != 0:
                faults.append(Fault("summary_depth_mismatch", at, f"leaf at depth {node.depth}"))
        elif node.kind == CONDENSED:
            if sid in tree.leaf_msgs or sid not in tree.kids:
                faults.append(
                    Fault(
                        "summary_kind_mismatch",
                        at,
                        "a condensed summary must contain summaries only",
                    )
                )
            wrong = [c for c in tree.kids.get(sid, []) if tree.nodes[c].depth != node.depth - 1]
            if wrong:
                faults.append(
                    Fault(
                        "summary_depth_mismatch",
                        at,
                        f"depth {node.depth} contains {', '.join(wrong)} not at depth {node.depth - 1}",
                    )
                )
        else:
            faults.append(Fault("summary_kind_mismatch", at, f"unknown kind {node.kind!r}"))
    return faults


async def _walk_context(
    conn: AsyncConnection, conv_id: int, tree: _Tree, where: str, faults: list[Fault]
) -> tuple[dict[int, int], set[str]]:
    """Walk the context items in order (`context_item_invalid`, `context_order`, and
    `summary_cycle` for a summary that contains itself); returns how often each message
    is covered and which summaries are reached."""
    # Messages each summary covers, in order (memoised; a cycle is a fault, not a hang).
    covered: dict[str, list[int]] = {}
    in_progress: set[str] = set()

    def cover(sid: str) -> list[int]:
        if sid in covered:
            return covered[sid]
        if sid in in_progress:
            faults.append(Fault("summary_cycle", f"{where} summary {sid}", "contains itself"))
            return []
        in_progress.add(sid)
        out = list(tree.leaf_msgs.get(sid, []))
        for child in tree.kids.get(sid, []):
            out += cover(child)
        in_progress.discard(sid)
        covered[sid] = out
        return out

    items = (
        await conn.execute(
            sa.select(
                context_items.c.ordinal, context_items.c.message_id, context_items.c.summary_id
            )
            .where(context_items.c.conversation_id == conv_id)
            .order_by(context_items.c.ordinal)
        )
    ).all()
    seen: dict[int, int] = {}
    reached: set[str] = set()
    last_seq, last_ordinal = 0, None
    for ordinal, mid, sid in items:
        at = f"{where} context item {ordinal}"
        if (
            (mid is None) == (sid is None)
            or (mid is not None and mid not in tree.seq_of)
            or (sid is not None and sid not in tree.nodes)
        ):
            faults.append(
                Fault(
                    "context_item_invalid",
                    at,
                    "must be exactly one message or summary of this conversation",
                )
            )
            continue
        mids = [mid] if mid is not None else cover(sid)
        if sid is not None:
            stack = [sid]
            while stack:
                s = stack.pop()
                if s not in reached:
                    reached.add(s)
                    stack += tree.kids.get(s, [])
        seqs = sorted(tree.seq_of[m] for m in mids if m in tree.seq_of)
        if seqs and seqs[0] <= last_seq:
            faults.append(
                Fault(
                    "context_order",
                    at,
                    f"covers message #{seqs[0]} after item {last_ordinal} covered #{last_seq}",
                )
            )
        if seqs:
            last_seq, last_ordinal = max(last_seq, seqs[-1]), ordinal
        for m in mids:
            seen[m] = seen.get(m, 0) + 1
    return seen, reached


def _reach_faults(tree: _Tree, seen: dict[int, int], reached: set[str], where: str) -> list[Fault]:
    """`summary_unreachable`, `message_unreachable` and `message_duplicated`."""
    faults = [
        Fault(
            "summary_unreachable",
            f"{where} summary {sid}",
            "neither in the context nor inside another summary",
        )
        for sid in sorted(set(tree.nodes) - reached)
    ]
    for mid, seq in sorted(tree.seq_of.items(), key=lambda kv: kv[1]):
        count = seen.get(mid, 0)
        if count == 0:
            faults.append(
                Fault(
                    "message_unreachable",
                    f"{where} message #{seq}",
                    "not reachable from the context items",
                )
            )
        elif count > 1:
            faults.append(
                Fault(
                    "message_duplicated",
                    f"{where} message #{seq}",
                    f"covered {count} times by the context",
                )
            )
    return faults
