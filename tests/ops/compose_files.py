"""Docker Compose's reading of mnemo's compose files, without Docker: the variables of
.env.example, `${...}` interpolation, the merge of an override file, and the Compose
specification's check (compose-spec, the Rust compose_spec parser)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from compose_spec import PyCompose

ROOT = Path(__file__).resolve().parents[2]
BASE = "docker-compose.yml"
OVERRIDES = ("docker-compose.webhook.yml", "docker-compose.secrets.yml")
ENV_LINE = re.compile(r"^(#\s*)?([A-Z][A-Z0-9_]*)=(.*)$")
# ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR?error}
REFERENCE = re.compile(r"\$\{([A-Z][A-Z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def env_example() -> dict[str, tuple[str, bool, str]]:
    """.env.example: name -> (value, set (not commented out), the comment above it)."""
    found: dict[str, tuple[str, bool, str]] = {}
    comment: list[str] = []
    after_variable = False  # the lines of a group share the comment above them
    for line in (ROOT / ".env.example").read_text(encoding="utf-8").splitlines():
        match = ENV_LINE.match(line)
        if match:
            value = match.group(3)
            if len(value) > 1 and value[0] == value[-1] == "'":  # literal, as Compose reads it
                value = value[1:-1]
            found[match.group(2)] = (value, not match.group(1), " ".join(comment))
            after_variable = True
        elif line.startswith("#") and not line.startswith("# ---"):
            if after_variable:
                comment, after_variable = [], False
            comment.append(line.lstrip("# "))
        else:
            comment, after_variable = [], False
    return found


def references(name: str) -> set[str]:
    """The variables a YAML file's values use (not its comments)."""
    text = json.dumps(yaml.safe_load((ROOT / name).read_text(encoding="utf-8")))
    return {m.group(1) for m in REFERENCE.finditer(text)}


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's interpolation; an unset `${VAR:?msg}` raises as Compose refuses."""

    def one(match: re.Match[str]) -> str:
        name, op, arg = match.groups()
        value = env.get(name)
        if op in (":-", ":?") and not value:
            value = None
        if value is not None:
            return value
        if op and op.endswith("?"):
            raise ValueError(f"required variable {name} is missing: {arg}")
        return arg if op else ""

    return REFERENCE.sub(one, text.replace("$$", "\0")).replace("\0", "$")


def load(name: str, env: dict[str, str]) -> dict[str, Any]:
    return yaml.safe_load(interpolate((ROOT / name).read_text(encoding="utf-8"), env))


def merge(base: Any, override: Any) -> Any:
    """Compose's merge of an override file: mappings merged, sequences appended (ports,
    volumes...), anything else replaced."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = merge(base[key], value) if key in base else value
        return out
    if isinstance(base, list) and isinstance(override, list):
        return base + [item for item in override if item not in base]
    return override


def project(files: list[str], env: dict[str, str]) -> dict[str, Any]:
    model: dict[str, Any] = {}
    for name in files:
        model = merge(model, load(name, env))
    return model


def validate(model: dict[str, Any]) -> None:
    """Raises ValueError where the Compose specification does not allow the model."""
    PyCompose.from_yaml(yaml.safe_dump(model))
