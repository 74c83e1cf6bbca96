"""Which messages a fact written through the memory tool may cite.

The store keeps only ids of the owner's memory; a caller narrows them further to what
the writer saw, as an answer's citations are narrowed (memory/actions/provenance.py):
the model in a turn, to the messages of its conversation and those its memory calls of
this turn returned; reflect, to the messages of the material it reviewed. A fact the
model sets in a turn without citing rests on the turn's own user message."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.capabilities import Provider
from memory.contract.facts import FactChange
from memory.contract.tracing import unwrap
from memory.contract.types import Session
from memory.facts.rows import in_conversation, latest_user_message


@dataclass(frozen=True)
class FactWrite:
    """What a fact action of the memory tool did, and the cited ids it did not keep."""

    changes: list[FactChange]
    refused: tuple[int, ...]


@dataclass(frozen=True)
class Citation:
    kept: tuple[int, ...]
    refused: tuple[int, ...]  # not in what the writer may cite


def _engine(provider: Provider) -> AsyncEngine | None:
    engine = getattr(unwrap(provider), "engine", None)
    return engine if isinstance(engine, AsyncEngine) else None


async def citable(
    provider: Provider,
    session: Session,
    ids: Sequence[int],
    returned: Collection[str],
    *,
    in_turn: bool,
) -> Citation:
    """`ids` narrowed to `returned` (ids as the memory tool showed them), plus, in a
    turn, the messages of `session`'s conversation; none given in a turn: the turn's
    user message."""
    engine = _engine(provider)
    if not ids:
        if in_turn and engine is not None:
            async with engine.connect() as conn:
                own = await latest_user_message(conn, session.id)
            return Citation((own,) if own is not None else (), ())
        return Citation((), ())
    kept = {i for i in ids if str(i) in returned}
    if in_turn and engine is not None:
        async with engine.connect() as conn:
            kept |= await in_conversation(conn, session.id, ids)
    return Citation(tuple(sorted(kept)), tuple(sorted(set(ids) - kept)))
