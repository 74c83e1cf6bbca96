"""Memory providers found through the `mnemo.memory_providers` entry-point group.

`lcm` and `simple` are registered by mnemo's own pyproject exactly as a third party
registers theirs; the bot never imports a plugin module directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points

from memory.capabilities import Provider, ProviderContext

GROUP = "mnemo.memory_providers"

Factory = Callable[[ProviderContext], Provider]


class ProviderNotFound(LookupError):
    pass


class ProviderLoadError(RuntimeError):
    pass


@dataclass
class ProviderEntry:
    name: str
    target: str  # "module:attr" from the entry point
    distribution: str = ""
    error: str = ""  # why it failed to import, if it did
    factory: Factory | None = field(default=None, repr=False)


def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def provider_names() -> list[str]:
    """Installed provider names, without importing any of them."""
    return sorted(_entry_points())


def _load(ep: EntryPoint) -> ProviderEntry:
    dist = ep.dist.name if ep.dist else ""
    try:
        factory = ep.load()
    except Exception as exc:  # any import failure is reported, never raised here
        return ProviderEntry(ep.name, ep.value, dist, error=f"{type(exc).__name__}: {exc}")
    if not callable(factory):
        return ProviderEntry(ep.name, ep.value, dist, error="entry point is not callable")
    return ProviderEntry(ep.name, ep.value, dist, factory=factory)


def list_providers() -> list[ProviderEntry]:
    """Every installed provider, imported; failures carry `error` instead of raising."""
    return [_load(ep) for _, ep in sorted(_entry_points().items())]


def get_factory(name: str) -> Factory:
    eps = _entry_points()
    if name not in eps:
        raise ProviderNotFound(
            f"unknown memory provider {name!r}; installed: {', '.join(sorted(eps)) or 'none'}"
        )
    entry = _load(eps[name])
    if entry.factory is None:
        raise ProviderLoadError(f"memory provider {name!r} failed to load: {entry.error}")
    return entry.factory


def create_provider(name: str, ctx: ProviderContext) -> Provider:
    provider = get_factory(name)(ctx)
    if not isinstance(provider, Provider):
        raise ProviderLoadError(f"memory provider {name!r} does not implement Provider")
    return provider
