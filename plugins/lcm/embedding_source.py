"""lcm's summaries as an `EmbeddingSource` (source `summary`, key the public `sum_...`
id, position the integer `pk`)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from memory.search.semantic.sources import TableSource
from memory.storage.history import conversations
from plugins.lcm.models import summaries


class SummariesSource(TableSource):
    name = "summary"

    def _eligible(self) -> sa.Select[*tuple[Any, ...]]:
        return (
            sa.select(
                summaries.c.pk,
                summaries.c.id,
                summaries.c.content,
                conversations.c.user_id,
                conversations.c.agent_id,
            )
            .join(conversations, conversations.c.id == summaries.c.conversation_id)
            .where(summaries.c.content != "")
        )

    def _position(self) -> sa.ColumnElement[int]:
        return summaries.c.pk

    def _key(self) -> sa.ColumnElement[str]:
        return summaries.c.id
