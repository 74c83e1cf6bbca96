"""A provider's own settings: one pydantic model, `memory.<name>` in config.yaml.

The plugin exports the model through its `ProviderPlugin` (memory/contract/registry.py); the
config loader validates `memory.<name>` with it, and the factory receives the validated
model as `ctx.settings`. One definition serves both, so a bound or a new key is written
once. A provider that exports no model still gets its section as the plain dict
`ctx.config`, as before.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from memory.contract.errors import InvalidArgument

# Keys the bot fills in from another section of config.yaml (`compaction.keep_tail`;
# `target_tokens`: `compaction.max_tokens` x `compaction.target_fraction`, what an
# automatic compaction brings the context down to, 0 when it is off): a provider's model
# may declare them to receive them, but `memory.<name>` cannot set them (they are set
# once, where every provider reads them).
SUPPLIED = ("keep_tail", "target_tokens")
MAX_TOKENS = 10_000_000  # bound of token counts a provider is supplied
MAX_MESSAGES = 100_000  # bound of message counts (keep_tail, chunk sizes, fresh_tail)

Model = TypeVar("Model", bound=BaseModel)


class ProviderSettings(BaseModel):
    """A convenient base (any pydantic model will do): unknown keys are errors, so a
    typo never passes silently, and no NaN or infinity passes a bound."""

    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)


def _fspath(value: Any) -> Any:
    return os.fspath(value) if isinstance(value, os.PathLike) else value


# A path setting: text in config.yaml; a `Path` from code that builds the config itself.
PathText = Annotated[str, BeforeValidator(_fspath)]


def section_model(model: type[Model]) -> type[Model]:
    """`model` as `memory.<name>` may hold it: without the SUPPLIED keys (set in their
    own section), everything else (bounds, validators, the name in errors) the same."""
    supplied = [key for key in SUPPLIED if key in model.model_fields]
    if not supplied:
        return model
    # A ClassVar in a subclass takes a field out of the model.
    return type(
        model.__name__,
        (model,),
        {
            "__module__": model.__module__,
            "__qualname__": model.__qualname__,
            "__annotations__": {key: ClassVar[Any] for key in supplied},
        },
    )


def settings_of(model: type[Model], name: str, settings: Any, config: dict[str, Any]) -> Model:
    """`settings` when it is already `model` (validated by the config loader), else
    `model` validated from the plain dict `config`, strictly (no "3" for 3: this dict is
    built by code, not read from YAML). Keys the model does not declare are left alone
    (another provider's, when one config serves several). A bad value is
    InvalidArgument naming the key: `memory.lcm.leaf_chunk_size: ...`."""
    if isinstance(settings, model):
        return settings
    known = {k: v for k, v in config.items() if k in model.model_fields}
    try:
        return model.model_validate(known, strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in ("memory", name, *first["loc"]))
        raise InvalidArgument(f"{key}: {first['msg']} (got {first.get('input')!r:.80})") from None


def path_fields(model: type[BaseModel]) -> list[str]:
    """The fields of `model` declared as `PathText`: the config loader resolves a
    relative one against the config file's directory."""
    return [
        name
        for name, field in model.model_fields.items()
        if any(isinstance(m, BeforeValidator) and m.func is _fspath for m in field.metadata)
    ]
