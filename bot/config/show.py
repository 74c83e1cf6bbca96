"""`mnemo config show` and `mnemo config init`: the settings in effect, and a starter file.

Both are drawn from the settings models, so they list every key there is, no more.
`show` prints `key: value  # source`, one line per key (values as JSON, which YAML
reads too); every secret is `***` (empty when unset, so a missing one shows), and
every configured secret is masked wherever else it appears (a URL's password).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

from bot.config.env import FILE_SUFFIX, NESTED, PREFIX, WELL_KNOWN
from bot.config.settings import (
    SECRET_KEYS,
    Loaded,
    Settings,
    _url_without_password,
    settings_secrets,
)
from bot.runtime.redact import MASK, mask
from memory.text.display import terminal_safe

PRECEDENCE = (
    "MNEMO_SECTION__KEY variables > well-known variables (TELEGRAM_BOT_TOKEN, ...) "
    "> config file > defaults"
)


def show_lines(loaded: Loaded) -> list[str]:
    """The lines of `mnemo config show`."""
    secrets = settings_secrets(loaded.settings)
    where = (
        f"{loaded.path.resolve()}"
        if loaded.from_file
        else f"none ({loaded.path} does not exist: defaults and environment only)"
    )
    lines = [f"# config file: {where}", f"# precedence: {PRECEDENCE}"]
    for key, value in leaves(loaded.settings):
        shown = json.dumps(_masked(key, value), ensure_ascii=False)
        lines.append(f"{key}: {mask(shown, secrets)}  # {loaded.source(key)}")
    return [terminal_safe(line) for line in lines]


def leaves(settings: Settings) -> list[tuple[str, Any]]:
    """(dotted key, value) of every setting; a list or mapping is one value."""
    out: list[tuple[str, Any]] = []

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, BaseModel):
            items = {
                (info.alias or name): getattr(node, name)
                for name, info in type(node).model_fields.items()
            }
            items.update(node.model_extra or {})
        elif isinstance(node, dict) and prefix.startswith("memory.") and node:
            items = node  # a provider's section without a settings model
        else:
            out.append((prefix.rstrip("."), node))
            return
        for name, value in items.items():
            walk(value, f"{prefix}{name}.")

    walk(settings, "")
    return out


def _masked(key: str, value: Any) -> Any:
    if isinstance(value, SecretStr):
        return MASK if value.get_secret_value() else ""
    if key == "database.url":
        return _url_without_password(value) or MASK
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list | dict):
        return json.loads(json.dumps(value, default=_plain))
    return value


def _plain(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else str(value)


# --- config init ----------------------------------------------------------------------

STARTER_HEADER = f"""\
# mnemo configuration, written by `mnemo config init`.
# Every key has a default, shown here commented out: uncomment and change only what you
# need (an unknown key is an error). Values may use ${{VAR}} and ${{VAR:-default}}.
#
# The environment overrides this file; precedence, highest first:
# {PRECEDENCE}.
# Every key has a variable: {PREFIX}<SECTION>{NESTED}<KEY> (e.g. MNEMO_TELEGRAM__ALLOWED_IDS=1,2; lists
# as JSON or comma lists, mappings as JSON), and the names noted beside their keys. Any
# of them may be NAME{FILE_SUFFIX}, a file holding the value (e.g.
# TELEGRAM_BOT_TOKEN_FILE=/run/secrets/token). Keep secrets out of this file.
# `mnemo config show` prints every value in effect and where it came from.
"""


def starter_text() -> str:
    """Every key at its default, commented out, with its well-known variable if any."""
    names: dict[str, list[str]] = {}
    for name, keys in WELL_KNOWN.items():
        for key in keys:
            names.setdefault(key, []).append(name)
    defaults = Settings().model_dump(mode="json", by_alias=True)
    lines = [STARTER_HEADER.rstrip("\n")]

    def walk(node: dict[str, Any], indent: str, prefix: str) -> None:
        for name, value in node.items():
            key = f"{prefix}{name}"
            if isinstance(value, dict) and value and key != "llm.prices":
                if not indent:
                    lines.append("#")
                lines.append(f"# {indent}{name}:")
                walk(value, indent + "  ", key + ".")
                continue
            if key in SECRET_KEYS and key != "database.url":
                value = ""
            note = [f"or {n}" for n in names.get(key, [])]
            if key == "database.url":
                note = [f"or {' or '.join(names[key])} (keep a password out of this file)"]
            elif key in SECRET_KEYS:
                note = [f"secret: set {' or '.join(names.get(key, [])) or _env_name(key)} instead"]
            comment = f"  # {', '.join(note)}" if note else ""
            lines.append(f"# {indent}{name}: {json.dumps(value, ensure_ascii=False)}{comment}")

    walk(defaults, "", "")
    return "\n".join(lines) + "\n"


def _env_name(key: str) -> str:
    return PREFIX + NESTED.join(part.upper() for part in key.split("."))


def write_starter(path: Path) -> None:
    """Write the starter file at `path`, never over an existing one (FileExistsError);
    its directory is made. Whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(starter_text(), encoding="utf-8")
    try:
        os.link(partial, path)  # fails if `path` exists, even if made meanwhile
    except FileExistsError:
        raise
    except OSError:  # a filesystem without hard links: create it exclusively
        with path.open("x", encoding="utf-8") as out:
            out.write(partial.read_text(encoding="utf-8"))
    finally:
        partial.unlink()
