"""config.yaml: PyYAML + `${VAR}` / `${VAR:-default}` interpolation + typed validation.

Every key has a default, so a config may hold only what differs from them; an unknown
key is an error (a typo must never pass silently). Errors surface as `ConfigError`,
one line naming the key and what was expected, with the value given, except a secret's:
that line reaches stderr and the logs. Every secret the config sets is masked wherever
the line would carry it, so one pasted into another key is hidden too.
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    SecretStr,
    ValidationError,
    create_model,
    field_serializer,
    field_validator,
    model_validator,
)

from bot.channels.registry import registered as registered_channels
from bot.config.paths import anchored, anchored_sqlite_url
from bot.config.section import Secret
from bot.config.section import Section as _Section
from bot.config.yaml_loader import ConfigYamlRefused, parse_config_yaml
from bot.runtime.redact import MASK, config_secrets, mask, mask_database_url, secret_values
from memory.contract.embedding import DEFAULT_DISK_MIN_ROWS
from memory.contract.settings import MAX_MESSAGES  # message counts: keep_tail, fresh_tail
from memory.search.semantic import DEFAULT_MIN_SIMILARITY, PREFIX_PRESETS
from memory.storage.prices import Price

DEFAULT_CONFIG = "config.yaml"
ENV_CONFIG = "MNEMO_CONFIG"

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}
# Secrets of the core sections; each channel declares its own (bot.channels.base.SecretKey).
_CORE_SECRETS = ("llm.api_key", "embeddings.api_key", "web.session_secret")
# URLs whose embedded credentials (`user:password@`, `?token=`) are secret.
_CORE_URLS = ("llm.base_url", "embeddings.base_url")


def _channel_secrets() -> list[tuple[str, Callable[[str], tuple[str, ...]]]]:
    """(dotted key, its forms) of every secret a registered channel declares."""
    return [
        (f"{channel.name}.{secret.key}", secret.forms)
        for channel in registered_channels()
        for secret in channel.secrets
    ]


# Keys whose value a config error must not show (database.url: its password and secret
# query parameters such as `?password=`).
SECRET_KEYS = (*(key for key, _ in _channel_secrets()), *_CORE_SECRETS, "database.url")
# Bounds of the numeric keys: each admits every sensible setting and refuses what would
# fail later, at a worse time (an interval no timer can hold, a LIMIT no database takes).
MAX_TOKENS = 10_000_000  # far above any model's context window
REFLECT_INTERVAL_S = (10.0, 365 * 86400.0)
GUARD_WINDOW_S = (60.0, 31 * 86400.0)


class ConfigError(Exception):
    """A config problem, phrased as one line for the operator."""


class AgentSettings(_Section):
    id: str = Field(default="default", min_length=1, max_length=128)
    system_prompt: str = (
        "You are mnemo, a helpful assistant with a long memory. Be concise and friendly. "
        "Use the memory tool to look up earlier parts of the conversation when they matter."
    )

    @field_validator("id")
    @classmethod
    def _storable_id(cls, v: str) -> str:
        # The id is part of every stored key: PostgreSQL refuses NUL, neither database
        # encodes a lone surrogate, so such an id would fail every turn, not at startup.
        if any(ord(c) < 32 or ord(c) == 127 or 0xD800 <= ord(c) <= 0xDFFF for c in v):
            raise ValueError("expected printable text (no control characters or lone surrogates)")
        return v


class DatabaseSettings(_Section):
    # Text (code hands it to SQLAlchemy as it is), but its password never shows: left out
    # of repr, masked in model_dump.
    url: str = Field(default="sqlite+aiosqlite:///data/mnemo.db", repr=False)

    @field_serializer("url")
    def _masked(self, url: str) -> str:
        return _url_without_password(url) or MASK

    @field_validator("url")
    @classmethod
    def _known_driver(cls, v: str) -> str:
        if not v.startswith(
            ("sqlite+aiosqlite://", "postgresql+psycopg://", "postgresql+asyncpg://")
        ):
            raise ValueError(
                "expected sqlite+aiosqlite:///PATH or postgresql+psycopg://USER@HOST/DB"
            )
        return v


MAX_PRICE = 100_000.0  # per million tokens: far above any model's


class ModelPrice(_Section):
    """What a model's tokens cost, in currency units per million (memory/storage/prices.py)."""

    input: float = Field(ge=0, le=MAX_PRICE)
    cached_input: float | None = Field(default=None, ge=0, le=MAX_PRICE)  # None: `input`
    output: float = Field(default=0.0, ge=0, le=MAX_PRICE)

    def price(self) -> Price:
        return Price(self.input, self.output, self.cached_input)


class LLMSettings(_Section):
    base_url: str = "https://api.openai.com/v1"
    api_key: Secret = Secret("")
    model: str = "gpt-4o-mini"
    summary_model: str = ""  # empty = same as model
    recall_model: str = ""  # delegated recall (/memory ask); empty = summary_model
    # Empty = voice messages are not transcribed (bot.channels.telegram.voice says why opt-in).
    transcription_model: str = ""
    # Photos are shown to the model only when on: many self-hosted OpenAI-compatible
    # servers and models reject image parts (bot.model.images says how they are sent).
    vision: bool = False
    timeout_s: float = Field(default=60, gt=0, le=3600)
    max_retries: int = Field(default=4, ge=0, le=20)
    max_tool_rounds: int = Field(default=8, ge=1, le=50)
    # Answer lengths sent as `max_tokens` (0: none sent, the server's own limit): an
    # uncapped local server may otherwise generate until its context is full.
    max_tokens: int = Field(default=2048, ge=0, le=1_000_000)  # chat answers
    summary_max_tokens: int = Field(default=4096, ge=0, le=1_000_000)  # compaction
    recall_max_tokens: int = Field(default=1024, ge=0, le=1_000_000)  # /memory ask
    reflect_max_tokens: int = Field(default=2048, ge=0, le=1_000_000)
    # Wall clock of one model call (its retries and streaming included; `timeout_s` is
    # per read and never fires while chunks keep coming), and of a whole chat turn.
    answer_deadline_s: float = Field(default=300, gt=0, le=86_400)
    turn_deadline_s: float = Field(default=600, gt=0, le=86_400)
    temperature: float | None = Field(default=None, ge=0, le=2)  # OpenAI's range
    # The model's context window in tokens, shown beside the budget (/memory status, the
    # console); 0: unknown, or what a llama.cpp server reports at start (model/server_context.py).
    context_window: int = Field(default=0, ge=0, le=100_000_000)
    # model name -> its price (chat, summary, embedding and transcription models alike)
    prices: dict[str, ModelPrice] = Field(default_factory=dict)

    @field_validator("prices")
    @classmethod
    def _named_models(cls, v: dict[str, ModelPrice]) -> dict[str, ModelPrice]:
        if any(not name.strip() for name in v):
            raise ValueError("expected model names as keys")
        return v

    def price_table(self) -> dict[str, Price]:
        return {name: p.price() for name, p in self.prices.items()}


class EmbeddingsSettings(_Section):
    """Semantic search (memory/search/semantic/): off while `model` is empty; the server and key
    default to the `llm` ones."""

    model: str = ""
    base_url: str = ""  # empty = llm.base_url
    api_key: Secret = Secret("")  # empty = llm.api_key
    batch_size: int = Field(default=64, ge=1, le=2048)  # texts per request
    max_chars: int = Field(default=2000, ge=100, le=100_000)  # longer texts are cut
    cache_mb: int = Field(default=256, ge=16, le=65_536)  # cached vectors per process
    # A user with this many vectors is searched through an on-disk index under
    # data_dir/vectors, not the cache (memory/search/semantic/disk.py); 0: never.
    disk_min_vectors: int = Field(default=DEFAULT_DISK_MIN_ROWS, ge=0, le=10**9)
    # The cosine an item found by meaning alone needs to be listed (model-specific).
    min_similarity: float = Field(default=DEFAULT_MIN_SIMILARITY, ge=-1.0, le=1.0)
    # Each message embedded with the next one too, and searched by both vectors' mean
    # (memory/search/pairs.py): better recall for about 3x the tokens and 2x the vectors.
    with_next: bool = True
    # Text put before every query / every stored item, for models trained with them; a
    # preset (`prefixes`) names a family's pair, and either key set here wins over it.
    prefixes: str = ""
    query_prefix: str | None = Field(default=None, max_length=200)
    document_prefix: str | None = Field(default=None, max_length=200)

    @field_validator("prefixes")
    @classmethod
    def _preset(cls, v: str) -> str:
        if v and v not in PREFIX_PRESETS:
            raise ValueError(f"expected one of {', '.join(PREFIX_PRESETS)} (or empty: none)")
        return v

    def prefix_pair(self) -> tuple[str, str]:
        """(query prefix, document prefix): the keys set, else the preset's, else none."""
        query, document = PREFIX_PRESETS.get(self.prefixes, ("", ""))
        return (
            query if self.query_prefix is None else self.query_prefix,
            document if self.document_prefix is None else self.document_prefix,
        )


class _Periodic(_Section):
    """A section of a job the root's scheduler runs every `interval`."""

    interval: str

    @field_validator("interval")
    @classmethod
    def _duration(cls, v: str) -> str:
        low, high = REFLECT_INTERVAL_S
        # An interval no timer can hold (99999999999999h) would crash `mnemo run`.
        if not low <= parse_duration(v) <= high:
            raise ValueError("expected a duration from 10s to 365d")
        return v

    @property
    def interval_s(self) -> float:
        return parse_duration(self.interval)


class RetentionSettings(_Periodic):
    """`memory.retention`: messages older than `days` are forgotten (docs/CHAT.md "Forgetting");
    empty keeps everything forever. The root's scheduler runs it every `interval`."""

    days: int | None = Field(default=None, ge=1, le=365_000)
    interval: str = "1d"


class _MemoryBase(BaseModel):
    # Extra keys allowed here only: a section `memory.<name>` of a provider whose plugin
    # exports no settings model (kept as a dict for it).
    model_config = ConfigDict(
        extra="allow", validate_default=True, allow_inf_nan=False, populate_by_name=True
    )

    provider: str = "lcm"
    # Defaults chosen by bench/cost.py (issue 17): see docs/CHAT.md "Compaction and caching".
    budget_tokens: int = Field(default=13500, ge=256, le=MAX_TOKENS)
    fresh_tail: int = Field(default=20, ge=0, le=MAX_MESSAGES)
    # Current facts per user (a group, in a group): a create past it is refused with a
    # request to merge (memory/contract/facts.py), never dropped silently.
    max_facts: int = Field(default=200, ge=1, le=10_000)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)

    def section(self, name: str) -> dict[str, Any]:
        value = getattr(self, _field_name(name), None)
        if value is None:
            value = (self.model_extra or {}).get(name, {})
        if isinstance(value, BaseModel):
            return value.model_dump()
        return dict(value or {})


def _field_name(provider: str) -> str:
    return provider if provider.isidentifier() else "_".join(re.findall(r"\w+", provider))


@functools.cache
def memory_settings() -> type[_MemoryBase]:
    """`memory` with one section per installed provider whose plugin exports a settings
    model: `memory.lcm` is validated by lcm's own model, so its keys, bounds and errors
    are written once, in the plugin. Built on first use (the first validation of
    Settings), not when this module is imported: finding the providers imports every
    one of them and SQLAlchemy, which `mnemo --help` never needs. A plugin that fails to
    load is reported where it is used. From then on `Settings.model_fields["memory"]`
    names this model, so whatever walks the settings' fields sees the sections."""
    from memory.contract.registry import list_providers
    from memory.contract.settings import section_model

    sections: dict[str, Any] = {}
    for entry in list_providers():
        model = entry.plugin.settings if entry.plugin else None
        name = _field_name(entry.name)
        if model is None or not name or name in _MemoryBase.model_fields or name in sections:
            continue
        section = section_model(model)
        sections[name] = (section, Field(default_factory=section, alias=entry.name))
    built = create_model("MemorySettings", __base__=_MemoryBase, **sections)
    Settings.model_fields["memory"].annotation = built
    return built


class _ProviderSections:
    """`Settings.memory`'s validation: the model `memory_settings` builds, asked for
    when pydantic builds Settings' validator, which it defers to the first validation."""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        return handler(memory_settings())


def _memory_defaults() -> _MemoryBase:
    return memory_settings()()


class CompactionSettings(_Section):
    max_tokens: int = Field(default=10000, ge=-1, le=MAX_TOKENS)  # -1: no auto-compaction
    keep_tail: int = Field(default=8, ge=0, le=MAX_MESSAGES)
    # Hysteresis: an automatic compaction brings the context down to this fraction of
    # max_tokens, so the next one is a whole gap of conversation away (each compaction
    # rebuilds the prompt's cached prefix).
    target_fraction: float = Field(default=0.45, ge=0.1, le=0.9)

    @property
    def target_tokens(self) -> int:
        """What an automatic compaction aims for (0: automatic compaction is off)."""
        if self.max_tokens < 0:
            return 0
        return int(self.max_tokens * self.target_fraction)


class RecallSettings(_Section):
    """Bounds of the delegated recall sub-call (`recall` action, `/memory ask`)."""

    max_tokens: int = Field(default=3000, ge=200, le=100_000)  # material it reads
    # A model on CPU took ~240 s for one recall (issue #35); a fast server answers in
    # seconds and never waits for the limit, so the default suits the slow one.
    timeout_s: float = Field(default=300, gt=0, le=600)
    max_rounds: int = Field(default=2, ge=1, le=5)  # searches, each with one model call


class ReflectSettings(_Periodic):
    enabled: bool = True
    interval: str = "1h"
    batch: int = Field(default=5, ge=1, le=1000)


class FollowupsSettings(_Section):
    """Follow-ups (docs/CHAT.md "Follow-ups"): how often the root's scheduler looks for
    due ones (`interval`), how late a missed one may still be sent (`grace`; past it, a
    note says it was missed), the default quiet hours (local to each user), how many
    the bot's own (proactive) ones a user gets a day, and whether those go to groups."""

    enabled: bool = True
    interval: str = "30s"
    grace: str = "12h"
    quiet_hours: str = "22:00-08:00"
    max_per_day: int = Field(default=3, ge=0, le=100)
    groups: bool = False  # proactive ones in groups (explicit reminders always go)

    @field_validator("interval", "grace")
    @classmethod
    def _duration(cls, v: str) -> str:
        if not 1 <= parse_duration(v) <= 365 * 86400:
            raise ValueError("expected a duration from 1s to 365d")
        return v

    @field_validator("quiet_hours")
    @classmethod
    def _window(cls, v: str) -> str:
        from memory.followups.times import TimeError, quiet_window

        try:
            quiet_window(v)
        except TimeError as exc:
            raise ValueError(str(exc)) from None
        return v

    @property
    def interval_s(self) -> float:
        return parse_duration(self.interval)

    @property
    def grace_s(self) -> float:
        return parse_duration(self.grace)


class BackgroundGuardSettings(_Section):
    """The spend guard of background work (summaries of automatic compaction, reflect,
    embeddings), per `window`; 0 turns a cap off (bot/conversation/budgets.py)."""

    window: str = "1h"
    calls_per_user: int = Field(default=200, ge=0, le=MAX_TOKENS)
    tokens_per_user: int = Field(default=2_000_000, ge=0, le=10 * MAX_TOKENS)
    calls_total: int = Field(default=5_000, ge=0, le=MAX_TOKENS)
    tokens_total: int = Field(default=50_000_000, ge=0, le=1000 * MAX_TOKENS)

    @field_validator("window")
    @classmethod
    def _duration(cls, v: str) -> str:
        if not GUARD_WINDOW_S[0] <= parse_duration(v) <= GUARD_WINDOW_S[1]:
            raise ValueError("expected a duration from 1m to 31d")
        return v

    @property
    def window_s(self) -> float:
        return parse_duration(self.window)


class LimitsSettings(_Section):
    """Tokens a user (a group, in a group) may use; 0: no limit. Admins are exempt."""

    tokens_per_day: int = Field(default=0, ge=0, le=1000 * MAX_TOKENS)
    tokens_per_month: int = Field(default=0, ge=0, le=1000 * MAX_TOKENS)
    background: BackgroundGuardSettings = Field(default_factory=BackgroundGuardSettings)


class HealthSettings(_Section):
    enabled: bool = False
    listen: str = "127.0.0.1"
    port: int = Field(default=9464, ge=1, le=65535)


WebRole = Literal["viewer", "operator"]
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class WebOperator(_Section):
    """One person who may log in to the web console: a name (shown in the changelog's
    session column and the log), a role, and the SHA-256 of their token (`mnemo web
    hash-token`), so the config never holds the token itself."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.@-]+$")
    role: WebRole = "viewer"
    token_sha256: str = Field(repr=False)

    @field_validator("token_sha256")
    @classmethod
    def _digest(cls, v: str) -> str:
        v = v.strip().lower()
        if not _SHA256.match(v):
            raise ValueError("expected 64 hex digits (`mnemo web hash-token` prints them)")
        return v


class WebSettings(_Section):
    """The operator web console (bot/web/): off unless enabled; see docs/OPERATIONS.md."""

    enabled: bool = False
    listen: str = "127.0.0.1"
    # The health server's port by default: one server, one port (docker compose).
    port: int = Field(default=9464, ge=1, le=65535)
    operators: list[WebOperator] = Field(default_factory=list)
    # Signs the session cookies; empty = a random key at each start (logins end at a
    # restart, and replicas behind one address each need the same configured key).
    session_secret: Secret = Secret("")
    session_ttl: str = "12h"
    # Set when a TLS-terminating reverse proxy serves the console: cookies get `Secure`.
    secure_cookies: bool = False

    @field_validator("session_ttl")
    @classmethod
    def _ttl(cls, v: str) -> str:
        if not 60 <= parse_duration(v) <= 31 * 86400:
            raise ValueError("expected a duration from 1m to 31d")
        return v

    @field_validator("operators")
    @classmethod
    def _unique(cls, v: list[WebOperator]) -> list[WebOperator]:
        names = [o.name for o in v]
        if len(set(names)) != len(names):
            raise ValueError("expected each operator name once")
        if len({o.token_sha256 for o in v}) != len(v):
            raise ValueError("expected a different token for each operator")
        return v

    @property
    def session_ttl_s(self) -> float:
        return parse_duration(self.session_ttl)


class McpSettings(_Section):
    """The per-user MCP endpoint (bot/mcp/): off unless enabled; see docs/OPERATIONS.md."""

    enabled: bool = False
    listen: str = "127.0.0.1"
    # Its own port (not the health server's): bot/mcp/server.py says why.
    port: int = Field(default=9465, ge=0, le=65535)
    # The address people are shown by `/memory mcp on` (a TLS reverse proxy's, say);
    # empty: http://<listen>:<port>/mcp.
    public_url: str = ""
    token_ttl: str = "30d"  # how long a token works before `/memory mcp on` again
    requests_per_minute: int = Field(default=30, ge=1, le=10_000)  # per token

    @field_validator("token_ttl")
    @classmethod
    def _ttl(cls, v: str) -> str:
        if not 60 <= parse_duration(v) <= 366 * 86400:
            raise ValueError("expected a duration from 1m to 366d")
        return v

    @field_validator("public_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if v and not re.match(r"^https?://[^\s/]+(/\S*)?$", v):
            raise ValueError("expected an http(s) URL, like https://mnemo.example.org/mcp")
        return v

    @property
    def token_ttl_s(self) -> float:
        return parse_duration(self.token_ttl)


class _Core(_Section):
    agent: AgentSettings = Field(default_factory=AgentSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    embeddings: EmbeddingsSettings = Field(default_factory=EmbeddingsSettings)
    # What `mnemo run` runs (bot.channels.registry has them all).
    channels: list[str] = Field(default_factory=lambda: ["telegram"])

    @field_validator("channels")
    @classmethod
    def _known_channels(cls, v: list[str]) -> list[str]:
        known = sorted(channel.name for channel in registered_channels())
        for name in v:
            if name not in known:
                raise ValueError(f"unknown channel {name!r}; known: {', '.join(known)}")
        if not v:
            raise ValueError(f"expected at least one channel; known: {', '.join(known)}")
        if len(set(v)) < len(v):
            raise ValueError("expected each channel once")
        return v


def _with_channel_sections() -> type[_Core]:
    """The root with one section per registered channel that declares a settings model
    (`telegram:`), so its keys, bounds and errors are written once, in the channel's folder."""
    sections: dict[str, Any] = {
        channel.name: (channel.settings, Field(default_factory=channel.settings))
        for channel in registered_channels()
        if channel.settings is not None
    }
    return create_model("_WithChannels", __base__=_Core, **sections)


if TYPE_CHECKING:
    _WithChannels = _Core  # a channel's section: its declaration's `section(settings)`
else:
    _WithChannels = _with_channel_sections()


class Settings(_WithChannels):
    # Built on first validation (memory_settings): importing this module finds no provider.
    model_config = ConfigDict(
        extra="forbid", validate_default=True, allow_inf_nan=False, defer_build=True
    )

    data_dir: str = "data"
    memory: Annotated[_MemoryBase, _ProviderSections()] = Field(default_factory=_memory_defaults)
    compaction: CompactionSettings = Field(default_factory=CompactionSettings)
    reflect: ReflectSettings = Field(default_factory=ReflectSettings)
    followups: FollowupsSettings = Field(default_factory=FollowupsSettings)
    recall: RecallSettings = Field(default_factory=RecallSettings)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    health: HealthSettings = Field(default_factory=HealthSettings)
    web: WebSettings = Field(default_factory=WebSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @model_validator(mode="after")
    def _one_server_per_port(self) -> Settings:
        web, health = self.web, self.health
        same_port = web.enabled and health.enabled and web.port == health.port
        if same_port and web.listen != health.listen:
            # Two sockets cannot take one port: say so here, not as "address in use".
            raise ValueError(
                f"web.listen ({web.listen}) differs from health.listen ({health.listen}) "
                "on the same port: give web.port another port, or the same listen address"
            )
        ports = {self.health.port} if health.enabled else set()
        ports |= {web.port} if web.enabled else set()
        if self.mcp.enabled and self.mcp.port in ports:
            raise ValueError(
                f"mcp.port ({self.mcp.port}) is the health server's or the console's: the MCP "
                "endpoint needs a port of its own"
            )
        return self

    def provider_config(self) -> dict[str, Any]:
        """The section handed to the provider factory, with the shared keep_tail and the
        automatic compaction's target."""
        cfg = self.memory.section(self.memory.provider)
        cfg.setdefault("keep_tail", self.compaction.keep_tail)
        cfg.setdefault("target_tokens", self.compaction.target_tokens)
        return cfg


def parse_duration(value: str | int | float) -> float:
    """`90`, `30s`, `5m`, `1h`, `1d` -> seconds."""
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        m = _DURATION.match(value)
        if not m:
            # The config error adds the value given; other callers quote it themselves.
            raise ValueError("expected a duration like 30s, 5m, 1h or 1d")
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError("expected a positive duration")
    return seconds


def interpolate(
    value: Any,
    env: Mapping[str, str] | None = None,
    key: str = "",
    *,
    unset: dict[str, str] | None = None,
) -> Any:
    """Replace `${VAR}` and `${VAR:-default}` in every string of a parsed YAML tree.

    `${VAR:-default}` takes the default when VAR is unset or empty (as in the shell);
    `${VAR}` with VAR unset is a ConfigError naming the key that uses it, or, given
    `unset`, an empty value noted there (key -> VAR) for the caller to judge."""
    env = os.environ if env is None else env
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            got = env.get(name)
            if got is None or (got == "" and default is not None):
                if default is None:
                    if unset is not None:
                        unset.setdefault(key, name)
                        return ""
                    raise ConfigError(_unset_line(key, name))
                return default
            return got

        return _VAR.sub(sub, value)
    if isinstance(value, dict):
        return {
            k: interpolate(v, env, f"{key}.{k}" if key else str(k), unset=unset)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [
            interpolate(v, env, f"{key}.{i}" if key else str(i), unset=unset)
            for i, v in enumerate(value)
        ]
    return value


def _unset_line(key: str, name: str) -> str:
    where = f"{key}: " if key else ""
    return f"{where}environment variable {name} is not set (used as ${{{name}}})"


def referenced_variables(value: Any) -> set[str]:
    """Every variable the parsed YAML tree uses as `${VAR}`."""
    if isinstance(value, str):
        return {m.group(1) for m in _VAR.finditer(value)}
    children = value.values() if isinstance(value, dict) else value
    if isinstance(value, dict | list):
        return set().union(*(referenced_variables(v) for v in children))
    return set()


def _where(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc)


def _explain(err: ValidationError, secrets: tuple[str, ...]) -> list[tuple[str, str]]:
    """(key, its line) per wrong key, all of them: a config with several mistakes is
    fixed in one go, not one run per mistake."""
    return [(_where(e["loc"]), _explain_one(e, secrets)) for e in err.errors()]


def _explain_one(error: Any, secrets: tuple[str, ...]) -> str:
    key = _where(error["loc"]) or "(top level)"
    kind, msg = error["type"], error["msg"]
    given = error.get("input")
    if kind == "value_error" and not error["loc"]:  # a rule across sections names its keys
        return str(msg.removeprefix("Value error, "))
    if kind == "extra_forbidden":
        return f"{key}: unknown key (check the spelling; see config.yaml for the known keys)"
    if kind.startswith("missing"):
        return f"{key}: required value is missing"
    if _holds_secret(key) and isinstance(given, str | int | float):
        secrets = secret_values(*secrets, str(given))  # a section given as the secret
    # Masked before it is cut short: a cut secret would no longer match.
    shown = _shown(key, given, secrets)
    return f"{key}: {msg.removeprefix('Value error, ')} (got {shown[:80]})"


def _holds_secret(key: str) -> bool:
    """A secret key, a part of one, or a section holding one (`llm: sk-...`)."""
    return any(key == s or key.startswith(f"{s}.") or s.startswith(f"{key}.") for s in SECRET_KEYS)


def _secrets_in(data: Mapping[str, Any]) -> tuple[str, ...]:
    """The secrets this config sets (as the log masking knows them), so that one copied
    into another key is hidden too."""

    def at(key: str) -> str:
        value: Any = data
        for part in key.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        # All-digit secrets are YAML numbers; a wrong type is not ours to judge here.
        return str(value) if isinstance(value, str | int | float) else ""

    return _secrets_at(at)


def settings_secrets(settings: Settings) -> tuple[str, ...]:
    """Every secret the loaded settings hold, in every form a message may carry it."""

    def at(key: str) -> str:
        value: Any = settings
        for part in key.split("."):
            value = getattr(value, part, None)
        if isinstance(value, SecretStr):
            return value.get_secret_value()
        return value if isinstance(value, str) else ""

    return _secrets_at(at)


def _secrets_at(at: Callable[[str], str]) -> tuple[str, ...]:
    """The secrets of the core sections and of every registered channel's (as it
    declares them), the database URL's password and the credentials in every URL key."""
    channel_urls = [f"{c.name}.{url}" for c in registered_channels() for url in c.urls]
    return config_secrets(
        secrets=(
            *(form for key, forms in _channel_secrets() for form in forms(at(key))),
            *(at(key) for key in _CORE_SECRETS),
        ),
        database_url=at("database.url"),
        urls=tuple(at(key) for key in (*_CORE_URLS, *channel_urls)),
    )


def _shown(key: str, given: Any, secrets: tuple[str, ...]) -> str:
    if isinstance(given, dict | list):
        return type(given).__name__
    if key == "database.url" and isinstance(given, str):
        # The rest of the URL tells the operator what is wrong; the password never does.
        safe = _url_without_password(given)
        return repr(safe) if safe is not None else f"str, {MASK}"
    if _holds_secret(key):
        return f"{type(given).__name__}, {MASK}"
    # A string is masked before repr, which may escape a secret's characters.
    return repr(mask(given, secrets)) if isinstance(given, str) else mask(repr(given), secrets)


def _url_without_password(url: str) -> str | None:
    """The URL with its password and secret query values masked; None when it cannot be
    masked with certainty."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    # SQLAlchemy ends the password at the first '@', so an unencoded '@' in it would
    # leave the rest of the password in the host part.
    if url.partition("://")[2].count("@") > 1:
        return None
    try:
        make_url(url)
    except ArgumentError:
        return None
    return mask_database_url(url)


def resolve_path(path: str | os.PathLike[str] | None) -> Path:
    """`--config` first, then MNEMO_CONFIG, then ./config.yaml."""
    return Path(path or os.environ.get(ENV_CONFIG) or DEFAULT_CONFIG)


@dataclass
class Loaded:
    """Settings and where they came from (`mnemo config show`)."""

    settings: Settings
    path: Path  # the config file, read when `from_file`
    from_file: bool
    file_keys: set[str]  # every key (and section) the file gives
    env_sources: dict[str, str]  # key -> the variable that set it
    file_variables: dict[str, str]  # key -> the variable the file's `${VAR}` reads
    unset: dict[str, str]  # key -> a `${VAR}` left empty because VAR is not set

    def source(self, key: str) -> str:
        """Where `key`'s value came from: `env NAME`, `file`, `file ${VAR}` or `default`."""
        for prefix in _prefixes(key):
            if prefix in self.env_sources:
                return f"env {self.env_sources[prefix]}"
        for prefix in _prefixes(key):
            if prefix in self.unset:
                return f"file, ${{{self.unset[prefix]}}} not set"
            if prefix in self.file_variables:
                return f"file ${{{self.file_variables[prefix]}}}"
            if prefix in self.file_keys:
                return "file"
        return "default"


def _prefixes(key: str) -> list[str]:
    """`a.b.c`, `a.b`, `a`: the key and the sections holding it, innermost first."""
    parts = key.split(".")
    return [".".join(parts[:i]) for i in range(len(parts), 0, -1)]


def load_settings(
    path: str | os.PathLike[str] | None = None,
    *,
    check_provider: bool = True,
    secrets: Collection[str] | None = None,
) -> Settings:
    """Read, interpolate and validate a config file, with the environment applied over
    it (bot.config.env). Raises ConfigError.

    Without `--config` and MNEMO_CONFIG a missing ./config.yaml means "all defaults"; a
    file named explicitly (either way) must exist. `secrets`: the secret keys the caller
    needs (None: all); a `${VAR}` in another secret key whose VAR is unset leaves it
    empty instead of stopping a command that does not use it (database.url always
    stops: nearly every command opens the database)."""
    return load_config(path, check_provider=check_provider, secrets=secrets).settings


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    check_provider: bool = True,
    secrets: Collection[str] | None = None,
) -> Loaded:
    """`load_settings`, with where each value came from."""
    from bot.config.env import read_environment
    from memory.contract.registry import provider_names

    memory_settings()  # the providers' sections, before the environment names keys in them
    p = resolve_path(path)
    raw = _read_file(p, explicit=path is not None or bool(os.environ.get(ENV_CONFIG)), flag=path)
    layer = read_environment(
        Settings,
        referenced=frozenset(referenced_variables(raw)),
        providers=tuple(provider_names()),
    )
    if layer.errors:  # names and paths only, never a value
        raise ConfigError("\n".join(f"environment: {line}" for line in layer.errors))
    used: dict[str, str] = {}
    _note_variables(raw, "", used)
    unset: dict[str, str] = {}
    data = interpolate(raw, unset=unset)
    for key_path, value in layer.values.items():
        _put(data, key_path, value)
    given_by_env = layer.sources
    unset = {k: v for k, v in unset.items() if not any(p in given_by_env for p in _prefixes(k))}
    deferred = (
        set(SECRET_KEYS) - {"database.url"} - set(SECRET_KEYS if secrets is None else secrets)
    )
    if lines := [_unset_line(k, v) for k, v in unset.items() if k not in deferred]:
        raise ConfigError("\n".join(f"{p}: {line}" for line in lines))

    def origin(key: str) -> str:
        """What an error line about `key` starts with: the variable that set it, or the file."""
        var = next((given_by_env[k] for k in _prefixes(key) if k in given_by_env), None)
        return str(p) if var is None else f"environment: {var}"

    secret_list = _secrets_in(data)
    try:
        settings = _validated(p, data, secret_list, origin, check_provider=check_provider)
    except ConfigError as exc:
        # Whichever key echoed it (`memory.provider: unknown provider 'sk-...'`), a secret
        # this config sets never leaves in an error line.
        raise ConfigError(mask(str(exc), secret_list)) from None
    return Loaded(settings, p, p.exists(), _keys_of(raw), dict(given_by_env), used, unset)


def _read_file(p: Path, *, explicit: bool, flag: object) -> dict[str, Any]:
    if not p.exists():
        if explicit:
            source = "--config" if flag is not None else ENV_CONFIG
            raise ConfigError(f"{p}: no such config file (given by {source})")
        return {}
    try:
        raw = parse_config_yaml(p.read_text(encoding="utf-8"))
    except ConfigYamlRefused as exc:
        raise ConfigError(f"{p}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{p}: not valid YAML{where}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read ({exc})") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: expected a mapping of sections at the top level")
    return raw


def _keys_of(tree: Any, prefix: str = "") -> set[str]:
    keys: set[str] = set()
    if isinstance(tree, dict):
        for k, v in tree.items():
            key = f"{prefix}{k}"
            keys |= {key} | _keys_of(v, key + ".")
    return keys


def _note_variables(tree: Any, key: str, out: dict[str, str]) -> None:
    """key -> the first variable its `${VAR}` reads, for every key of the file that has one."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            _note_variables(v, f"{key}.{k}" if key else str(k), out)
    elif isinstance(tree, str) and (m := _VAR.search(tree)):
        out[key] = m.group(1)


def _put(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """Set `path` in the file's tree: a mapping is merged over what the file has there."""
    *sections, last = path
    for part in sections:
        if not isinstance(data.get(part), dict):
            data[part] = {}
        data = data[part]
    if isinstance(value, dict) and isinstance(data.get(last), dict):
        for k, v in value.items():
            _put(data[last], (k,), v)
    else:
        data[last] = value


def _validated(
    p: Path,
    data: Any,
    secrets: tuple[str, ...],
    origin: Callable[[str], str],
    *,
    check_provider: bool,
) -> Settings:
    from memory.contract.registry import provider_names

    names = provider_names()
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        lines = [f"{origin(key)}: {line}" for key, line in _explain(exc, secrets)]
        # An unknown provider is named beside the other mistakes, not on the next run.
        memory = data.get("memory") if isinstance(data, dict) else None
        chosen = memory.get("provider") if isinstance(memory, dict) else None
        if check_provider and isinstance(chosen, str) and chosen not in names:
            lines.append(f"{origin('memory.provider')}: {_unknown_provider(chosen, names)}")
        lines += [f"{p}: {line}" for line in _provider_section_errors(data, names)]
        raise ConfigError("\n".join(lines)) from None
    if lines := _provider_section_errors(data, names):
        raise ConfigError("\n".join(f"{p}: {line}" for line in lines))
    if check_provider and settings.memory.provider not in names:
        where = origin("memory.provider")
        raise ConfigError(f"{where}: {_unknown_provider(settings.memory.provider, names)}")
    if p.exists():
        anchor_paths(settings, p.resolve().parent)
    return settings


def _unknown_provider(name: str, installed: list[str]) -> str:
    return (
        f"memory.provider: unknown provider {name!r}; "
        f"installed: {', '.join(sorted(installed)) or 'none'}"
    )


def anchor_paths(settings: Settings, base: Path) -> None:
    """Relative paths of a config file are relative to the file's directory, whatever
    the current directory (`cd /tmp && mnemo --config ~/bot/config.yaml ...` opens the
    bot's database, never a fresh ./data/mnemo.db): the SQLite file, `data_dir` and
    every provider setting declared as a path (memory.contract.settings.PathText).
    Keys the file leaves out take their defaults, anchored the same way."""
    from memory.contract.settings import path_fields

    settings.data_dir = str(anchored(base, settings.data_dir))
    settings.database.url = anchored_sqlite_url(settings.database.url, base)
    for name in type(settings.memory).model_fields:
        section = getattr(settings.memory, name, None)
        if not isinstance(section, BaseModel):
            continue
        for key in path_fields(type(section)):
            value = getattr(section, key)
            if isinstance(value, str) and value:
                setattr(section, key, str(anchored(base, value)))


def _provider_section_errors(data: Any, installed: list[str]) -> list[str]:
    """`memory.<name>` keys that are not settings must be sections of an installed
    provider, so a typo such as `memory.lcn` (or `memory.budget`) is an error, not a
    silently ignored section. Read from the raw mapping, so these are reported beside
    the other mistakes of the same file."""
    memory = data.get("memory") if isinstance(data, dict) else None
    if not isinstance(memory, dict):
        return []
    fields = memory_settings().model_fields
    known = set(fields) | {f.alias for f in fields.values() if f.alias}
    out = []
    for key, value in memory.items():
        if key in known:
            continue
        if key not in installed:
            out.append(
                f"memory.{key}: unknown key (not a setting, nor an installed provider; "
                f"installed: {', '.join(sorted(installed)) or 'none'})"
            )
        elif not isinstance(value, dict):
            out.append(
                f"memory.{key}: expected a mapping of the provider's settings "
                f"(got {type(value).__name__})"
            )
    return out
