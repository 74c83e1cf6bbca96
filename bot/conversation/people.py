"""Who an id is: the display name and @username a channel last saw for a user (or a
group, whose chat id its memory is kept under), for the operator console's pages.

Written only when they change: each process remembers what it last wrote per id, so a
chat costs one write per process and per rename, not one per message. A failure to
write is logged and forgotten (a name is a convenience, never worth a lost message).
An erasure deletes the row with the id's last memory (`register`).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.actions.fitting import one_line
from memory.contract.types import utcnow
from memory.storage import forgetting as fg
from memory.storage.db import conflict_insert, write_transaction
from memory.storage.forgetting import Owner
from memory.storage.history import conversations
from memory.text.sanitize import storable

log = logging.getLogger(__name__)

_meta = sa.MetaData()
people = sa.Table(
    "people",
    _meta,
    sa.Column("user_id", sa.BigInteger, primary_key=True),
    sa.Column("name", sa.String(256), nullable=False),
    sa.Column("username", sa.String(64), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)
REMEMBERED = 10_000  # ids whose last written name this process keeps


@dataclass(frozen=True)
class Person:
    name: str
    username: str = ""

    def __str__(self) -> str:
        return f"{self.name} (@{self.username})" if self.username else self.name


class People:
    """The names of one database, written as a channel sees them."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._written: OrderedDict[int, Person] = OrderedDict()

    async def seen(self, user_id: int, name: str, username: str | None = None) -> None:
        person = Person(storable(one_line(name, 256)) or "?", storable(username or "")[:64])
        if self._written.get(user_id) == person:
            return
        try:
            async with write_transaction(self.engine) as conn:
                values = {"name": person.name, "username": person.username}
                await conn.execute(
                    conflict_insert(conn, people)
                    .values(user_id=user_id, updated_at=utcnow(), **values)
                    .on_conflict_do_update(
                        index_elements=[people.c.user_id], set_={**values, "updated_at": utcnow()}
                    )
                )
        except Exception as exc:  # never the message's concern
            log.warning("could not record the name of %s: %s", user_id, type(exc).__name__)
            return
        self._written[user_id] = person
        self._written.move_to_end(user_id)
        if len(self._written) > REMEMBERED:
            self._written.popitem(last=False)


async def names(engine: AsyncEngine, user_ids: Iterable[int]) -> dict[int, Person]:
    """The recorded names of `user_ids` (those without one are left out)."""
    ids = sorted(set(user_ids))
    if not ids:
        return {}
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(people.c.user_id, people.c.name, people.c.username).where(
                people.c.user_id.in_(ids)
            )
        )
        return {int(r.user_id): Person(r.name, r.username) for r in rows}


async def erase_name(conn: AsyncConnection, owner: Owner) -> dict[str, int]:
    """The name goes with the id's last memory: a name is one per id, not per agent, so
    erasing the memory one agent keeps leaves it while another agent still has some."""
    others = sa.exists().where(
        conversations.c.user_id == owner.user_id, conversations.c.agent_id != owner.agent_id
    )
    result = await conn.execute(people.delete().where(people.c.user_id == owner.user_id, ~others))
    return {"recorded name(s)": int(result.rowcount or 0)}


def register() -> None:
    fg.on_erase("people", erase_name)
