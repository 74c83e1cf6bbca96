"""Provider registry: a third party's provider appears through entry points alone."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.config import ConfigError, load_settings
from memory.registry import (
    ProviderLoadError,
    ProviderNotFound,
    create_provider,
    get_factory,
    list_providers,
    provider_names,
)

MNEMO = Path(sys.executable).with_name("mnemo")
MODULES = ("acme_memory", "acme_broken", "acme_bogus")

ACME = '''
from memory.types import SearchResult, SessionStats


class AcmeProvider:
    name = "acme"

    def __init__(self, ctx):
        self.ctx = ctx

    async def bootstrap(self, session): ...
    async def append(self, session, *msgs): ...
    async def assemble(self, session, budget, fresh_tail): return []
    async def stats(self, session): return SessionStats()
    async def close(self): ...
    async def search(self, session, query): return [SearchResult("message", "1", query.text)]


def create(ctx):
    return AcmeProvider(ctx)


create.provider_class = AcmeProvider
'''


@pytest.fixture
def third_party(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A throwaway 'installed' distribution: modules plus a dist-info directory."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "acme_memory.py").write_text(ACME, encoding="utf-8")
    (site / "acme_broken.py").write_text("import acme_dependency_that_is_missing\n",
                                         encoding="utf-8")
    (site / "acme_bogus.py").write_text("def create(ctx):\n    return object()\n",
                                        encoding="utf-8")
    info = site / "acme_memory-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-memory\nVersion: 1.0\n",
                                   encoding="utf-8")
    (info / "entry_points.txt").write_text(textwrap.dedent("""\
        [mnemo.memory_providers]
        acme = acme_memory:create
        acme-broken = acme_broken:create
        acme-bogus = acme_bogus:create
        """), encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("MNEMO_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    yield site
    for name in MODULES:
        sys.modules.pop(name, None)


def test_mnemo_providers_lists_a_third_party_provider(third_party: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MNEMO_CONFIG"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(third_party), env.get("PYTHONPATH")]))
    proc = subprocess.run([str(MNEMO), "providers"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[1] if line.startswith("*") else line.split()[0]: line
             for line in proc.stdout.splitlines()}
    assert {"acme", "acme-broken", "acme-bogus", "lcm", "simple"} <= set(lines)
    assert lines["acme"] == "  acme  (acme_memory:create)  capabilities: Provider, Searcher"
    assert "ERROR: ModuleNotFoundError: No module named 'acme_dependency_that_is_missing'" in \
        lines["acme-broken"]
    assert lines["lcm"].startswith("* lcm")  # the configured provider (default config)


def test_registry_loads_and_reports_cleanly(third_party: Path) -> None:
    assert {"acme", "acme-broken", "lcm", "simple"} <= set(provider_names())
    entries = {e.name: e for e in list_providers()}
    assert entries["acme"].factory is not None and entries["acme"].distribution == "acme-memory"
    assert entries["acme-broken"].factory is None and "ModuleNotFoundError" in entries[
        "acme-broken"].error
    with pytest.raises(ProviderNotFound, match=r"unknown memory provider 'nope'; installed: .*acme"):
        get_factory("nope")
    with pytest.raises(ProviderLoadError, match="'acme-broken' failed to load: ModuleNotFound"):
        get_factory("acme-broken")
    with pytest.raises(ProviderLoadError, match="'acme-bogus' does not implement Provider"):
        create_provider("acme-bogus", ctx=None)  # type: ignore[arg-type]
    provider = create_provider("acme", ctx="the context")  # type: ignore[arg-type]
    assert provider.name == "acme" and provider.ctx == "the context"


def test_config_accepts_an_installed_third_party_section(third_party: Path, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("memory: {provider: acme, acme: {shards: 3}}\ncompaction: {keep_tail: 7}\n",
                    encoding="utf-8")
    settings = load_settings(path)
    assert settings.provider_config() == {"shards": 3, "keep_tail": 7}
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
