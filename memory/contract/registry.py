"""Memory providers found through the `mnemo.memory_providers` entry-point group.

`lcm` and `simple` are registered by mnemo's own pyproject exactly as a third party
registers theirs; the bot never imports a plugin module directly.

An entry point names a `ProviderPlugin`: the factory with what can be known without
building a provider (its settings model, its class for the capabilities). Nothing else is
accepted (bare factories were, until 2026-11-27: docs/PROVIDERS.md).

A name registered by two installed distributions is refused rather than resolved to
whichever one importlib happens to list last: the operator must uninstall one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from pydantic import BaseModel

from memory.contract.capabilities import Provider, ProviderContext
from memory.contract.settings import settings_of

GROUP = "mnemo.memory_providers"

Factory = Callable[[ProviderContext], Provider]

log = logging.getLogger(__name__)


class ProviderNotFound(LookupError):
    pass


class ProviderLoadError(RuntimeError):
    pass


class ProviderConflict(ProviderLoadError):
    """One provider name registered by more than one installed distribution."""


@dataclass(frozen=True)
class ProviderPlugin:
    """What a plugin registers: `factory` builds the provider from a ProviderContext;
    `settings` (a pydantic model, optional) validates `memory.<name>` and reaches the
    factory as `ctx.settings`; `provider_class` (optional) lets `mnemo providers` list
    the capabilities without opening a database."""

    name: str
    factory: Factory
    settings: type[BaseModel] | None = None
    provider_class: type | None = None

    def __call__(self, ctx: ProviderContext) -> Provider:
        """The provider, built by `factory` with `ctx.settings` validated from
        `ctx.config` when the plugin has a settings model (and the caller did not)."""
        if self.settings is not None:
            ctx = dataclasses.replace(
                ctx, settings=settings_of(self.settings, self.name, ctx.settings, ctx.config)
            )
        return self.factory(ctx)


@dataclass
class ProviderEntry:
    name: str
    target: str  # "module:attr" from the entry point
    distribution: str = ""
    error: str = ""  # why it cannot be used (failed to import, or a name conflict)
    factory: Factory | None = field(default=None, repr=False)
    conflict: bool = False  # another distribution registers the same name
    plugin: ProviderPlugin | None = field(default=None, repr=False)


def _registrations() -> dict[str, list[EntryPoint]]:
    """Every registration of each name. importlib already lists one distribution once
    even if it is on sys.path twice, so more than one entry here means distinct packages
    (or one package naming the provider twice with different targets)."""
    found: dict[str, list[EntryPoint]] = {}
    seen: set[tuple[str, str, str, str]] = set()
    for ep in entry_points(group=GROUP):
        key = (ep.name, _dist(ep), _version(ep), ep.value)
        if key in seen:  # the very same line twice resolves to the same factory
            continue
        seen.add(key)
        found.setdefault(ep.name, []).append(ep)
    return found


def _dist(ep: EntryPoint) -> str:
    return ep.dist.name if ep.dist else ""


def _version(ep: EntryPoint) -> str:
    return ep.dist.version if ep.dist else ""


def _conflict_message(name: str, eps: list[EntryPoint]) -> str:
    owners = sorted(f"{_dist(ep) or 'an unnamed package'} {_version(ep)}".strip() for ep in eps)
    count = {2: "two", 3: "three"}.get(len(owners), str(len(owners)))
    listed = f"{', '.join(owners[:-1])} and {owners[-1]}"
    remedy = "uninstall one" if len(owners) == 2 else "uninstall all but one"
    return f"memory provider {name!r} is registered by {count} packages: {listed}; {remedy}"


def provider_names() -> list[str]:
    """Installed provider names, without importing any of them."""
    return sorted(_registrations())


def _load(ep: EntryPoint) -> ProviderEntry:
    dist = _dist(ep)
    try:
        target = ep.load()
    except Exception as exc:  # any import failure is reported, never raised here
        return ProviderEntry(ep.name, ep.value, dist, error=f"{type(exc).__name__}: {exc}")
    if not isinstance(target, ProviderPlugin):
        why = f"entry point names a {type(target).__name__}, not a ProviderPlugin"
        return ProviderEntry(ep.name, ep.value, dist, error=why)
    return ProviderEntry(ep.name, ep.value, dist, factory=target, plugin=target)


def list_providers() -> list[ProviderEntry]:
    """Every installed provider, imported; failures carry `error` instead of raising.
    A conflicting name is listed once per distribution, each marked `conflict` and not
    imported (neither can be created, so neither module needs to run)."""
    entries: list[ProviderEntry] = []
    for name, eps in sorted(_registrations().items()):
        if len(eps) == 1:
            entries.append(_load(eps[0]))
            continue
        why = _conflict_message(name, eps)
        entries.extend(
            ProviderEntry(name, ep.value, _dist(ep), error=why, conflict=True)
            for ep in sorted(eps, key=lambda ep: (_dist(ep), ep.value))
        )
    return entries


def get_factory(name: str) -> Factory:
    """What builds provider `name` (its plugin, which validates the settings first)."""
    return get_plugin(name)


def get_plugin(name: str) -> ProviderPlugin:
    """The plugin registered as `name`. Raises ProviderNotFound, ProviderConflict or
    ProviderLoadError, each one line."""
    registered = _registrations()
    if name not in registered:
        raise ProviderNotFound(
            f"unknown memory provider {name!r}; installed: "
            f"{', '.join(sorted(registered)) or 'none'}"
        )
    eps = registered[name]
    if len(eps) > 1:
        raise ProviderConflict(_conflict_message(name, eps))
    entry = _load(eps[0])
    if entry.plugin is None:
        raise ProviderLoadError(f"memory provider {name!r} failed to load: {entry.error}")
    return entry.plugin


def create_provider(name: str, ctx: ProviderContext) -> Provider:
    """The provider `name` built with `ctx`, for synchronous callers. From a coroutine use
    `create_provider_async`: here a refused object's async close can only be scheduled on
    the running loop, not finished before the error is raised."""
    provider = get_factory(name)(ctx)
    if not isinstance(provider, Provider):
        _close_refused(name, provider)
        raise _not_a_provider(name)
    return provider


async def create_provider_async(name: str, ctx: ProviderContext) -> Provider:
    """`create_provider` for coroutines: a refused object is closed, its async close
    awaited on the caller's loop, before the error is raised, so the caller may dispose of
    what the object used (the engine) as soon as it sees the error."""
    provider = get_factory(name)(ctx)
    if not isinstance(provider, Provider):
        pending = _start_close(name, provider)
        if pending is not None:
            try:
                await pending
            except Exception:
                _log_close_failure(name)
        raise _not_a_provider(name)
    return provider


def _not_a_provider(name: str) -> ProviderLoadError:
    return ProviderLoadError(f"memory provider {name!r} does not implement Provider")


# Closes scheduled on a running loop; held so they are not garbage-collected mid-way.
_closing: set[asyncio.Task[Any]] = set()


def _log_close_failure(name: str, exc: BaseException | None = None) -> None:
    # The refusal is the error the caller needs to see; a failed close is only logged.
    log.warning("closing the object memory provider %r returned failed", name, exc_info=exc or True)


def _start_close(name: str, obj: object) -> Awaitable[Any] | None:
    """Call what closes an object a factory returned before it is refused, so a half-built
    plugin's connections or threads do not outlive the error. What is left to await of an
    async close is returned; None when the close is done (or failed, and was logged)."""
    if isinstance(obj, type):  # a class, not an instance: it holds nothing to close
        return None
    close = getattr(obj, "close", None)
    aexit = getattr(type(obj), "__aexit__", None)  # looked up as `async with` does
    try:
        if callable(close):
            result = close()
        elif callable(aexit):
            result = aexit(obj, None, None, None)
        else:
            return None
    except Exception:
        _log_close_failure(name)
        return None
    return result if inspect.isawaitable(result) else None


def _close_refused(name: str, obj: object) -> None:
    """`_start_close`, then finish an async close: run to completion when no loop is
    running in this thread, else scheduled on the running loop."""
    pending = _start_close(name, obj)
    if pending is None:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is None:
        try:
            asyncio.run(_awaited(pending))
        except Exception:
            _log_close_failure(name)
        return
    # Called from a coroutine: this thread runs the loop, so blocking on the close here
    # would deadlock it, and the object's resources belong to this loop. The close runs
    # on it as soon as the caller next awaits (`create_provider_async` awaits it instead).
    task = loop.create_task(_awaited(pending), name=f"close refused provider {name}")
    _closing.add(task)
    task.add_done_callback(lambda t: _closed(name, t))


async def _awaited(aw: Awaitable[Any]) -> Any:
    return await aw


def _closed(name: str, task: asyncio.Task[Any]) -> None:
    _closing.discard(task)
    if not task.cancelled() and task.exception() is not None:
        _log_close_failure(name, task.exception())
