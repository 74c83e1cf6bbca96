"""`mnemo memory ...`: the operator's commands over a live database.

Every command opens the configured database, which must exist (bot.app.database_file),
migrating it as every start does, and the
configured provider through the registry. Only `compact` builds the full services (it
needs the LLM for summaries); the others give the provider a summarizer that refuses, so
`doctor`, `export` or `backup` never need an API key.

Output goes to stdout; progress and diagnostics to stderr. Exit codes: 0 done, 1 a fault
or failure (named on stderr), 2 bad usage, 3 the database missing or unreachable (the
CLI's; docs/OPERATIONS.md lists them). Stored text (titles, messages, ids of imported
sessions) is printed through `memory.text.display.terminal_safe`: its control and bidi
characters never act on the terminal; the JSON export escapes them losslessly.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO, cast

import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.config.settings import Settings
from bot.ops.progress import ProgressBar
from memory.contract.capabilities import (
    CompactionEstimator,
    Compactor,
    Provider,
    ProviderContext,
    Searcher,
)
from memory.contract.errors import (
    CompactionIncomplete,
    ContractError,
    InvalidArgument,
    StopRequested,
)
from memory.contract.types import (
    CompactionMode,
    CompactionResult,
    ListOptions,
    SearchMode,
    SearchQuery,
    Session,
    SummarizeOptions,
    utcnow,
)
from memory.text.display import json_terminal_safe, terminal_safe

EXIT_OK, EXIT_FAULT, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell counts it


class _NoSummarizer:
    """Read-only commands must never reach the LLM; if a provider tries, say so."""

    async def summarize(self, text: str, opts: SummarizeOptions) -> str:
        raise RuntimeError("this operator command does not summarize (use `mnemo memory compact`)")


@dataclass
class Opened:
    settings: Settings
    engine: AsyncEngine
    provider: Provider

    @property
    def where(self) -> str:
        """The database, as the operator recognises it (the SQLite file's path)."""
        from bot.app.database_file import describe

        return describe(self.settings.database.url)


@asynccontextmanager
async def open_memory(
    settings: Settings,
    *,
    with_llm: bool = False,
    create: bool = False,
    wrap_summarizer: Callable[[Any], Any] | None = None,
) -> AsyncIterator[Opened]:
    """The migrated database and the configured provider; closed on exit. The database
    must exist unless `create` (bot.app.database_file): DatabaseMissing otherwise. Each
    command names `Opened.where` in its result."""
    from bot.app.database_file import require_directory, require_existing

    url = settings.database.url
    if create:
        require_directory(url)
    else:
        await require_existing(url)
    if with_llm:
        from bot.app.services import build_services, build_summarizer
        from bot.model.client import LLMClient

        llm = LLMClient(settings.llm)
        summarizer = build_summarizer(llm, settings)
        if wrap_summarizer is not None:  # the operator's compaction counts its steps
            summarizer = wrap_summarizer(summarizer)
        services = await build_services(settings, llm=llm, summarizer=summarizer)
        try:
            yield Opened(settings, services.engine, services.provider)
        finally:
            await services.close()
        return
    from memory.contract.registry import create_provider_async
    from memory.storage.db import create_engine, migrate

    engine = create_engine(settings.database.url)
    try:
        await migrate(engine)
        ctx = ProviderContext(
            engine=engine,
            summarizer=_NoSummarizer(),
            agent_id=settings.agent.id,
            data_dir=Path(settings.data_dir),
            config=settings.provider_config(),
        )
        provider = await create_provider_async(settings.memory.provider, ctx)
        try:
            yield Opened(settings, engine, provider)
        finally:
            await provider.close()
    finally:
        await engine.dispose()


def _err(message: str) -> None:
    print(f"mnemo: {terminal_safe(message)}", file=sys.stderr)


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "-"


async def _session(engine: AsyncEngine, session_id: str) -> Session | None:
    from memory.contract.errors import NotFound
    from memory.storage.history import HistoryStore

    try:
        info = await HistoryStore(engine).load_info(session_id)
    except NotFound:
        return None
    return Session(info.id, info.agent_id, info.user_id, info.channel)


# --- status / sessions / search -------------------------------------------------------


async def status(settings: Settings, session_id: str, out: TextIO = sys.stdout) -> int:
    from memory.storage.history import HistoryStore
    from memory.storage.stores import snapshot_table, state_table

    async with open_memory(settings) as m:
        try:
            info = await HistoryStore(m.engine).load_info(session_id)
        except ContractError:
            _err(f"no session {session_id!r} (see `mnemo memory sessions`)")
            return EXIT_FAULT
        stats = await m.provider.stats(Session(info.id, info.agent_id, info.user_id, info.channel))
        async with m.engine.connect() as conn:
            snap = await conn.scalar(
                sa.select(snapshot_table.c.version).where(snapshot_table.c.session_id == session_id)
            )
            current = await conn.scalar(
                sa.select(state_table.c.version).where(
                    state_table.c.user_id == info.user_id, state_table.c.agent_id == info.agent_id
                )
            )
    rows = [
        (
            "session",
            f"{info.id} (agent {info.agent_id}, user {info.user_id}, channel {info.channel})",
        ),
        ("title", info.title or "-"),
        ("provider", m.provider.name),
        ("database", m.where),
        (
            "messages",
            f"{stats.message_count} ({stats.token_count} tokens), "
            f"{_when(stats.oldest_at)} .. {_when(stats.newest_at)}",
        ),
        ("summaries", str(stats.summary_count)),
        ("context", f"{stats.context_tokens} tokens"),
        (
            "memory",
            f"snapshot version {snap if snap is not None else '-'}, current version {current or 0}",
        ),
        ("created", _when(info.created_at)),
        ("active", _when(info.last_active)),
        ("archived", "yes" if info.archived else "no"),
    ]
    for key, value in rows:
        print(f"{key:<10} {terminal_safe(value)}", file=out)
    return EXIT_OK


async def sessions(settings: Settings, out: TextIO = sys.stdout) -> int:
    from memory.contract.tracing import unwrap
    from memory.storage.history import HistoryStore, SessionCounter

    everything = ListOptions(include_archived=True)
    async with open_memory(settings) as m:
        provider = unwrap(m.provider)
        if isinstance(provider, SessionCounter):
            # A fixed number of queries however many sessions there are.
            rows = await provider.list_counts(everything)
        else:
            # A provider that cannot count in bulk: its `stats`, one session at a time.
            rows = await HistoryStore(m.engine).list_counts(everything)
            for i, row in enumerate(rows):
                info = row.info
                stats = await m.provider.stats(
                    Session(info.id, info.agent_id, info.user_id, info.channel)
                )
                rows[i] = replace(row, summary_count=stats.summary_count)
        lines = [  # escaped before the widths are measured
            (
                terminal_safe(r.info.id),
                str(r.info.user_id),
                str(r.message_count),
                str(r.summary_count),
                _when(r.info.last_active),
                ("[archived] " if r.info.archived else "") + terminal_safe(r.info.title),
            )
            for r in rows
        ]
    if not lines:
        print(f"no sessions in {m.where}", file=out)
        return EXIT_OK
    header = ("SESSION", "USER", "MESSAGES", "SUMMARIES", "LAST ACTIVE", "TITLE")
    widths = [max(len(r[i]) for r in [header, *lines]) for i in range(5)]
    for line in [header, *lines]:
        print(
            "  ".join(c.ljust(w) for c, w in zip(line[:5], widths, strict=True)) + "  " + line[5],
            file=out,
        )
    print(f"{len(lines)} session(s) in {m.where}", file=sys.stderr)
    return EXIT_OK


async def search(
    settings: Settings,
    session_id: str | None,
    text: str,
    out: TextIO = sys.stdout,
    *,
    user: int | None = None,
    agent: str | None = None,
    mode: str = SearchMode.FULL_TEXT.value,
    limit: int = 20,
) -> int:
    """One user's memory, every conversation of theirs (the provider's search covers the
    user): given by `user` (and `agent`), or by one of their sessions."""
    from memory.contract.tracing import unwrap

    if (session_id is None) == (user is None):
        _err("give a SESSION or --user ID (not both)")
        return EXIT_USAGE
    if agent is not None and user is None:
        _err("--agent goes with --user (a session names its agent)")
        return EXIT_USAGE
    async with open_memory(settings) as m:
        if not isinstance(unwrap(m.provider), Searcher):
            _err(f"the {m.provider.name} provider cannot search")
            return EXIT_FAULT
        if user is not None:
            agent_id = agent or settings.agent.id
            session = await _latest_session(m.engine, user, agent_id)
            if session is None:
                _err(f"no memory of user {user} (agent {agent_id!r}) in {m.where}")
                return EXIT_FAULT
        else:
            session = await _session(m.engine, session_id or "")
            if session is None:
                _err(f"no session {session_id!r} (see `mnemo memory sessions`)")
                return EXIT_FAULT
        query = SearchQuery(text=text, limit=limit, mode=SearchMode(mode))
        try:
            hits = await cast(Searcher, m.provider).search(session, query)
        except ContractError as exc:
            _err(str(exc))
            return EXIT_FAULT
    for hit in hits:
        snippet = " ".join(hit.content.split())
        where = f" in {hit.session_id}" if hit.session_id else ""
        print(
            terminal_safe(
                f"[{hit.source_type} {hit.source_id}{where}] {_when(hit.timestamp)}  {snippet}"
            ),
            file=out,
        )
    whose = f"user {session.user_id} (agent {session.agent_id})"
    print(f"{len(hits)} result(s) for {terminal_safe(whose)} in {m.where}", file=sys.stderr)
    return EXIT_OK


async def _latest_session(engine: AsyncEngine, user_id: int, agent_id: str) -> Session | None:
    """The user's most recent session: a handle on their memory for the provider."""
    from memory.storage.history import HistoryStore

    options = ListOptions(agent_id=agent_id, user_id=user_id, include_archived=True, limit=1)
    infos = await HistoryStore(engine).list_info(options)
    if not infos:
        return None
    info = infos[0]
    return Session(info.id, info.agent_id, info.user_id, info.channel)


# --- export / import ------------------------------------------------------------------


async def export(settings: Settings, session_id: str, fmt: str, out: TextIO = sys.stdout) -> int:
    from memory.contract.errors import NotFound
    from memory.transfer.session import export_session, render_markdown

    async with open_memory(settings) as m:
        try:
            doc = await export_session(m.engine, session_id, m.provider)
        except NotFound:
            _err(f"no session {session_id!r} (see `mnemo memory sessions`)")
            return EXIT_FAULT
        if fmt == "markdown":
            out.write(render_markdown(doc, m.provider))  # escaped for display
        else:  # lossless: escaped only as JSON escapes
            out.write(json_terminal_safe(json.dumps(doc, indent=2, ensure_ascii=False)) + "\n")
    return EXIT_OK


def _read_document(path: str) -> Any:
    from memory.transfer.schema import read_document  # bounded: a size cap, read in chunks

    if path == "-":
        return read_document(sys.stdin.buffer)
    with Path(path).open("rb") as stream:
        return read_document(stream)


async def import_(settings: Settings, path: str) -> int:
    from memory.transfer.session import import_session

    try:
        doc = await asyncio.to_thread(_read_document, path)
    except OSError as exc:
        _err(f"cannot read {path}: {exc.strerror or exc}")
        return EXIT_FAULT
    except InvalidArgument as exc:
        _err(f"{path} is not a JSON export: {exc}")
        return EXIT_FAULT
    async with open_memory(settings, create=True) as m:
        try:
            report = await import_session(m.engine, doc, m.provider)
        except ContractError as exc:
            _err(f"import refused, nothing was written: {exc}")
            return EXIT_FAULT
    for note in report.notes:
        print(f"note: {terminal_safe(note)}", file=sys.stderr)
    print(
        f"imported session {terminal_safe(report.session_id)} ({report.messages} messages) "
        f"into {m.where}"
    )
    return EXIT_OK


# --- compact --------------------------------------------------------------------------


class StopFlag:
    """Set by the first Ctrl-C of a long command (`stop_on_ctrl_c`); its steps look at
    it before starting the next one."""

    stop = False


class _Steps(StopFlag):
    """The summarizer as the operator's compaction sees it: each call is a step, counted
    for the progress bar; once a stop is asked (Ctrl-C), the next call raises
    StopRequested before it starts, so every finished summary is kept."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0
        self.on_step: Any = None

    async def summarize(self, text: str, opts: SummarizeOptions) -> str:
        if self.stop:
            raise StopRequested("stopped by the operator (Ctrl-C)")
        out = cast(str, await self.inner.summarize(text, opts))
        self.calls += 1
        if self.on_step is not None:
            self.on_step()
        return out


@contextmanager
def stop_on_ctrl_c(steps: StopFlag, what: str) -> Iterator[None]:
    """The first Ctrl-C asks for a stop after the current step (said once on stderr);
    a second one stops at once (KeyboardInterrupt, exit 130)."""
    import signal

    loop = asyncio.get_running_loop()

    def first() -> None:
        steps.stop = True
        loop.remove_signal_handler(signal.SIGINT)
        print(
            f"\nmnemo: stopping after the current {what}; what is done is kept "
            "(Ctrl-C again stops at once)",
            file=sys.stderr,
        )

    try:
        loop.add_signal_handler(signal.SIGINT, first)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)


@dataclass
class _Tally:
    total: CompactionResult = field(default_factory=CompactionResult)
    changed: int = 0
    unchanged: int = 0
    context_unchanged: int = 0  # tokens in the contexts that had nothing to compact
    failed: list[str] = field(default_factory=list)

    def add(self, result: CompactionResult) -> None:
        if not result.changed:
            self.unchanged += 1
            self.context_unchanged += result.tokens_before
            return
        self.changed += 1
        t = self.total
        t.leaf_summaries_created += result.leaf_summaries_created
        t.condensed_summaries_created += result.condensed_summaries_created
        t.messages_compacted += result.messages_compacted
        t.tokens_before += result.tokens_before
        t.tokens_after += result.tokens_after


async def compact(settings: Settings, session_id: str | None, everything: bool) -> int:
    from memory.contract.tracing import unwrap
    from memory.storage.history import HistoryStore

    if bool(session_id) == everything:
        _err("give one SESSION or --all")
        return EXIT_USAGE
    from bot.model.client import MissingApiKey, require_api_key

    try:
        require_api_key(settings.llm)  # summaries need the model: say so before starting
    except MissingApiKey as exc:
        _err(str(exc))
        return EXIT_USAGE
    steps: list[_Steps] = []

    def counted(summarizer: Any) -> Any:
        steps.append(_Steps(summarizer))
        return steps[0]

    started = time.monotonic()
    async with open_memory(settings, with_llm=True, wrap_summarizer=counted) as m:
        counter = steps[0]
        inner = unwrap(m.provider)
        if not isinstance(inner, Compactor):
            _err(f"the {m.provider.name} provider does not compact")
            return EXIT_FAULT
        if everything:
            infos = await HistoryStore(m.engine).list_info(ListOptions(include_archived=True))
            targets = [Session(i.id, i.agent_id, i.user_id, i.channel) for i in reversed(infos)]
        else:
            one = await _session(m.engine, session_id or "")
            if one is None:
                _err(f"no session {session_id!r}")
                return EXIT_FAULT
            targets = [one]
        # Progress counts summarizer calls when the provider can estimate them (lcm: a
        # 4,000-message session is hundreds of calls, not "0/1"); else sessions.
        estimator = inner if isinstance(inner, CompactionEstimator) else None
        by_calls = estimator is not None
        if estimator is not None:
            estimate = sum([await estimator.compaction_calls(t) for t in targets])
            bar = ProgressBar(estimate, unit="summaries")
        else:
            bar = ProgressBar(len(targets), unit="sessions")
        label = [""]
        if by_calls:
            counter.on_step = lambda: bar.show(counter.calls, label[0])
        tally, stopped, done = _Tally(), False, 0
        bar.show(0)
        with stop_on_ctrl_c(counter, "summary"):
            for session in targets:
                if counter.stop:
                    stopped = True
                    break
                label[0] = terminal_safe(session.id)
                result, stopped = await _compact_one(m, session, tally)
                if result is None and stopped:
                    break
                done += 1
                if not by_calls:
                    bar.show(done, label[0])
                if stopped:
                    break
        bar.close()
        where = m.where
    _compact_report(tally, len(targets), done, counter.calls, time.monotonic() - started, where)
    if stopped:
        t = tally.total
        _err(
            f"stopped by Ctrl-C: kept {t.leaf_summaries_created + t.condensed_summaries_created} "
            f"summaries of {t.messages_compacted} messages; {len(targets) - done} session(s) "
            "not started. Run the same command again to continue where it stopped."
        )
        return EXIT_INTERRUPTED
    return EXIT_FAULT if tally.failed else EXIT_OK


async def _compact_one(
    m: Opened, session: Session, tally: _Tally
) -> tuple[CompactionResult | None, bool]:
    """One session's full compaction, counted in `tally`: (what it did, None if nothing;
    whether the operator's stop ended it)."""
    from bot.runtime.metrics import record_compaction, record_compaction_failure
    from memory.contract.context import with_change_source
    from memory.contract.types import ChangeSource

    name, full = m.provider.name, CompactionMode.FULL
    stopped = False
    result: CompactionResult | None = None
    try:
        with with_change_source(ChangeSource.SYSTEM):
            result = await cast(Compactor, m.provider).compact(session, full)
    except StopRequested:  # asked before its first summary: unchanged
        return None, True
    except CompactionIncomplete as exc:  # its finished summaries are kept
        result = exc.result
        stopped = isinstance(exc.__cause__, StopRequested)
        if not stopped:
            record_compaction_failure(name, full)
            tally.failed.append(
                f"compaction stopped part way (progress kept): {session.id}: "
                f"{type(exc.__cause__).__name__}: {exc.__cause__}"
            )
    except Exception as exc:  # one broken session must not stop the others
        record_compaction_failure(name, full)
        tally.failed.append(
            f"compaction failed (session unchanged): {session.id}: {type(exc).__name__}: {exc}"
        )
    else:
        record_compaction(name, full, result)
    if result is not None:
        tally.add(result)
    return result, stopped


def _compact_report(
    tally: _Tally, sessions: int, done: int, calls: int, elapsed: float, where: str
) -> None:
    t = tally.total
    if tally.changed:
        print(
            f"compacted {tally.changed}/{sessions} session(s) in {where}: "
            f"{t.messages_compacted} messages into {t.leaf_summaries_created} leaf and "
            f"{t.condensed_summaries_created} condensed summaries ({calls} summarizer "
            f"calls), context {t.tokens_before} -> {t.tokens_after} tokens in {elapsed:.1f}s"
        )
    if tally.unchanged:
        # Not "0 -> 0 tokens": say how big those contexts are, and why they stay.
        print(
            f"nothing to compact in {tally.unchanged} session(s)"
            + (f" in {where}" if not tally.changed else "")
            + f" (context {tally.context_unchanged} tokens, all of it in the newest "
            "messages, which compaction keeps as they are, or too few older ones yet)"
        )
    for line in tally.failed:
        _err(line)


# --- doctor ---------------------------------------------------------------------------


async def doctor(settings: Settings, out: TextIO | None = None) -> int:
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
        waiting, unreadable = await telegram_backlog(m.engine)
        from bot.ops.embeddings import embeddings_report

        embedding_lines = await embeddings_report(settings, m)
        from bot.ops.usage import guard_report

        embedding_lines += await guard_report(settings, m.engine)
    for fault in faults:
        print(f"FAULT {terminal_safe(str(fault))}", file=out)
    code = EXIT_OK
    if faults:
        codes = sorted({f.code for f in faults})
        _err(f"doctor found {len(faults)} fault(s) in {m.where}: {', '.join(codes)}")
        code = EXIT_FAULT
    else:
        print(f"ok: no faults in {m.where} ({', '.join(checked)} checked)", file=out)
    if waiting:
        print(f"note: {waiting}; the bot handles them when it (re)starts", file=out)
    if unreadable:
        print(
            f"note: {unreadable} parked Telegram update(s) could not be read and are not "
            "handled; kept in telegram_inbox (unreadable) for inspection "
            "(docs/RELIABILITY.md)",
            file=out,
        )
    for line in embedding_lines:
        print(line, file=out)
    return code


async def telegram_backlog(engine: AsyncEngine) -> tuple[str, int]:
    """What the Telegram channel left for its next start (not a fault: a stop or crash
    mid-turn leaves it, by design): parked updates and answers owed; and how many parked
    updates could not be read (never handled, kept for an operator to look at)."""
    from bot.channels.telegram.delivery.handled import owed_since, telegram_updates
    from bot.channels.telegram.delivery.inbox import telegram_inbox
    from bot.channels.telegram.delivery.resume import RESUME_WITHIN

    async with engine.connect() as conn:
        counts: dict[bool, int] = dict(
            (
                await conn.execute(
                    sa.select(telegram_inbox.c.unreadable, sa.func.count()).group_by(
                        telegram_inbox.c.unreadable
                    )
                )
            ).all()
        )
        parked, unreadable = counts.get(False, 0), counts.get(True, 0)
        owed = await conn.scalar(
            sa.select(sa.func.count())
            .select_from(telegram_updates)
            .where(owed_since(utcnow() - RESUME_WITHIN))
        )
    parts = []
    if parked:
        parts.append(f"{parked} Telegram update(s) parked")
    if owed:
        parts.append(f"{owed} message(s) possibly owed an answer")
    return " and ".join(parts), unreadable


# --- backup ---------------------------------------------------------------------------


def pg_dump_command(url: str, path: str) -> str:
    """The documented PostgreSQL backup: a custom-format pg_dump of the same database
    (the password, if any, is left to PGPASSWORD or ~/.pgpass, never printed)."""
    u = make_url(url)
    bare = URL.create(
        "postgresql",
        username=u.username,
        host=u.host,
        port=u.port,
        database=u.database,
        query=u.query,
    )
    # Quoted for a POSIX shell: the path is the operator's, the URL may hold `&` or `?`.
    target = bare.render_as_string(hide_password=False).replace("'", "'\\''")
    return f"pg_dump --format=custom --no-owner --file {shlex.quote(path)} '{target}'"


def backup(settings: Settings, path: str) -> int:
    url = make_url(settings.database.url)
    if url.get_backend_name() != "sqlite":
        _err("PostgreSQL is backed up with its own tools; run (see docs/OPERATIONS.md):")
        print(pg_dump_command(settings.database.url, path))
        return EXIT_FAULT
    source = url.database
    if not source or source == ":memory:" or not Path(source).exists():
        _err(f"no SQLite database at {source!r}")
        return EXIT_FAULT
    target = Path(path)
    if target.exists():
        _err(f"{target} exists; choose a new path (a backup never overwrites)")
        return EXIT_FAULT
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    started = time.monotonic()
    try:
        # sqlite3's online backup copies a consistent snapshot page by page while the
        # bot keeps writing (WAL); the copy appears under its name only when complete.
        src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
        dst = sqlite3.connect(partial)
        try:
            src.backup(dst, pages=1024)
            ok = dst.execute("PRAGMA integrity_check").fetchone()[0]
            dst.execute("PRAGMA journal_mode=DELETE")  # a single self-contained file
        finally:
            dst.close()
            src.close()
        if ok != "ok":
            raise sqlite3.DatabaseError(f"integrity check of the copy failed: {ok}")
        os.replace(partial, target)
    except (sqlite3.Error, OSError) as exc:
        partial.unlink(missing_ok=True)
        _err(f"backup failed, nothing written to {target}: {exc}")
        return EXIT_FAULT
    except KeyboardInterrupt:  # Ctrl-C: no half-written copy left behind
        partial.unlink(missing_ok=True)
        raise
    size = target.stat().st_size
    print(f"backed up {source} to {target} ({size} bytes, {time.monotonic() - started:.1f}s)")
    return EXIT_OK
