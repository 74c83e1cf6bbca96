"""`mnemo memory doctor`: integrity faults of the shared tables and the provider's data,
and notes on what waits (each channel's backlog, embeddings, the background spend guard)
and on the model servers (one tiny request to each, unless `--offline`).

The exit code is about the data only: a model server that refuses or cannot be reached
is a note with its reason, as the embeddings endpoint's state is, never a FAULT (doctor
is run where the server may be down on purpose: a restore, a migration)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO
from urllib.parse import urlsplit

from bot.config.settings import Settings
from bot.ops.common import EXIT_FAULT, EXIT_OK, err, open_memory
from memory.text.display import terminal_safe

if TYPE_CHECKING:
    from bot.model.client import LLMError

# The chat probe's bound: `llm.timeout_s` if shorter. A server that needs longer to say
# one token is not one a turn can use either, and doctor must not hang on it.
PROBE_S = 30.0


async def doctor(settings: Settings, out: TextIO | None = None, *, offline: bool = False) -> int:
    """`offline`: no request to the model servers (the chat model, embeddings)."""
    from memory.contract.maintenance import IntegrityChecker
    from memory.contract.tracing import unwrap
    from memory.transfer.integrity import check_shared

    out = out or sys.stdout  # read now: a default taken at import outlives a redirect

    async with open_memory(settings) as m:
        faults = await check_shared(m.engine)
        checked = ["shared tables"]
        inner = unwrap(m.provider)
        if isinstance(inner, IntegrityChecker):
            faults += await inner.check_integrity()
            checked.append(f"{m.provider.name} provider data")
        else:
            print(
                f"note: the {m.provider.name} provider offers no integrity checks of its own",
                file=sys.stderr,
            )
        from bot.channels.registry import registered

        channel_lines = [
            line for channel in registered() for line in await channel.doctor_notes(m.engine)
        ]
        from bot.ops.embeddings import embeddings_report

        embedding_lines = await embeddings_report(settings, m, probe=not offline)
        from bot.ops.usage import guard_report

        embedding_lines += await guard_report(settings, m.engine)
    model_lines = await model_reports(settings, probe=not offline)
    for fault in faults:
        print(f"FAULT {terminal_safe(str(fault))}", file=out)
    code = EXIT_OK
    if faults:
        codes = sorted({f.code for f in faults})
        err(f"doctor found {len(faults)} fault(s) in {m.where}: {', '.join(codes)}")
        code = EXIT_FAULT
    else:
        print(f"ok: no faults in {m.where} ({', '.join(checked)} checked)", file=out)
    for line in [*channel_lines, *model_lines, *embedding_lines]:
        print(line, file=out)
    return code


def model_roles(settings: Settings) -> list[tuple[str, str]]:
    """(what it does, model) for each distinct model the bot calls: the chat model, then
    the summary model and the recall model where they differ from those before."""
    from bot.model.delegated_recall import recall_model

    llm = settings.llm
    roles: dict[str, list[str]] = {}
    for role, model in (
        ("chat", llm.model),
        ("summary", llm.summary_model or llm.model),
        ("recall", recall_model(settings)),
    ):
        roles.setdefault(model, []).append(role)
    # The chat model's line keeps its name alone: it is the default of the others.
    return [
        (names[0] if names[0] == "chat" else " and ".join(names), model)
        for model, names in roles.items()
    ]


async def model_reports(settings: Settings, *, probe: bool = True) -> list[str]:
    """A line per distinct model: a summary model that is wrong or missing on the
    server fails every compaction, which a probe of the chat model alone never shows."""
    return [
        await model_report(settings, probe=probe, model=model, role=role)
        for role, model in model_roles(settings)
    ]


async def model_report(
    settings: Settings, *, probe: bool = True, model: str = "", role: str = "chat"
) -> str:
    """Doctor's line on one model (`llm.model` by default): whether it answers at
    `llm.base_url` one user message of one token, or the server's reason (masked, one
    line) for not.

    The request goes through the bot's own client (bot/model/client.py), so it is sent
    as every turn is: put in the shape strict chat templates demand, streamed with
    `stream_options` (a server that refuses those refuses every turn), the server's
    message read and masked alike, deterministic refusals never retried. It is one
    attempt (no retries: doctor tells the state now), bounded by PROBE_S, and it leaves
    no usage row: its recorder has no store."""
    from bot.model.client import LLMClient, LLMError
    from memory.contract.types import Message
    from memory.storage.usage import UsageRecorder
    from memory.text.server_url import server_url

    llm = settings.llm
    model = model or llm.model
    head = terminal_safe(f"{role} model {model} at {_server(llm.base_url)}")
    if not probe:
        return f"{head}: not probed (--offline)"
    if not llm.api_key.get_secret_value().strip() and not server_url(llm.base_url).basic_auth:
        return (
            f"{head}: not probed: no API key (set OPENAI_API_KEY or llm.api_key; "
            "`mnemo run` will not start without one)"
        )
    bound = min(llm.timeout_s, PROBE_S)
    probe_settings = llm.model_copy(
        update={
            "model": model,
            "max_tokens": 1,
            "max_retries": 0,
            "timeout_s": bound,
            "answer_deadline_s": bound,
        }
    )
    client = LLMClient(probe_settings, usage=UsageRecorder())
    try:
        await client.complete([Message(role="user", content="Say OK.")], kind="chat")
    except LLMError as exc:
        return terminal_safe(f"{head}: {_failure(exc)}")
    except Exception as exc:  # what the client does not translate: doctor says it, once
        from bot.runtime.redact import scrub

        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        return terminal_safe(f"{head}: failed ({scrub(reason)})")
    finally:
        await client.close()
    return f"{head}: answered"


def _failure(exc: LLMError) -> str:
    """What went wrong, by what the client met: the server's refusal (its status and
    message), no server, or an answer that was no answer."""
    import openai

    cause = exc.__cause__
    if isinstance(cause, openai.APIStatusError):
        return f"refused: HTTP {cause.status_code}: {exc.detail or exc.reason}"
    if isinstance(cause, openai.APIConnectionError):  # timeouts included
        return f"unreachable ({exc.reason})"
    return f"failed ({exc.described()})"


def _server(base_url: str) -> str:
    """`llm.base_url` without what may be secret (a user and password, a query)."""
    parts = urlsplit(base_url)
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # not a port: the client will say what it makes of it
        port = ""
    if not parts.hostname:
        return repr(base_url.split("?", 1)[0].rsplit("@", 1)[-1])
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}{port}{parts.path.rstrip('/')}"
