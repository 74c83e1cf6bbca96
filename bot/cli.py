"""The `mnemo` command line. Each sub-command is a short function; the parser is built
from light modules only and every heavy one (the settings, providers, SQLAlchemy, the
model client, Telegram) is imported by the command that needs it, so `mnemo --help`
stays instant (tests/cli/test_startup_imports.py)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from memory.contract.types import GENERATION_SEP, SearchMode
from memory.search import MAX_LIMIT as SEARCH_MAX_LIMIT
from memory.text.display import terminal_safe

if TYPE_CHECKING:
    from bot.channels.terminal import Terminal
    from bot.config.settings import Settings

log = logging.getLogger("mnemo")

EXIT_FAULT = 1
EXIT_CONFIG = 2
EXIT_UNAVAILABLE = 3


class TerminalSafeFormatter(logging.Formatter):
    """Log lines quote what users and models wrote: their control and bidi characters
    are shown as escapes, never sent to the terminal (memory.text.display)."""

    def format(self, record: logging.LogRecord) -> str:
        return terminal_safe(super().format(record), multiline=True)


def setup_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(TerminalSafeFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, level, logging.INFO), handlers=[handler])
    logging.captureWarnings(True)  # warnings too become records, masked like the rest
    # Bot API URLs carry the token: httpx logs every URL at INFO.
    for noisy in ("httpx", "httpx2", "httpcore", "telegram.ext.Updater", "apscheduler", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _error(line: str) -> None:
    """One line on stderr: `mnemo: ...`, never a secret, never a control character."""
    from bot.runtime.redact import scrub

    print(f"mnemo: {scrub(terminal_safe(line))}", file=sys.stderr)


def _settings(args: argparse.Namespace, secrets: tuple[str, ...] = ()) -> Settings:
    """The settings (file and environment); `secrets`: the secret keys this command uses
    (a `${VAR}` with VAR unset stops it only there, `run` naming all of them)."""
    from bot.config.settings import SECRET_KEYS, load_settings, settings_secrets
    from bot.runtime.redact import install_redaction

    # An unknown memory.provider stops every command, `providers` included: its error
    # line lists the installed ones.
    needed = SECRET_KEYS if args.func is cmd_run else secrets
    settings = load_settings(getattr(args, "config", None), secrets=needed)
    install_redaction(*settings_secrets(settings))
    logging.getLogger().setLevel(settings.log_level)  # the config's `log_level`
    return settings


def _run_async(coro: Coroutine[Any, Any, int]) -> int:
    import asyncio  # not at the top: `mnemo --help` has no event loop to run

    return asyncio.run(coro)


# --- commands -----------------------------------------------------------------------


def cmd_web(args: argparse.Namespace) -> int:
    """`mnemo web token` makes a token and its config line; `mnemo web hash-token`
    hashes one read from stdin (never from argv: shell history and `ps` would keep it)."""
    from bot.web.auth import hash_token, new_token

    _settings(args)  # like every command: a bad config is said, not ignored
    if args.web_command == "token":
        token = new_token()
        print(f"token (give it to {args.name}; shown once, not stored): {token}")
        print("add to web.operators in config.yaml:")
        print(f"  - {{name: {args.name}, role: {args.role}, token_sha256: {hash_token(token)}}}")
        return 0
    if sys.stdin.isatty():  # typed: not echoed, not kept in the terminal's scrollback
        import getpass

        token = getpass.getpass("token: ").strip()
    else:
        token = sys.stdin.readline().strip()
    if not token:
        _error("give the token on stdin, e.g. `mnemo web hash-token < token.txt`")
        return EXIT_CONFIG
    print(hash_token(token))
    return 0


def cmd_providers(args: argparse.Namespace) -> int:
    from memory.contract.registry import list_providers

    configured = _settings(args).memory.provider  # marked with '*' in the list
    entries = list_providers()
    if not entries:
        print("no memory providers installed")
        return 1
    for entry in entries:
        mark = "*" if entry.name == configured else " "
        if entry.error:
            print(terminal_safe(f"{mark} {entry.name}  ({entry.target})  ERROR: {entry.error}"))
            continue
        cls = entry.plugin.provider_class if entry.plugin else None
        caps = ", ".join(_static_capabilities(cls)) or "-"
        print(terminal_safe(f"{mark} {entry.name}  ({entry.target})  capabilities: {caps}"))
    return 0


def _static_capabilities(cls: type | None) -> list[str]:
    """Capabilities read off the provider class without opening a database: a plugin may
    declare `provider_class`; otherwise we can only say it is a Provider."""
    from memory.contract.capabilities import protocols_of

    if not isinstance(cls, type):
        return ["Provider"]
    try:
        # A bare instance (no __init__ run) answers isinstance like a real one, on every
        # Python version (3.12 checks protocols with getattr_static, ignoring __getattr__).
        probe: Any = object.__new__(cls)
    except TypeError:
        probe = _ClassProbe(cls)
    return ["Provider", *protocols_of(probe)]


class _ClassProbe:
    """Exposes a class's attributes to `isinstance(..., Protocol)` without instantiating."""

    def __init__(self, cls: type) -> None:
        self._cls = cls

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cls, name)


def cmd_migrate(args: argparse.Namespace) -> int:
    from bot.app.database_file import describe, prepare, sqlite_file
    from memory.storage.db import create_engine, migrate

    settings = _settings(args)
    url = settings.database.url
    where = describe(url)
    file = sqlite_file(url)
    new_file = file is not None and not file.exists()

    async def go() -> int:
        prepare(url)
        engine = create_engine(url)
        try:
            done = await migrate(engine)
        finally:
            await engine.dispose()
        if new_file:
            print(f"created the database {where} with mnemo's tables")
        elif done.created:
            print(f"created mnemo's tables in the database {where}")
        elif done.changed:
            print(f"migrated the database {where} to the current schema")
        else:
            print(f"the database {where} is up to date (nothing to migrate)")
        return 0

    return _run_async(go())


SESSION_NAME_MAX = 100  # the id around it (agent, channel) must fit conversations' 255


def user_id(value: str) -> int:
    """A `--user` id: an integer the database's BIGINT columns hold (Telegram's ids do)."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if not -(2**63) <= number < 2**63:
        raise argparse.ArgumentTypeError(f"{value} is out of range (a user id is below 2^63)")
    return number


def session_name(value: str) -> str:
    """A `mnemo chat --session` name: printable, no '#' (it separates the generations
    `/new` starts: `main#2`), at most SESSION_NAME_MAX characters."""
    if not value.strip():
        raise argparse.ArgumentTypeError("a session name cannot be empty")
    if GENERATION_SEP in value:
        raise argparse.ArgumentTypeError(
            f"{value!r}: '{GENERATION_SEP}' is reserved (it numbers the sessions /new starts)"
        )
    if not value.isprintable():
        raise argparse.ArgumentTypeError(f"{value!r}: control characters are not allowed")
    if len(value) > SESSION_NAME_MAX:
        raise argparse.ArgumentTypeError(
            f"a session name has at most {SESSION_NAME_MAX} characters ({len(value)} given)"
        )
    return value


def cmd_chat(args: argparse.Namespace) -> int:
    from bot.model.client import MissingApiKey, require_api_key

    settings = _settings(args, ("llm.api_key",))
    try:
        require_api_key(settings.llm)
    except MissingApiKey as exc:
        _error(str(exc))
        return EXIT_CONFIG

    from bot.app.database_file import prepare
    from bot.app.root import Root
    from bot.channels.terminal import Terminal, terminal_session

    prepare(settings.database.url)

    base = terminal_session(settings.agent.id, args.session)
    editor, banner = None, ""
    if sys.stdin.isatty() and sys.stdout.isatty():
        from bot.channels.terminal import LineEditor

        data = Path(settings.data_dir)
        log_file = _log_to_file(data / "chat.log")
        editor = LineEditor(data / "chat_history")
        from bot.app.database_file import describe

        banner = (
            f"Database: {describe(settings.database.url)}. "
            f"Log: {log_file or 'warnings only, on stderr'}."
        )

    def channel(services: Any) -> Terminal:
        return Terminal(services.conversations, base, editor=editor, banner=banner)

    # The running bot's health port and reflect schedule are its own, not the chat's.
    root = Root(settings, [channel], health=False, reflect=False)
    with _terminal_restored():
        code = _run_async(root.run())
    if editor is not None and root.signalled is not None:
        print()  # the shell's prompt starts on a line of its own, not after "you> "
    return 130 if root.signalled == signal.SIGINT else code  # Ctrl-C, as a shell counts it


def _log_to_file(path: Path) -> Path | None:
    """An interactive chat's log lines go to `path`, not into the conversation; if the
    file cannot be opened, only warnings and errors reach stderr. The path, or None."""
    root = logging.getLogger()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = logging.FileHandler(path, encoding="utf-8")
    except OSError:
        handler = logging.StreamHandler()
        handler.setLevel(logging.WARNING)
        path = None  # type: ignore[assignment]
    handler.setFormatter(TerminalSafeFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    return path


@contextmanager
def _terminal_restored() -> Iterator[None]:
    """The terminal's settings as they were, whatever happens: a stop while readline
    waits in its thread would otherwise leave the shell without echo."""
    try:
        import termios

        fd = sys.stdin.fileno()
        saved = termios.tcgetattr(fd) if os.isatty(fd) else None
    except (ImportError, OSError, ValueError):
        saved = None
    try:
        yield
    finally:
        if saved is not None:
            with suppress(OSError):
                termios.tcsetattr(fd, termios.TCSADRAIN, saved)


# The secrets each `mnemo memory` action uses (the others need none).
MEMORY_SECRETS = {"compact": ("llm.api_key",), "embed": ("llm.api_key", "embeddings.api_key")}


def cmd_memory(args: argparse.Namespace) -> int:
    """`mnemo memory ACTION`: the operator commands, one module per group in bot/ops/
    (imported only when run: `mnemo memory --help` needs none of them)."""
    action = args.memory_command
    settings = _settings(args, MEMORY_SECRETS.get(action, ()))
    if action == "backup":
        from bot.ops.backup import backup

        return backup(settings, args.path)
    return _run_async(_memory_action(action, settings, args))


def _memory_action(
    action: str, settings: Settings, args: argparse.Namespace
) -> Coroutine[Any, Any, int]:
    if action in ("status", "sessions"):
        from bot.ops import sessions

        if action == "status":
            return sessions.status(settings, args.session)
        return sessions.sessions(settings)
    if action == "search":
        from bot.ops.search import search

        return search(
            settings,
            args.session,
            args.text,
            user=args.user,
            agent=args.agent,
            mode=args.mode,
            limit=args.limit,
            since=args.since,
            before=args.before,
        )
    if action in ("export", "import"):
        from bot.ops import transfer

        if action == "export":
            if (args.user is None) == (args.session is None):
                return transfer.refuse("give a session or --user, one of them")
            if args.user is not None:
                return transfer.export_memory_zip(settings, args.user)
            return transfer.export(settings, args.session, args.format)
        return transfer.import_(settings, args.path, user=args.user, dry_run=args.dry_run)
    if action == "compact":
        from bot.ops.compact import compact

        return compact(settings, args.session, args.all)
    if action == "doctor":
        from bot.ops.doctor import doctor

        return doctor(settings, offline=args.offline)
    if action == "embed":
        from bot.ops.embeddings import embed_command

        return embed_command(settings, prune=args.prune)
    if action == "usage":
        from bot.ops.usage import usage_command

        return usage_command(settings, args.by, args.days)
    if action == "erase":
        from bot.ops.erase import erase

        return erase(
            settings, args.user, args.agent, args.older_than, args.dry_run, scrub=args.scrub
        )
    if action == "import-chat":
        from bot.ops.import_chat import import_chat

        return import_chat(
            settings, args.file, args.format, args.user, args.agent, args.chat, args.dry_run
        )
    raise AssertionError(action)  # the parser offers no other action


def cmd_config(args: argparse.Namespace) -> int:
    """`mnemo config show`: every setting in effect and its source; `mnemo config init`:
    a starter file (bot.config.show)."""
    from bot.config.settings import load_config, resolve_path
    from bot.config.show import show_lines, write_starter

    if args.config_command == "init":
        target = Path(args.path) if args.path else resolve_path(getattr(args, "config", None))
        try:
            write_starter(target)
        except FileExistsError:
            _error(f"{target} exists; not overwritten (give another PATH, or remove it first)")
            return EXIT_FAULT
        print(f"wrote {target}: every key at its default, commented out; uncomment what you change")
        return 0
    loaded = load_config(getattr(args, "config", None), secrets=())
    from bot.config.settings import settings_secrets
    from bot.runtime.redact import install_redaction

    install_redaction(*settings_secrets(loaded.settings))
    for line in show_lines(loaded):
        print(line)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from bot.app.run import run_channels, start_problems
    from bot.channels.base import ChannelRefused
    from bot.model.client import MissingApiKey, require_api_key

    settings = _settings(args)
    # Everything missing is named at once: a newcomer fixes it in one go, not one run each.
    missing = start_problems(settings)
    try:
        require_api_key(settings.llm)
    except MissingApiKey as exc:
        missing.append(str(exc))
    for line in missing:
        _error(line)
    if missing:
        return EXIT_CONFIG
    try:
        from bot.app.database_file import prepare

        prepare(settings.database.url)
        return _run_async(run_channels(settings))
    except ChannelRefused as exc:
        _error(str(exc))
        return EXIT_CONFIG


def cmd_reflect(args: argparse.Namespace) -> int:
    from bot.app.run import reflect_command
    from bot.model.client import MissingApiKey, require_api_key

    settings = _settings(args, ("llm.api_key",))
    try:
        require_api_key(settings.llm)
    except MissingApiKey as exc:
        _error(str(exc))
        return EXIT_CONFIG
    from bot.app.database_file import require_existing

    # A worker beside the bot: it reviews what the bot stored, and creates nothing.
    _run_async(_checked(require_existing(settings.database.url)))
    return _run_async(reflect_command(settings, args.once))


async def _checked(check: Coroutine[Any, Any, None]) -> int:
    await check
    return 0


# --- parser -------------------------------------------------------------------------

# Examples shown at the end of each command's --help (`mnemo memory search --help`).
EXAMPLES: dict[str, list[str]] = {
    "run": [
        "TELEGRAM_BOT_TOKEN=123456:ABC OPENAI_API_KEY=sk-... mnemo run",
        "mnemo --config /etc/mnemo/config.yaml run",
    ],
    "chat": ["OPENAI_API_KEY=sk-... mnemo chat", "mnemo chat --session work"],
    "providers": ["mnemo providers"],
    "migrate": ["MNEMO_DATABASE_URL=postgresql+psycopg://mnemo@db/mnemo mnemo migrate"],
    "reflect": ["mnemo reflect --once", "mnemo reflect"],
    "memory": ["mnemo memory sessions", "mnemo memory search --user 42 'tea'"],
    "memory status": ["mnemo memory status default:telegram:42"],
    "memory sessions": ["mnemo memory sessions"],
    "memory search": [
        "mnemo memory search --user 42 'green tea'",
        "mnemo memory search --user 42 --mode substring --limit 5 'tea'",
        "mnemo memory search default:telegram:42 'tea'",
    ],
    "memory export": [
        "mnemo memory export default:telegram:42 > session.json",
        "mnemo memory export --format markdown default:telegram:42 > session.md",
        "mnemo memory export --user 42 > mnemo-memory-42.zip",
    ],
    "memory compact": ["mnemo memory compact default:telegram:42", "mnemo memory compact --all"],
    "memory doctor": ["mnemo memory doctor", "mnemo memory doctor --offline"],
    "memory embed": ["mnemo memory embed", "mnemo memory embed --prune"],
    "memory usage": ["mnemo memory usage --by user --days 7"],
    "memory erase": [
        "mnemo memory erase --user 42 --dry-run",
        "mnemo memory erase --older-than 90d",
        "mnemo memory erase --user 42 --scrub",
    ],
    "memory backup": ["mnemo memory backup backups/mnemo-$(date +%F).db"],
    "memory import": [
        "mnemo memory import session.json",
        "cat session.json | mnemo memory import -",
        "mnemo memory import mnemo-memory-42.zip --user 77 --dry-run",
    ],
    "memory import-chat": [
        "mnemo memory import-chat result.json --format telegram --user 42 --dry-run",
        "mnemo memory import-chat conversations.json --format chatgpt --user 42",
    ],
    "web": ["mnemo web token --name ann --role operator"],
    "web token": ["mnemo web token --name ann", "mnemo web token --name bob --role operator"],
    "web hash-token": ["mnemo web hash-token < token.txt"],
    "config": ["mnemo config show", "mnemo config init"],
    "config show": ["mnemo config show", "MNEMO_LLM__MODEL=gpt-4o mnemo config show"],
    "config init": ["mnemo config init", "mnemo config init /etc/mnemo/config.yaml"],
}


def _epilog(name: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in EXAMPLES[name])


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mnemo")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        metavar="PATH",
        default=argparse.SUPPRESS,  # so a sub-command's copy never hides the top one
        help="config file (default: $MNEMO_CONFIG or ./config.yaml; optional: the "
        "environment can set every key, see `mnemo config show`)",
    )
    raw = argparse.RawDescriptionHelpFormatter  # the examples keep their lines
    parser = argparse.ArgumentParser(
        prog="mnemo",
        description="A Telegram bot whose conversations never forget.",
        epilog="examples:\n  TELEGRAM_BOT_TOKEN=123456:ABC OPENAI_API_KEY=sk-... mnemo run\n"
        "  mnemo memory search --user 42 'tea'\n  mnemo COMMAND --help",
        formatter_class=raw,
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"mnemo {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(
        subs: Any, name: str, full: str, helptext: str, func: Callable[[argparse.Namespace], int]
    ) -> argparse.ArgumentParser:
        p = subs.add_parser(
            name,
            help=helptext,
            description=helptext,
            epilog=_epilog(full),
            formatter_class=raw,
            parents=[common],
        )
        p.set_defaults(func=func)
        return cast(argparse.ArgumentParser, p)

    def add(
        name: str, helptext: str, func: Callable[[argparse.Namespace], int]
    ) -> argparse.ArgumentParser:
        return command(sub, name, name, helptext, func)

    add(
        "run",
        "run the Telegram bot (polling, or webhook when telegram.webhook.url is set)",
        cmd_run,
    )
    chat = add("chat", "chat with the bot from this terminal (same memory as Telegram)", cmd_chat)
    chat.add_argument(
        "--session",
        default="main",
        type=session_name,
        metavar="NAME",
        help="the conversation to continue or start (default: main)",
    )
    add("providers", "list installed memory providers and their capabilities", cmd_providers)
    add("migrate", "apply database migrations", cmd_migrate)
    reflect = add(
        "reflect",
        "run the reflect job that updates profiles, souls and constraints "
        "(a worker on the reflect.interval schedule; --once: one cycle now)",
        cmd_reflect,
    )
    reflect.add_argument(
        "--once", action="store_true", help="run one cycle and exit (default: run on schedule)"
    )

    def memory_usage(_args: argparse.Namespace) -> int:
        memory.print_help()
        return EXIT_CONFIG  # an action is required: a usage error, like argparse's

    memory = add("memory", "inspect and maintain stored memory", memory_usage)
    msub = memory.add_subparsers(dest="memory_command", metavar="ACTION")

    def madd(name: str, helptext: str) -> argparse.ArgumentParser:
        return command(msub, name, f"memory {name}", helptext, cmd_memory)

    session_help = "session id, as `mnemo memory sessions` lists it (e.g. default:telegram:42)"
    status = madd("status", "memory statistics of one session")
    status.add_argument("session", help=session_help)
    madd("sessions", "list sessions with message and summary counts")
    search = madd(
        "search",
        "search one user's memory (every conversation of theirs): by --user, or by one "
        "of their sessions",
    )
    search.add_argument(
        "session",
        nargs="?",
        metavar="SESSION",
        help="a session of the user to search (optional with --user); " + session_help,
    )
    search.add_argument(
        "text",
        metavar="TEXT",
        help="what to look for (words, or the text itself with --mode substring)",
    )
    search.add_argument(
        "--user",
        type=user_id,
        metavar="ID",
        help="the user's id (a group's chat id) instead of a session",
    )
    search.add_argument(
        "--agent", metavar="ID", help="with --user: the agent whose memory (default: agent.id)"
    )
    search.add_argument(
        "--mode",
        choices=[m.value for m in SearchMode],
        default=SearchMode.FULL_TEXT.value,
        help="full_text: ranked words; substring: the text literally, newest first; hybrid: "
        "words and meaning (needs embeddings.model) (default: full_text)",
    )
    search.add_argument(
        "--limit",
        type=int,
        default=20,
        choices=range(1, SEARCH_MAX_LIMIT + 1),
        metavar="N",
        help=f"at most N results, 1-{SEARCH_MAX_LIMIT} (default: 20)",
    )
    for flag, what in (("--since", "from this date on"), ("--before", "before this date")):
        search.add_argument(
            flag,
            metavar="DATE",
            help=f"only what was said {what}: YYYY-MM-DD (UTC), an ISO date and time, "
            "or 7d / 2w for that long ago",
        )
    export = madd("export", "export a session's full history and summary DAG to stdout")
    export.add_argument(
        "session", nargs="?", help=session_help + "; or give --user for a whole memory"
    )
    export.add_argument(
        "--user",
        type=int,
        default=None,
        help="a person's whole memory instead, as /memory export makes it: the zip on "
        "stdout (default: one session)",
    )
    export.add_argument(
        "--format",
        choices=["json", "markdown"],
        default="json",
        help="json: lossless, for `mnemo memory import`; markdown: for reading (default: json)",
    )
    compact = madd("compact", "compact one session or all of them (needs the LLM)")
    compact.add_argument("session", nargs="?", help=session_help + "; or give --all")
    compact.add_argument(
        "--all", action="store_true", help="every session instead of one (default: off)"
    )
    doctor = madd(
        "doctor",
        "check stored memory for integrity faults; note what waits and whether the chat "
        "and embeddings models answer",
    )
    doctor.add_argument(
        "--offline",
        action="store_true",
        help="send no request to the model servers (default: one tiny request to each)",
    )
    embed = madd(
        "embed",
        "embed every stored message, summary and note lacking a vector of "
        "embeddings.model (safe to re-run, or to run on two replicas at once)",
    )
    embed.add_argument(
        "--prune",
        action="store_true",
        help="then delete the vectors of every other model (default: keep them)",
    )
    usage = madd(
        "usage", "model calls and tokens (and costs, with llm.prices) per user, kind, day or model"
    )
    usage.add_argument(
        "--by",
        choices=["user", "kind", "day", "model"],
        default="kind",
        help="one row per user, kind of call, UTC day or model (default: kind)",
    )
    usage.add_argument(
        "--days",
        type=int,
        default=30,
        choices=range(1, 3661),
        metavar="N",
        help="the last N days, today included, 1-3660 (default: 30)",
    )

    erase = madd(
        "erase",
        "forget for good: one user's whole memory (--user), or every message older than "
        "a duration (--older-than 90d), with what was built on them",
    )
    erase.add_argument(
        "--user", type=user_id, metavar="ID", help="the memory's user id (a group's chat id)"
    )
    erase.add_argument("--agent", metavar="ID", help="the agent (default: agent.id)")
    erase.add_argument("--older-than", metavar="DURATION", help="like 90d or 12h")
    erase.add_argument(
        "--dry-run", action="store_true", help="only say what would go (default: erase)"
    )
    erase.add_argument(
        "--scrub",
        action="store_true",
        help="then make every forget so far reach the disk (PostgreSQL: VACUUM FULL of "
        "every table, locking each while it is rewritten, and the WAL); alone: only that "
        "(default: off)",
    )
    backup = madd(
        "backup", "back up the SQLite database to PATH (PostgreSQL: prints pg_dump's line)"
    )
    backup.add_argument(
        "path", help="the new backup file (never overwritten; its directory is created)"
    )
    imp = madd(
        "import",
        "import a session exported with `mnemo memory export`, or a person's memory "
        "exported with /memory export (its zip or memory.json)",
    )
    imp.add_argument("path", help="the JSON export or the zip, or - to read JSON from stdin")
    imp.add_argument(
        "--user",
        type=int,
        default=None,
        help="a memory export: into this user's memory instead of its owner's (default: the owner)",
    )
    imp.add_argument(
        "--dry-run",
        action="store_true",
        help="a memory export: check it and say what it would import, writing nothing "
        "(default: off)",
    )
    chats = madd(
        "import-chat",
        "import a Telegram Desktop export (result.json) or a ChatGPT export "
        "(conversations.json) into one user's memory, each chat as an archived "
        "conversation (safe to re-run: adds only what is new)",
    )
    chats.add_argument(
        "file", help="result.json (Telegram Desktop) or conversations.json (ChatGPT)"
    )
    chats.add_argument(
        "--format", choices=["telegram", "chatgpt"], required=True, help="which export FILE is"
    )
    chats.add_argument(
        "--user", type=user_id, metavar="ID", required=True, help="the memory's user id"
    )
    chats.add_argument("--agent", metavar="ID", help="the agent (default: agent.id)")
    chats.add_argument(
        "--chat", metavar="NAME", help="only this chat (its name or id; default: all)"
    )
    chats.add_argument(
        "--dry-run", action="store_true", help="only say what would be imported (default: import)"
    )

    webp = add("web", "the web console's operator tokens (docs/OPERATIONS.md)", cmd_web)
    wsub = webp.add_subparsers(dest="web_command", metavar="ACTION", required=True)
    tok = command(
        wsub, "token", "web token", "make a new token and print its web.operators line", cmd_web
    )
    tok.add_argument("--name", required=True, help="the operator's name (letters, digits, _.@-)")
    tok.add_argument(
        "--role",
        choices=["viewer", "operator"],
        default="viewer",
        help="viewer: reads only; operator: may also change memory (default: viewer)",
    )
    command(
        wsub,
        "hash-token",
        "web hash-token",
        "print the SHA-256 of a token read from stdin",
        cmd_web,
    )

    cfg = add("config", "the configuration: what is in effect, and a starter file", cmd_config)
    csub = cfg.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    command(
        csub,
        "show",
        "config show",
        "print every setting in effect, secrets masked, and where each came from "
        "(default, file, environment)",
        cmd_config,
    )
    init = command(
        csub,
        "init",
        "config init",
        "write a commented starter config file (every key at its default)",
        cmd_config,
    )
    init.add_argument(
        "path",
        nargs="?",
        help="the file to write, never overwritten (default: --config, $MNEMO_CONFIG or "
        "./config.yaml)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # --help and --version end here: nothing heavy imported
    from bot.app.database_file import DatabaseMissing
    from bot.config.settings import ConfigError

    setup_logging()
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        for line in str(exc).splitlines():  # one line per wrong key
            _error(f"config error: {line}")
        return EXIT_CONFIG
    except KeyboardInterrupt:
        said = INTERRUPTED.get(getattr(args, "memory_command", None) or "")
        if said:
            _error(said)
        return 130
    except DatabaseMissing as exc:
        _error(str(exc))
        return EXIT_UNAVAILABLE
    except OSError as exc:  # the environment: a path that cannot be made, a port in use
        _error(str(exc))
        return EXIT_UNAVAILABLE
    except Exception as exc:
        from memory.contract.registry import ProviderLoadError

        if isinstance(exc, ProviderLoadError):  # a plugin that fails to load, or two of one name
            _error(str(exc))
            return EXIT_CONFIG
        reason = _database_unavailable(exc)
        if reason is None:
            _last_resort(exc)
            return EXIT_FAULT
        _error(f"the database is unavailable: {reason}")
        return EXIT_UNAVAILABLE


# What an interrupted command kept (compact and embed stop after a step and say it
# themselves; these are all or nothing).
INTERRUPTED = {
    "import": "interrupted (Ctrl-C): nothing was imported (an import is one transaction); "
    "run the same command again",
    "import-chat": "interrupted (Ctrl-C): the messages stored so far are kept; run the "
    "same command again to import the rest",
    "export": "interrupted (Ctrl-C): the export is incomplete; run the same command again",
    "backup": "interrupted (Ctrl-C): no backup was written (a backup appears only when "
    "complete); run the same command again",
}


def _last_resort(exc: BaseException) -> None:
    """A bug's traceback, as Python would print it, but with every configured secret
    masked: a library's message may quote the bot token or a URL's password."""
    import traceback

    from bot.runtime.redact import scrub

    text = "".join(traceback.format_exception(exc))
    print(scrub(terminal_safe(text, multiline=True)), end="", file=sys.stderr)


def _database_unavailable(exc: BaseException) -> str | None:
    """One line for a database that cannot be reached or opened (the operator's fix is
    outside mnemo: start it, fix the URL); None for anything else."""
    from sqlalchemy.exc import OperationalError

    if not isinstance(exc, OperationalError):
        return None
    text = str(exc.orig if exc.orig is not None else exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
