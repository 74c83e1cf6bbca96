"""The system prompt: the configured base prompt plus the agent's soul, the user's profile
and the user's constraints, inside `<memory>` tags (seed "Identity Files").

Reads go through the session's snapshot version when the provider versions its stores, so a
session's system prompt stays byte for byte the same (the model server caches it with the
history after it) until its next compaction, which rewrites the prompt's start anyway and
moves the snapshot to what reflect and the agent's own writes changed meanwhile; a
person's `/memory` write moves it at once (memory/storage/snapshots.py).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from memory.contract.capabilities import (
    ConstraintStore,
    ProfileStore,
    Provider,
    SessionSnapshotStore,
    VersionedConstraintStore,
    VersionedProfileStore,
)
from memory.contract.types import ConstraintEntry, Session
from memory.storage import snapshots


@dataclass
class MemoryView:
    soul: str = ""
    profile: str = ""
    constraints: list[ConstraintEntry] = field(default_factory=list)
    version: int | None = None  # the snapshot version read, when versioned


async def snapshot_version(provider: Provider, session: Session) -> int | None:
    if not isinstance(provider, SessionSnapshotStore):
        return None
    snap = await provider.get_or_create_snapshot(session.id, session.user_id, session.agent_id)
    return snap.version


async def read_memory(provider: Provider, session: Session, version: int | None) -> MemoryView:
    """Soul, profile and constraints of the session's user, at `version` when given and
    the provider can read versions, else current."""
    view = MemoryView(version=version)
    uid, aid = session.user_id, session.agent_id
    # Version 0 = nothing was stored yet when the session froze its view (versions start
    # at 1); the stores read a version <= 0 as "current", so it must not reach them.
    if isinstance(provider, ProfileStore):
        if version is not None and isinstance(provider, VersionedProfileStore):
            if version > 0:
                view.soul = await provider.get_soul_at(uid, aid, version)
                view.profile = await provider.get_profile_at(uid, aid, version)
        else:
            view.soul = await provider.get_soul(uid, aid)
            view.profile = await provider.get_profile(uid, aid)
    if isinstance(provider, ConstraintStore):
        if version is not None and isinstance(provider, VersionedConstraintStore):
            if version > 0:
                view.constraints = await provider.get_constraints_at(uid, aid, version)
        else:
            view.constraints = await provider.get_constraints(uid, aid)
    return view


VIEW_CACHE_SIZE = 4096


class MemoryReader:
    """`snapshot_version` and `read_memory` for one provider, for every turn.

    A view read at a snapshot version V > 0 never changes (the changelog only grows, and
    every version's rows commit with the version itself), so views are kept per
    (user, agent, version) in a bounded LRU: a session re-reads soul, profile and
    constraints only when its snapshot moves. Current reads (a provider without
    versions) are never cached. The capability checks are made once.
    """

    def __init__(
        self, provider: Provider, max_views: int = VIEW_CACHE_SIZE, *, cache_snapshots: bool = False
    ) -> None:
        """`cache_snapshots`: keep each session's snapshot version in memory, read again
        only after a snapshot moved in this process (memory/storage/snapshots.py). Right only
        where no other process advances this store's snapshots: one serving process."""
        self.provider = provider
        self.max_views = max_views
        self._snapshots = isinstance(provider, SessionSnapshotStore)
        self._cache_snapshots = cache_snapshots
        self._versions: OrderedDict[str, tuple[int, int | None]] = OrderedDict()
        # Cacheable only when every store the provider has reads at a version.
        self._versioned = (
            not isinstance(provider, ProfileStore) or isinstance(provider, VersionedProfileStore)
        ) and (
            not isinstance(provider, ConstraintStore)
            or isinstance(provider, VersionedConstraintStore)
        )
        self._views: OrderedDict[tuple[int, str, int], MemoryView] = OrderedDict()

    async def snapshot_version(self, session: Session) -> int | None:
        if not self._snapshots:
            return None
        if not self._cache_snapshots:
            return await snapshot_version(self.provider, session)
        cached = self._versions.get(session.id)
        if cached is not None and cached[0] == snapshots.moves():
            self._versions.move_to_end(session.id)
            return cached[1]
        # The count before the read: a move landing during the read makes this entry stale.
        moves = snapshots.moves()
        version = await snapshot_version(self.provider, session)
        self._versions[session.id] = (moves, version)
        while len(self._versions) > self.max_views:
            self._versions.popitem(last=False)
        return version

    async def read(self, session: Session, version: int | None) -> MemoryView:
        if version is None or not self._versioned:
            return await read_memory(self.provider, session, version)
        key = (session.user_id, session.agent_id, version)
        view = self._views.get(key)
        if view is not None:
            self._views.move_to_end(key)
            return view
        view = await read_memory(self.provider, session, version)
        self._views[key] = view
        while len(self._views) > self.max_views:
            self._views.popitem(last=False)
        return view


def build_system_prompt(base: str, view: MemoryView) -> str:
    """`base`, then a `<memory>` block holding only the parts that have content."""
    parts: list[str] = []
    if view.soul.strip():
        parts.append(f"<soul>\n{view.soul.strip()}\n</soul>")
    if view.profile.strip():
        parts.append(f"<user_profile>\n{view.profile.strip()}\n</user_profile>")
    if view.constraints:
        rules = "\n".join(f"- [{c.id}] {c.text}" for c in view.constraints)
        parts.append(
            "<constraints>\nRules the user set. Always follow them; they override other "
            f"instructions.\n{rules}\n</constraints>"
        )
    if not parts:
        return base.strip()
    return base.strip() + "\n\n<memory>\n" + "\n".join(parts) + "\n</memory>"
