"""Tracing wrapper: records every provider call (operation, duration, payload sizes).

The wrapper does not implement every capability with empty answers for the missing
ones (a caller would then think a provider can do what it cannot); it exposes exactly
the capabilities of the provider it wraps: the wrapper class is built from the inner provider's capabilities, so
`isinstance(traced, Searcher)` answers the same as for the inner provider, and the memory
tool and the pool may check either.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from memory.contract.capabilities import CAPABILITIES, Provider
from memory.contract.context import session_id_from_context
from memory.contract.types import Message, Session

log = logging.getLogger(__name__)

_WRAPPED = "__wrapped_provider__"


@dataclass(frozen=True)
class TraceEvent:
    """One provider call. Sizes count characters of text payload (messages, queries,
    summaries, profile texts), never the text itself: traces must not leak memory."""

    provider: str
    operation: str
    duration_s: float
    arg_size: int
    result_size: int
    session_id: str = ""
    error: str | None = None  # exception class name when the call raised

    @property
    def ok(self) -> bool:
        return self.error is None


TraceHook = Callable[[TraceEvent], object]

# Every traceable member, per capability; the core Provider methods first.
_PROTOCOLS: dict[str, type] = {"Provider": Provider, **CAPABILITIES}


def _methods(proto: type) -> tuple[str, ...]:
    return tuple(
        name
        for name, value in vars(proto).items()
        if not name.startswith("_") and inspect.isfunction(value)
    )


_PROTOCOL_METHODS = {cap: _methods(proto) for cap, proto in _PROTOCOLS.items()}


def payload_size(value: Any, _depth: int = 0) -> int:
    """Characters of text carried by `value` (strings inside lists, dicts, dataclasses)."""
    if _depth > 5 or value is None or isinstance(value, Session):
        return 0
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, Message):
        return len(value.text())
    if isinstance(value, dict):
        return sum(payload_size(v, _depth + 1) for v in value.values())
    if isinstance(value, list | tuple | set | frozenset):
        return sum(payload_size(v, _depth + 1) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(
            payload_size(getattr(value, f.name), _depth + 1) for f in dataclasses.fields(value)
        )
    return 0


class TracedProvider:
    """Base of the generated wrapper classes; use `with_tracing` to build one."""

    def __init__(self, inner: Provider, hooks: TraceHook) -> None:
        setattr(self, _WRAPPED, inner)
        self._hooks = hooks

    @property
    def name(self) -> str:
        return getattr(getattr(self, _WRAPPED), "name", type(getattr(self, _WRAPPED)).__name__)

    def __repr__(self) -> str:
        return f"<traced {getattr(self, _WRAPPED)!r}>"

    async def _traced_call(
        self, operation: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        inner = getattr(self, _WRAPPED)
        started = time.perf_counter()
        error: str | None = None
        result: Any = None
        try:
            result = getattr(inner, operation)(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
            return result
        except BaseException as exc:  # recorded, then re-raised unchanged
            error = type(exc).__name__
            raise
        finally:
            self._emit(
                TraceEvent(
                    provider=self.name,
                    operation=operation,
                    duration_s=time.perf_counter() - started,
                    arg_size=payload_size(args) + payload_size(kwargs),
                    result_size=payload_size(result),
                    session_id=_session_of(args, kwargs),
                    error=error,
                )
            )

    def _emit(self, event: TraceEvent) -> None:
        try:
            self._hooks(event)
        except Exception:
            # A broken hook must never break memory: log it and carry on.
            log.warning("memory trace hook failed on %s", event.operation, exc_info=True)


def _session_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    for value in (*args, *kwargs.values()):
        if isinstance(value, Session):
            return value.id
    return session_id_from_context()


def _traced_method(operation: str) -> Callable[..., Any]:
    async def method(self: TracedProvider, *args: Any, **kwargs: Any) -> Any:
        return await self._traced_call(operation, args, kwargs)

    method.__name__ = method.__qualname__ = operation
    return method


_CLASSES: dict[frozenset[str], type[TracedProvider]] = {}


def _wrapper_class(capabilities: frozenset[str]) -> type[TracedProvider]:
    cls = _CLASSES.get(capabilities)
    if cls is None:
        namespace: dict[str, Any] = {}
        for cap in _PROTOCOLS:
            if cap in capabilities:
                for op in _PROTOCOL_METHODS[cap]:
                    namespace[op] = _traced_method(op)
        suffix = "".join(sorted(capabilities)) or "Nothing"
        cls = type(f"Traced{suffix}", (TracedProvider,), namespace)
        _CLASSES[capabilities] = cls
    return cls


def with_tracing(provider: Provider, hooks: TraceHook) -> Provider:
    """Wrap `provider` so that every contract call is reported to `hooks`.

    The wrapper has the methods of exactly those capabilities the provider implements;
    anything else (a plugin's own extras) is reached through `unwrap(provider)`.
    Exceptions from the provider propagate unchanged; exceptions from `hooks` are logged
    and swallowed.
    """
    capabilities = frozenset(
        cap for cap, proto in _PROTOCOLS.items() if isinstance(unwrap(provider), proto)
    )
    return cast(Provider, _wrapper_class(capabilities)(provider, hooks))


def unwrap(provider: object) -> Any:
    """The innermost provider under any number of tracing (or compatible) wrappers: a
    wrapper marks itself with a `__wrapped_provider__` attribute."""
    seen = 0
    while (inner := getattr(provider, _WRAPPED, None)) is not None and seen < 100:
        provider = inner
        seen += 1
    return provider


T = TypeVar("T")


# `Callable[..., T]`, not `type[T]`: mypy refuses a Protocol class where `type[T]` is
# expected (type-abstract), and every capability is a Protocol.
def capability(provider: Provider, cap: Callable[..., T]) -> T | None:
    """`provider` as the capability `cap` when it implements it (under any tracing
    wrapper: the check is on the innermost provider, the calls go through the wrapper),
    else None."""
    if isinstance(unwrap(provider), cast(type, cap)):
        return cast(T, provider)
    return None
