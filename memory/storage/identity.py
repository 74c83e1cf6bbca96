"""Identity files: `SOUL.md` and `USER.md` in the data directory seed the
soul and the profile of a (user, agent) that has none stored yet.

"None stored yet" means the stored text is empty *and* the changelog has no row of that
scope: a user who cleared their profile keeps it cleared. Seeding writes with change
source `system`, so the history shows where the text came from.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Protocol, runtime_checkable

from memory.contract.capabilities import ChangelogReader, ProfileStore
from memory.contract.context import with_change_source
from memory.contract.errors import InvalidArgument
from memory.contract.types import ChangeSource, Scope

log = logging.getLogger(__name__)

# Scope -> file name, matched case-insensitively.
IDENTITY_FILES: dict[Scope, str] = {Scope.SOUL: "soul.md", Scope.PROFILE: "user.md"}


@runtime_checkable
class IdentityStore(ProfileStore, ChangelogReader, Protocol):
    """What seeding needs: the profile store and its changelog."""


def find_identity_file(data_dir: Path, name: str) -> Path | None:
    """The file in `data_dir` whose name equals `name` ignoring case, or None.

    On a case-sensitive file system several may match (`SOUL.md` and `soul.md`); the
    first in sorted order wins, so the choice is stable, and the others are reported.
    """
    try:
        matches = sorted(
            p for p in data_dir.iterdir() if p.name.lower() == name.lower() and p.is_file()
        )
    except (FileNotFoundError, NotADirectoryError):
        return None
    if len(matches) > 1:
        log.warning(
            "several identity files match %s in %s; using %s",
            name,
            data_dir,
            matches[0].name,
        )
    return matches[0] if matches else None


def read_identity(data_dir: Path) -> dict[Scope, str]:
    """The non-empty identity texts found in `data_dir`, by scope."""
    found: dict[Scope, str] = {}
    for scope, name in IDENTITY_FILES.items():
        path = find_identity_file(data_dir, name)
        if path is None:
            continue
        try:
            text = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            # A broken identity file must not stop the conversation.
            log.warning("identity file %s not read: %s", path, exc)
            continue
        if text:
            found[scope] = text
    return found


async def seed_identity(
    store: IdentityStore, data_dir: Path, user_id: int, agent_id: str
) -> list[Scope]:
    """Seed soul and profile of (user, agent) from the identity files where nothing was
    ever stored; returns the scopes it wrote."""
    # Directory listing and file reads in a worker thread: a slow disk must not stall
    # every other conversation on the event loop.
    texts = await asyncio.to_thread(read_identity, Path(data_dir))
    seeded: list[Scope] = []
    for scope, text in texts.items():
        if scope is Scope.SOUL:
            current, write = await store.get_soul(user_id, agent_id), store.set_soul
        else:
            current, write = await store.get_profile(user_id, agent_id), store.set_profile
        if current or await store.read_changelog(user_id, agent_id, scope=scope.value, limit=1):
            continue
        try:
            with with_change_source(ChangeSource.SYSTEM):
                await write(user_id, agent_id, text)
        except InvalidArgument as exc:  # e.g. a file over the size limit
            log.warning("identity %s not seeded: %s", scope.value, exc)
            continue
        seeded.append(scope)
    return seeded
