"""Per-(agent, user) notes files: paths, isolation, serialised concurrency, outside writes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from memory.contract.errors import Conflict, InvalidArgument, NotFound
from plugins.simple.notes_file import Add, Alias, NotesFile, Write
from plugins.simple.notes_store import NotesStore, safe_component


def test_paths_are_sanitised_and_one_to_one(tmp_path: Path) -> None:
    store = NotesStore(tmp_path)
    assert store.path_for("default", 42) == tmp_path / "default" / "42.mem"
    assert store.path_for("default", -1001234) == tmp_path / "default" / "-1001234.mem"
    for hostile in ("..", "../etc", "a/b", "/abs", ".", "a\x00b"):
        path = store.path_for(hostile, 1)
        assert path.parent.parent == tmp_path and "/" not in path.parent.name
        assert path.parent.name not in (".", "..")
    assert safe_component("a/b") != safe_component("a_b") != safe_component("a%2Fb")
    with pytest.raises(InvalidArgument):
        store.path_for("", 1)
    with pytest.raises(InvalidArgument):
        store.path_for("agent", "1")  # type: ignore[arg-type]


async def test_users_and_agents_are_isolated(tmp_path: Path) -> None:
    store = NotesStore(tmp_path)
    await store.apply("bot", 1, Add("secret", "alice's diary about paris"))
    await store.apply("bot", 2, Add("secret", "bob's note about paris"))  # same name: no clash
    await store.apply("other", 1, Add("misc", "paris again"))
    assert (await store.get("bot", 1, "secret")).content == "alice's diary about paris"
    assert (await store.get("bot", 2, "secret")).content == "bob's note about paris"
    assert [h.entry.content for h in await store.search("bot", 2, "paris diary")] == [
        "bob's note about paris"
    ]
    assert await store.search("bot", 3, "paris") == []
    with pytest.raises(NotFound):
        await store.get("other", 1, "secret")


async def test_concurrent_operations_serialise(tmp_path: Path) -> None:
    store = NotesStore(tmp_path)
    await store.apply("bot", 7, Add("counter", "start"))
    names = [f"note {i}" for i in range(30)]

    async def add(name: str) -> int:
        entry = await store.apply("bot", 7, Add(name, f"content of {name}"))
        assert entry is not None
        return entry.id

    async def alias(i: int) -> str:
        try:
            await store.apply("bot", 7, Alias("counter", "shared alias"))
            return "ok"
        except Conflict:
            return "conflict"

    results = await asyncio.gather(*(add(n) for n in names), *(alias(i) for i in range(5)))
    ids = results[: len(names)]
    assert sorted(ids) == list(range(2, 32))  # every add got a distinct id, none lost
    assert sorted(results[len(names) :]) == ["conflict"] * 4 + ["ok"]
    on_disk = NotesFile.open(store.path_for("bot", 7))
    assert len(on_disk) == 31
    assert on_disk.get("shared alias").name == "counter"


async def test_writes_by_another_process_are_seen(tmp_path: Path) -> None:
    # Two stores on one directory stand for two replicas: each re-reads the file when
    # its (inode, mtime, size) changed, so neither overwrites the other's write.
    first, second = NotesStore(tmp_path), NotesStore(tmp_path)
    await first.apply("bot", 1, Add("a", "one"))
    assert (await second.get("bot", 1, "a")).content == "one"
    await second.apply("bot", 1, Write("a", "two"))
    await first.apply("bot", 1, Add("b", "three"))
    assert (await first.get("bot", 1, "a")).content == "two"
    assert [e.name for e in await second.entries("bot", 1)] == ["a", "b"]


async def test_cache_evicts_idle_files_and_reloads_them(tmp_path: Path) -> None:
    store = NotesStore(tmp_path, max_open=2)
    for user in range(5):
        await store.apply("bot", user, Add("n", f"user {user}"))
    assert len(store._files) == 2 and not store._locks and not store._users
    for user in range(5):
        assert (await store.get("bot", user, "n")).content == f"user {user}"
