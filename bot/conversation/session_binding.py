"""A session's ids in the context, for stores that tag their writes with them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from memory.contract.context import with_agent_id, with_session_id, with_user_id
from memory.contract.types import Session


@contextmanager
def bind_session(session: Session) -> Iterator[None]:
    """Session, user and agent ids in the context, for stores that tag their writes."""
    with ExitStack() as stack:
        stack.enter_context(with_session_id(session.id))
        stack.enter_context(with_user_id(session.user_id))
        stack.enter_context(with_agent_id(session.agent_id))
        yield
