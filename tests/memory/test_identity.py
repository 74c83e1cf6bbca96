"""Identity files seed soul and profile once (memory/storage/identity.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.types import Scope
from memory.storage.identity import IdentityStore, find_identity_file, seed_identity
from memory.storage.stores import SharedStores

U, A = 7, "default"


class Stores(SharedStores):
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine


@pytest.fixture
def stores(engine: AsyncEngine) -> Stores:
    return Stores(engine)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    return d


def test_shared_stores_satisfy_identity_store(engine: AsyncEngine) -> None:
    assert isinstance(Stores(engine), IdentityStore)


async def test_seeds_both_scopes_with_source_system(stores: Stores, data_dir: Path) -> None:
    (data_dir / "Soul.MD").write_text("  You are kind.\n", encoding="utf-8")
    (data_dir / "user.md").write_text("Lives in Lyon.", encoding="utf-8")

    seeded = await seed_identity(stores, data_dir, U, A)

    assert sorted(seeded) == sorted([Scope.SOUL, Scope.PROFILE])
    assert await stores.get_soul(U, A) == "You are kind."
    assert await stores.get_profile(U, A) == "Lives in Lyon."
    rows = await stores.read_changelog(U, A)
    assert {r.source for r in rows} == {"system"}
    assert {r.action for r in rows} == {"create"}


async def test_seeds_only_once(stores: Stores, data_dir: Path) -> None:
    (data_dir / "USER.md").write_text("Lives in Lyon.", encoding="utf-8")
    assert await seed_identity(stores, data_dir, U, A) == [Scope.PROFILE]
    assert await seed_identity(stores, data_dir, U, A) == []
    assert await stores.memory_version(U, A) == 1


async def test_stored_text_is_never_overwritten(stores: Stores, data_dir: Path) -> None:
    (data_dir / "USER.md").write_text("from file", encoding="utf-8")
    await stores.set_profile(U, A, "learned in chat")
    assert await seed_identity(stores, data_dir, U, A) == []
    assert await stores.get_profile(U, A) == "learned in chat"


async def test_a_cleared_profile_is_not_reseeded(stores: Stores, data_dir: Path) -> None:
    (data_dir / "USER.md").write_text("from file", encoding="utf-8")
    await seed_identity(stores, data_dir, U, A)
    await stores.set_profile(U, A, "")  # the user cleared it
    assert await seed_identity(stores, data_dir, U, A) == []
    assert await stores.get_profile(U, A) == ""


async def test_each_owner_is_seeded_separately(stores: Stores, data_dir: Path) -> None:
    (data_dir / "SOUL.md").write_text("soul text", encoding="utf-8")
    await stores.set_soul(1, A, "own soul")
    assert await seed_identity(stores, data_dir, 1, A) == []
    assert await seed_identity(stores, data_dir, 2, A) == [Scope.SOUL]
    assert await stores.get_soul(2, A) == "soul text"
    assert await stores.get_soul(1, A) == "own soul"


async def test_missing_empty_or_broken_files_seed_nothing(
    stores: Stores, data_dir: Path, tmp_path: Path
) -> None:
    assert await seed_identity(stores, tmp_path / "absent", U, A) == []
    (data_dir / "SOUL.md").write_text("   \n", encoding="utf-8")
    (data_dir / "USER.md").write_bytes(b"\xff\xfe not utf-8 \xc3")
    assert await seed_identity(stores, data_dir, U, A) == []
    assert await stores.memory_version(U, A) == 0


def test_find_is_case_insensitive_and_ignores_directories(data_dir: Path) -> None:
    (data_dir / "soul.md").mkdir()
    assert find_identity_file(data_dir, "SOUL.md") is None
    (data_dir / "sOuL.Md").write_text("x", encoding="utf-8")
    found = find_identity_file(data_dir, "SOUL.md")
    assert found is not None and found.name == "sOuL.Md"
