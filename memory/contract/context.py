"""Who is calling, carried in contextvars so stores can tag writes without extra
parameters."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import TypeVar

from memory.contract.types import ChangeSource

_session_id: ContextVar[str] = ContextVar("mnemo_session_id", default="")
_user_id: ContextVar[int] = ContextVar("mnemo_user_id", default=0)
_agent_id: ContextVar[str] = ContextVar("mnemo_agent_id", default="")
_change_source: ContextVar[ChangeSource] = ContextVar(
    "mnemo_change_source", default=ChangeSource.AGENT
)
# A person behind the write beyond its source (an operator's `web:<name>`), for the rows
# whose session column already names something else (a forget's conversation).
_actor: ContextVar[str] = ContextVar("mnemo_actor", default="")


T = TypeVar("T")


@contextmanager
def _bind(var: ContextVar[T], value: T) -> Iterator[None]:
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


def with_session_id(session_id: str) -> AbstractContextManager[None]:
    return _bind(_session_id, session_id)


def with_user_id(user_id: int) -> AbstractContextManager[None]:
    return _bind(_user_id, user_id)


def with_agent_id(agent_id: str) -> AbstractContextManager[None]:
    return _bind(_agent_id, agent_id)


def with_change_source(source: ChangeSource | str) -> AbstractContextManager[None]:
    return _bind(_change_source, ChangeSource(source))


def with_actor(actor: str) -> AbstractContextManager[None]:
    return _bind(_actor, actor)


def actor_from_context() -> str:
    return _actor.get()


def session_id_from_context() -> str:
    return _session_id.get()


def user_id_from_context() -> int:
    return _user_id.get()


def agent_id_from_context() -> str:
    return _agent_id.get()


def change_source_from_context() -> ChangeSource:
    """The source of the write in progress; `agent` when nobody said otherwise."""
    return _change_source.get()
