"""Settings from the environment, applied over the config file.

Every key has a variable: `MNEMO_` + its path in capitals, sections joined by `__`
(`MNEMO_TELEGRAM__ALLOWED_IDS=1,2`, `MNEMO_LIMITS__TOKENS_PER_DAY=200000`,
`MNEMO_MEMORY__LCM__LEAF_CHUNK_SIZE=12`, `MNEMO_LOG_LEVEL=DEBUG`). A list takes JSON or
a comma list; a mapping or a whole section takes a JSON object (merged over the file's).
The well-known names (`WELL_KNOWN`: `TELEGRAM_BOT_TOKEN`, `OPENAI_API_KEY`, ...) work
with any config file or none. Any of them may be given as `NAME_FILE`, a file holding
the value (`TELEGRAM_BOT_TOKEN_FILE=/run/secrets/token`). An empty variable counts as
unset, as `${VAR:-default}` does, so a compose file may pass them all through.

Precedence, lowest first: built-in defaults, the config file, `DATABASE_URL`, the other
well-known names, the `MNEMO_SECTION__KEY` names.

A `MNEMO_*` variable that looks meant for mnemo but names no key (a `__` path that does
not exist, `MNEMO_TELEGRAM_ALLOWED_IDS` with one underscore, a near miss of a known name)
is an error, like an unknown key in the file; other `MNEMO_*` names (tools' own, such as
MNEMO_TEST_PG) are left alone. Hand-written rather than pydantic-settings: it also says
where each value came from (`mnemo config show`), refuses such typos, and reads comma
lists and files, none of which pydantic-settings does.
"""

from __future__ import annotations

import difflib
import json
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bot.channels.registry import registered as registered_channels

PREFIX = "MNEMO_"
NESTED = "__"
FILE_SUFFIX = "_FILE"
# name -> the keys it sets. DATABASE_URL first: MNEMO_DATABASE_URL, applied after it, wins.
# A channel's own names (TELEGRAM_BOT_TOKEN...) come from its declaration (`env`).
WELL_KNOWN: dict[str, tuple[str, ...]] = {
    "DATABASE_URL": ("database.url",),
    "MNEMO_DATABASE_URL": ("database.url",),
    **{
        name: (f"{channel.name}.{key}",)
        for channel in registered_channels()
        for name, key in channel.env
    },
    "OPENAI_API_KEY": ("llm.api_key",),
    "OPENAI_BASE_URL": ("llm.base_url",),
    "MNEMO_MODEL": ("llm.model",),
    "MNEMO_TRANSCRIPTION_MODEL": ("llm.transcription_model",),
    "MNEMO_VISION": ("llm.vision",),
    "MNEMO_EMBEDDINGS_MODEL": ("embeddings.model",),
    "MNEMO_EMBEDDINGS_BASE_URL": ("embeddings.base_url",),
    "MNEMO_BUDGET_TOKENS": ("memory.budget_tokens",),
    "MNEMO_COMPACTION_MAX_TOKENS": ("compaction.max_tokens",),
    # The web console shares the health server's address: one server, one port.
    "MNEMO_HEALTH_ENABLED": ("health.enabled",),
    "MNEMO_HEALTH_LISTEN": ("health.listen", "web.listen"),
    "MNEMO_WEB_SESSION_SECRET": ("web.session_secret",),
}
# MNEMO_* names that are not settings: the config file's own name, and the host ports
# docker-compose.yml publishes (read by compose, never by mnemo).
# Names the deploy files use for themselves (compose interpolation, the entrypoint), which
# reach the bot through `env_file: .env`: never settings, never refused.
NOT_SETTINGS = frozenset(
    {
        "MNEMO_CONFIG",
        "MNEMO_HEALTH_PORT",
        "MNEMO_WEBHOOK_PORT",
        "MNEMO_HOST_CONFIG",
        "MNEMO_TLS_DIR",
        "MNEMO_HOLD_FILE",
    }
)
# Plain `postgres://` URLs (as hosting platforms give DATABASE_URL) name no driver.
_PG_SCHEMES = ("postgres://", "postgresql://")


@dataclass
class EnvLayer:
    """What the environment sets: key path -> value, and key -> the variable it came from."""

    values: dict[tuple[str, ...], Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def set(self, path: tuple[str, ...], value: Any, var: str) -> None:
        # A later variable for the same key replaces an earlier one (and its source).
        self.values.pop(path, None)
        self.values[path] = value
        self.sources[".".join(path)] = var


@dataclass
class _Target:
    path: tuple[str, ...]
    kind: str  # "scalar" | "list" | "object" (a section or mapping) | "any" (untyped)
    is_path: bool = False  # a relative path: relative to the current directory


def read_environment(
    settings_model: type[BaseModel],
    env: Mapping[str, str] | None = None,
    *,
    referenced: frozenset[str] = frozenset(),
    providers: tuple[str, ...] = (),
) -> EnvLayer:
    """The settings the environment gives. `referenced`: variables the config file uses
    as `${VAR}` (never an unknown-name error); `providers`: installed provider names
    (their sections under `memory` may have no model of their own)."""
    env = os.environ if env is None else env
    layer = EnvLayer()
    resolver = _Resolver(settings_model, providers)
    given = _values(env, layer, resolver)
    for name in WELL_KNOWN:
        if name in given:
            for key in WELL_KNOWN[name]:
                target = resolver.resolve(tuple(key.split(".")))
                assert isinstance(target, _Target), key  # WELL_KNOWN names real keys
                _apply(layer, target, given[name], name)
    for name in sorted(n for n in given if n.startswith(PREFIX) and n not in WELL_KNOWN):
        if name in NOT_SETTINGS:
            continue
        parts = tuple(p.lower() for p in name.removeprefix(PREFIX).split(NESTED))
        target = resolver.resolve(parts)
        if isinstance(target, _Target):
            _apply(layer, target, given[name], name)
        elif name in referenced:  # the file's own variable, not a setting's name
            continue
        elif NESTED in name or (hint := resolver.hint(name)):
            layer.errors.append(f"{name}: {target if NESTED in name else hint}")
    return layer


def _values(
    env: Mapping[str, str], layer: EnvLayer, resolver: _Resolver
) -> dict[str, tuple[str, str]]:
    """Set variables (name -> (value, where it came from)), a setting's `NAME_FILE` read
    into NAME; both given is an error."""
    out: dict[str, tuple[str, str]] = {}
    for name, value in env.items():
        stem = name.removesuffix(FILE_SUFFIX)
        if not value or not (name.startswith(PREFIX) or stem in WELL_KNOWN):
            continue
        if stem == name or not resolver.is_setting(stem):
            out.setdefault(name, (value, name))
            continue
        if env.get(stem):
            layer.errors.append(f"{name}: give {stem} or {name}, not both")
            continue
        try:
            text = Path(value).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
            layer.errors.append(f"{name}: cannot read {value} ({why})")
            continue
        if text:
            out[stem] = (text, f"{name} ({value})")
    return out


def _apply(layer: EnvLayer, target: _Target, given: tuple[str, str], var: str) -> None:
    raw, source = given
    value: Any = raw
    if target.kind in ("list", "object") and raw.lstrip()[:1] in ("[", "{"):
        try:
            value = json.loads(raw)
        except ValueError as exc:  # the position only: the value may be a secret
            where = getattr(exc, "lineno", None), getattr(exc, "colno", None)
            layer.errors.append(f"{var}: not valid JSON (line {where[0]}, column {where[1]})")
            return
    elif target.kind == "list":
        value = [item.strip() for item in raw.split(",") if item.strip()]
    elif target.kind == "object":
        layer.errors.append(f"{var}: expected a JSON object for {'.'.join(target.path)}")
        return
    elif target.kind == "any":
        value = _json_or_text(raw)
    if var == "DATABASE_URL" and raw.startswith(_PG_SCHEMES):
        value = "postgresql+psycopg://" + raw.partition("://")[2]
    if target.is_path and isinstance(value, str):
        value = _from_cwd(target.path, value)
    layer.set(target.path, value, source)


def _json_or_text(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _from_cwd(path: tuple[str, ...], value: str) -> str:
    """A relative path from the environment is relative to the current directory (the
    config file's own are relative to its directory)."""
    if path == ("database", "url"):
        from bot.config.paths import anchored_sqlite_url

        return anchored_sqlite_url(value, Path.cwd())
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else Path.cwd() / p)


class _Resolver:
    """Variable names to keys, walking the settings models (providers' sections too)."""

    def __init__(self, model: type[BaseModel], providers: tuple[str, ...]) -> None:
        # A model whose build is deferred completes its fields when built (the settings'
        # `memory` gains the installed providers' sections then): built before walking.
        model.model_rebuild()
        self.model = model
        self.providers = providers

    def resolve(self, parts: tuple[str, ...]) -> _Target | str:
        """The key `parts` names, or why none."""
        from memory.contract.settings import path_fields

        model: type[BaseModel] | None = self.model
        path: list[str] = []
        for i, part in enumerate(parts):
            if model is None:  # inside a mapping: any key
                path.append(part)
                continue
            name = _field(model, part)
            where = ".".join(path) or "the top level"
            if name is None and path == ["memory"] and part in self.providers:
                path.append(part)  # a provider's section without a settings model
                model = None
                continue
            if name is None:
                known = ", ".join(_keys(model))
                return f"no key {'.'.join([*path, part])} ({where} has: {known})"
            info = model.model_fields[name]
            path.append(info.alias or name)
            kind, inner = _kind(info.annotation)
            last = i == len(parts) - 1
            if last:
                is_path = path == ["data_dir"] or path == ["database", "url"]
                is_path = is_path or name in path_fields(model)
                return _Target(tuple(path), kind, is_path)
            if kind != "object":
                return f"{'.'.join(path)} is a single value, not a section"
            model = inner
        return _Target(tuple(path), "any" if model is None else "object")

    def is_setting(self, name: str) -> bool:
        if name in WELL_KNOWN:
            return True
        if not name.startswith(PREFIX) or name in NOT_SETTINGS:
            return False
        parts = tuple(p.lower() for p in name.removeprefix(PREFIX).split(NESTED))
        return isinstance(self.resolve(parts), _Target)

    def hint(self, name: str) -> str:
        """Why a `MNEMO_*` name without `__` is refused ("" when it is none of mnemo's)."""
        lowered = name.removeprefix(PREFIX).lower()
        sections = [
            k
            for k, info in self.model.model_fields.items()
            if _kind(info.annotation)[0] == "object"
        ]
        for section in sections:
            if lowered.startswith(section + "_"):
                fixed = f"{PREFIX}{section.upper()}{NESTED}{name[len(PREFIX) + len(section) + 1 :]}"
                return f"not a setting; a key inside a section takes two underscores ({fixed})"
        close = difflib.get_close_matches(name, self.known_names(), n=1, cutoff=0.85)
        return f"not a setting; did you mean {close[0]}?" if close else ""

    def known_names(self) -> list[str]:
        names = [n for n in WELL_KNOWN if n.startswith(PREFIX)]

        def walk(model: type[BaseModel], prefix: str) -> None:
            for name, info in model.model_fields.items():
                var = f"{prefix}{name.upper()}"
                names.append(var)
                kind, inner = _kind(info.annotation)
                if kind == "object" and inner is not None:
                    walk(inner, var + NESTED)

        walk(self.model, PREFIX)
        return names


def _field(model: type[BaseModel], part: str) -> str | None:
    for name, info in model.model_fields.items():
        if part in (name.lower(), (info.alias or "").lower()):
            return name
    return None


def _keys(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


def _kind(annotation: Any) -> tuple[str, type[BaseModel] | None]:
    """How a variable gives a value of this type: ("object", its model or None for a
    mapping), ("list", None) or ("scalar", None)."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _kind(options[0]) if len(options) == 1 else ("scalar", None)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object", annotation
    if origin is list or annotation is list:
        return "list", None
    if origin is dict or annotation is dict:
        return "object", None
    return "scalar", None


def setting_variables(
    settings_model: type[BaseModel], env: Mapping[str, str], providers: tuple[str, ...] = ()
) -> list[str]:
    """The variables in `env` that mnemo reads as settings (the tests clear them, so that
    a developer's shell does not configure the bots they start)."""
    resolver = _Resolver(settings_model, providers)
    return [name for name in env if resolver.is_setting(name.removesuffix(FILE_SUFFIX))]
