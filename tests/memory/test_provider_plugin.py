"""Plugin-owned settings: a provider's settings model (exported through its
`ProviderPlugin`) validates `memory.<name>` in config.yaml and reaches the factory as
`ctx.settings`."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.config.settings import ConfigError, Settings, load_settings
from memory.compaction.summarizer import StaticSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.errors import InvalidArgument
from memory.contract.registry import create_provider, list_providers
from tests.memory.test_registry import ACME, MNEMO, install
from tests.waits import scaled

TYPED = """
from pydantic import Field

from memory.contract.settings import ProviderSettings
from memory.contract.registry import ProviderPlugin
from acme_memory import AcmeProvider


class TypedSettings(ProviderSettings):
    shards: int = Field(default=1, ge=1, le=64)
    keep_tail: int = 20


def create(ctx):
    return AcmeProvider(ctx)


plugin = ProviderPlugin("typed", create, settings=TypedSettings, provider_class=AcmeProvider)
"""

# Loads the config, builds the configured provider as the bot does, prints its settings.
SHOW = (
    "import sys; from bot.config.settings import load_settings; "
    "from memory.contract.capabilities import ProviderContext; "
    "from memory.contract.registry import create_provider; "
    "s = load_settings(sys.argv[1]); "
    "p = create_provider(s.memory.provider, ProviderContext(engine=None, summarizer=None, "
    "config=s.provider_config())); "
    "print(type(p.ctx.settings).__name__, p.ctx.settings.model_dump())"
)


@pytest.fixture
def typed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    site = tmp_path / "typed-site"
    install(
        site,
        "typed-memory",
        "1.0",
        {"typed": "typed_memory:plugin"},
        {"typed_memory": TYPED, "acme_memory": ACME},
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("MNEMO_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    yield site
    for name in ("typed_memory", "acme_memory"):
        sys.modules.pop(name, None)


def _mnemo(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MNEMO_CONFIG"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return subprocess.run(
        list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=scaled(60)
    )


@pytest.mark.slow  # subprocesses: `make test-slow`
def test_a_third_party_section_is_validated_by_its_model(typed: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    cases = {
        "memory: {typed: {shards: 0}}\n": "memory.typed.shards: Input should be greater than or equal to 1 (got 0)",
        "memory: {typed: {shard: 2}}\n": "memory.typed.shard: unknown key",
        # keep_tail is set once, in compaction, for every provider.
        "memory: {typed: {keep_tail: 2}}\n": "memory.typed.keep_tail: unknown key",
    }
    for text, said in cases.items():
        config.write_text(text, encoding="utf-8")
        proc = _mnemo(typed, tmp_path, str(MNEMO), "--config", str(config), "providers")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        (line,) = proc.stderr.splitlines()
        assert line.startswith(f"mnemo: config error: {config}: {said}"), line

    config.write_text(
        "memory: {provider: typed, typed: {shards: '3'}}\ncompaction: {keep_tail: 7}\n",
        encoding="utf-8",
    )
    proc = _mnemo(typed, tmp_path, sys.executable, "-c", SHOW, str(config))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "TypedSettings {'shards': 3, 'keep_tail': 7}"


def test_mnemo_providers_reads_the_capabilities_off_the_plugin(typed: Path, tmp_path: Path) -> None:
    proc = _mnemo(typed, tmp_path, str(MNEMO), "providers")
    assert proc.returncode == 0, proc.stderr
    assert (
        "  typed  (typed_memory:plugin)  capabilities: Provider, Searcher"
        in proc.stdout.splitlines()
    )


def test_the_factory_gets_the_model_validated_from_a_plain_config(typed: Path) -> None:
    provider = create_provider(
        "typed",
        ProviderContext(
            engine=None,
            summarizer=None,  # type: ignore[arg-type]
            config={"shards": 4, "keep_tail": 2, "store_dir": "another provider's key"},
        ),
    )
    settings = provider.ctx.settings  # type: ignore[attr-defined]
    assert type(settings).__name__ == "TypedSettings"
    assert (settings.shards, settings.keep_tail) == (4, 2)
    entry = next(e for e in list_providers() if e.name == "typed")
    assert entry.plugin is not None and entry.plugin.settings is type(settings)
    # A dict built by code is taken strictly: "4" is not a count there.
    with pytest.raises(InvalidArgument, match=r"^memory\.typed\.shards: .* \(got '4'\)$"):
        create_provider(
            "typed", ProviderContext(engine=None, summarizer=None, config={"shards": "4"})
        )  # type: ignore[arg-type]


def test_lcm_and_simple_receive_the_model_config_validated(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "memory: {lcm: {leaf_chunk_size: 4}, simple: {store_dir: notes}}\n"
        "compaction: {keep_tail: 3}\n",
        encoding="utf-8",
    )
    settings = load_settings(path)
    ctx = ProviderContext(
        engine=None,
        summarizer=StaticSummarizer("s"),  # type: ignore[arg-type]
        config=settings.provider_config(),
    )
    lcm = create_provider("lcm", ctx)
    assert lcm.settings.model_dump() == {  # type: ignore[attr-defined]
        "keep_tail": 3,
        "leaf_chunk_size": 4,
        "condensed_min": 2,
        "max_full_rounds": 10,
        "target_tokens": settings.compaction.target_tokens,  # max_tokens x target_fraction
    }
    # A path setting is read from the config file's directory.
    assert settings.memory.simple.store_dir == str(tmp_path / "notes")  # type: ignore[attr-defined]
    path.write_text("memory: {lcm: {keep_tail: 3}}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="memory.lcm.keep_tail: unknown key"):
        load_settings(path)
    with pytest.raises(ValueError, match="memory.simple.store_dir"):
        Settings.model_validate({"memory": {"simple": {"store_dir": 5}}})
