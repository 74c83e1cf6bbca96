"""Provider registry: a third party's provider appears through entry points alone."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.config.settings import ConfigError, load_settings
from memory.contract.registry import (
    ProviderConflict,
    ProviderLoadError,
    ProviderNotFound,
    create_provider,
    get_factory,
    list_providers,
    provider_names,
)
from tests.waits import scaled

MNEMO = Path(sys.executable).with_name("mnemo")
MODULES = ("acme_memory", "acme_broken", "acme_bogus", "rival_memory", "acme_leaky")

ACME = """
from memory.contract.registry import ProviderPlugin
from memory.contract.types import SearchResult, SessionStats


class AcmeProvider:
    name = "acme"

    def __init__(self, ctx):
        self.ctx = ctx

    async def bootstrap(self, session): ...
    async def append(self, session, *msgs, options=None): ...
    async def assemble(self, session, budget, fresh_tail): return []
    async def stats(self, session): return SessionStats()
    async def close(self): ...
    async def search(self, session, query): return [SearchResult("message", "1", query.text)]


create = ProviderPlugin("acme", AcmeProvider, provider_class=AcmeProvider)
"""


@pytest.fixture
def third_party(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A throwaway 'installed' distribution: modules plus a dist-info directory."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "acme_memory.py").write_text(ACME, encoding="utf-8")
    (site / "acme_broken.py").write_text(
        "import acme_dependency_that_is_missing\n", encoding="utf-8"
    )
    (site / "acme_bogus.py").write_text(
        "from memory.contract.registry import ProviderPlugin\n"
        "create = ProviderPlugin('acme-bogus', lambda ctx: object())\n",
        encoding="utf-8",
    )
    info = site / "acme_memory-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: acme-memory\nVersion: 1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        textwrap.dedent("""\
        [mnemo.memory_providers]
        acme = acme_memory:create
        acme-broken = acme_broken:create
        acme-bogus = acme_bogus:create
        """),
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("MNEMO_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    yield site
    for name in MODULES:
        sys.modules.pop(name, None)


def _providers(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`mnemo providers`, as run from a shell."""
    return subprocess.run(
        [str(MNEMO), "providers"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(60),
    )


def test_mnemo_providers_lists_a_third_party_provider(third_party: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MNEMO_CONFIG"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(third_party), env.get("PYTHONPATH")]))
    proc = _providers(env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = {
        line.split()[1] if line.startswith("*") else line.split()[0]: line
        for line in proc.stdout.splitlines()
    }
    assert {"acme", "acme-broken", "acme-bogus", "lcm", "simple"} <= set(lines)
    assert lines["acme"] == "  acme  (acme_memory:create)  capabilities: Provider, Searcher"
    assert (
        "ERROR: ModuleNotFoundError: No module named 'acme_dependency_that_is_missing'"
        in lines["acme-broken"]
    )
    assert lines["lcm"].startswith("* lcm")  # the configured provider (default config)


def test_registry_loads_and_reports_cleanly(third_party: Path) -> None:
    assert {"acme", "acme-broken", "lcm", "simple"} <= set(provider_names())
    entries = {e.name: e for e in list_providers()}
    assert entries["acme"].factory is not None and entries["acme"].distribution == "acme-memory"
    assert (
        entries["acme-broken"].factory is None
        and "ModuleNotFoundError" in entries["acme-broken"].error
    )
    with pytest.raises(
        ProviderNotFound, match=r"unknown memory provider 'nope'; installed: .*acme"
    ):
        get_factory("nope")
    with pytest.raises(ProviderLoadError, match="'acme-broken' failed to load: ModuleNotFound"):
        get_factory("acme-broken")
    with pytest.raises(ProviderLoadError, match="'acme-bogus' does not implement Provider"):
        create_provider("acme-bogus", ctx=None)  # type: ignore[arg-type]
    provider = create_provider("acme", ctx="the context")  # type: ignore[arg-type]
    assert provider.name == "acme" and provider.ctx == "the context"


def test_config_accepts_an_installed_third_party_section(third_party: Path, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "memory: {provider: acme, acme: {shards: 3}}\ncompaction: {keep_tail: 7}\n",
        encoding="utf-8",
    )
    settings = load_settings(path)
    # The bot's compaction settings reach every provider: keep_tail as given, the target
    # as the default max_tokens x target_fraction.
    target = settings.compaction.max_tokens * settings.compaction.target_fraction
    assert settings.provider_config() == {"shards": 3, "keep_tail": 7, "target_tokens": int(target)}
    path.write_text("memory: {provider: acme, acme: 3}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="memory.acme: expected a mapping"):
        load_settings(path)


def test_without_the_package_the_name_is_unknown(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("memory: {provider: acme}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="unknown provider 'acme'; installed: ") as info:
        load_settings(path)
    installed = str(info.value).split("installed: ")[1].split(", ")
    assert "lcm" in installed and "simple" in installed and "acme" not in installed


def install(
    site: Path, dist: str, version: str, entries: dict[str, str], modules: dict[str, str]
) -> None:
    """Another throwaway distribution in its own directory, as a separate package is."""
    site.mkdir()
    for module, source in modules.items():
        (site / f"{module}.py").write_text(source, encoding="utf-8")
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n", encoding="utf-8"
    )
    lines = "".join(f"{name} = {target}\n" for name, target in entries.items())
    (info / "entry_points.txt").write_text(f"[mnemo.memory_providers]\n{lines}", encoding="utf-8")


@pytest.fixture
def rival(third_party: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A second package that also registers `acme` (a fork installed next to the original)."""
    site = tmp_path / "rival-site"
    install(site, "rival-memory", "2.0", {"acme": "rival_memory:create"}, {"rival_memory": ACME})
    monkeypatch.syspath_prepend(str(site))
    return site


def test_two_packages_registering_one_name_are_refused(rival: Path) -> None:
    why = (
        "memory provider 'acme' is registered by two packages: acme-memory 1.0 and "
        "rival-memory 2.0; uninstall one"
    )
    with pytest.raises(ProviderConflict) as info:
        create_provider("acme", ctx="the context")  # type: ignore[arg-type]
    assert str(info.value) == why
    assert isinstance(info.value, ProviderLoadError)  # callers catching the old error still do
    with pytest.raises(ProviderConflict, match="registered by two packages"):
        get_factory("acme")

    assert provider_names().count("acme") == 1
    acme = [e for e in list_providers() if e.name == "acme"]
    assert [(e.distribution, e.target) for e in acme] == [
        ("acme-memory", "acme_memory:create"),
        ("rival-memory", "rival_memory:create"),
    ]
    assert all(e.conflict and e.error == why and e.factory is None for e in acme)
    assert "rival_memory" not in sys.modules  # neither package's code ran for a refused name

    # Only the conflicting name is refused.
    others = {e.name: e for e in list_providers() if e.name != "acme"}
    assert not any(e.conflict for e in others.values())
    assert others["simple"].factory is not None
    assert get_factory("acme-bogus") is not None


def test_mnemo_providers_marks_a_conflicting_name(
    rival: Path, third_party: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MNEMO_CONFIG"}
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(rival), str(third_party), env.get("PYTHONPATH")])
    )
    proc = _providers(env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    acme = [line for line in proc.stdout.splitlines() if line.split()[0] == "acme"]
    why = (
        "ERROR: memory provider 'acme' is registered by two packages: acme-memory 1.0 and "
        "rival-memory 2.0; uninstall one"
    )
    assert acme == [f"  acme  (acme_memory:create)  {why}", f"  acme  (rival_memory:create)  {why}"]
    assert any(line.startswith("* lcm") for line in proc.stdout.splitlines())


def test_a_command_using_a_conflicting_provider_fails_in_one_line(
    rival: Path, third_party: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MNEMO_CONFIG"}
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(rival), str(third_party), env.get("PYTHONPATH")])
    )
    config = tmp_path / "config.yaml"
    config.write_text(
        f"database: {{url: 'sqlite+aiosqlite:///{tmp_path}/m.db'}}\nmemory: {{provider: acme}}\n"
    )
    _migrated(f"sqlite+aiosqlite:///{tmp_path}/m.db")  # `memory sessions` reads a database
    proc = subprocess.run(
        [str(MNEMO), "--config", str(config), "memory", "sessions"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(60),
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "mnemo: memory provider 'acme' is registered by two packages: acme-memory 1.0 and "
        "rival-memory 2.0; uninstall one"
    ]


def _migrated(url: str) -> None:
    import asyncio

    from memory.storage.db import create_engine, migrate

    async def go() -> None:
        engine = create_engine(url)
        await migrate(engine)
        await engine.dispose()

    asyncio.run(go())


LEAKY = '''
import asyncio

from memory.contract.registry import ProviderPlugin

made = []


class Leaky:
    """Holds a resource and answers to none of the Provider methods."""

    def __init__(self):
        self.closed = asyncio.Event()
        made.append(self)

    async def close(self):
        await asyncio.sleep(0)  # only a close that is awaited gets past this
        self.closed.set()


class LeakyContext:
    def __init__(self):
        self.exited = None
        made.append(self)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info):
        await asyncio.sleep(0)
        self.exited = exc_info


class FailingClose:
    def __init__(self):
        made.append(self)

    async def close(self):
        await asyncio.sleep(0)
        raise RuntimeError("the plugin cannot even close")


create = ProviderPlugin("leaky", lambda ctx: Leaky())
create_context = ProviderPlugin("leaky-context", lambda ctx: LeakyContext())
create_failing = ProviderPlugin("leaky-failing", lambda ctx: FailingClose())
'''


@pytest.fixture
def leaky(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Factories returning objects that are not Providers but hold something to close."""
    site = tmp_path / "leaky-site"
    install(
        site,
        "leaky-memory",
        "1.0",
        {
            "leaky": "acme_leaky:create",
            "leaky-context": "acme_leaky:create_context",
            "leaky-failing": "acme_leaky:create_failing",
        },
        {"acme_leaky": LEAKY},
    )
    monkeypatch.syspath_prepend(str(site))
    yield lambda: sys.modules["acme_leaky"]
    sys.modules.pop("acme_leaky", None)


def test_a_refused_object_is_closed_before_the_error(leaky: Any) -> None:
    with pytest.raises(
        ProviderLoadError, match="^memory provider 'leaky' does not implement Provider$"
    ):
        create_provider("leaky", ctx=None)  # type: ignore[arg-type]
    assert leaky().made[-1].closed.is_set()

    with pytest.raises(ProviderLoadError, match="'leaky-context' does not implement Provider"):
        create_provider("leaky-context", ctx=None)  # type: ignore[arg-type]
    assert leaky().made[-1].exited == (None, None, None)


def test_a_failing_close_does_not_hide_the_refusal(
    leaky: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ProviderLoadError, match="'leaky-failing' does not implement Provider"):
        create_provider("leaky-failing", ctx=None)  # type: ignore[arg-type]
    assert "the plugin cannot even close" in caplog.text


async def test_a_refused_object_is_closed_on_the_callers_loop(leaky: Any) -> None:
    # The bot creates its provider inside a coroutine: the close must run on that loop
    # (where the plugin's connections live), not block it.
    with pytest.raises(ProviderLoadError, match="'leaky' does not implement Provider"):
        create_provider("leaky", ctx=None)  # type: ignore[arg-type]
    made = leaky().made[-1]
    await asyncio.wait_for(made.closed.wait(), timeout=scaled(10))  # a guard against hanging only
