"""`mnemo memory search`: one user's memory, through the provider's search."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO, cast

from bot.config.settings import Settings
from bot.ops.common import EXIT_FAULT, EXIT_OK, EXIT_USAGE, err, find_session, open_memory, when
from memory.contract.capabilities import Searcher
from memory.contract.errors import ContractError
from memory.contract.types import ListOptions, SearchMode, SearchQuery, Session
from memory.text.display import terminal_safe

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine


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
    since: str | None = None,
    before: str | None = None,
) -> int:
    """One user's memory, every conversation of theirs (the provider's search covers the
    user): given by `user` (and `agent`), or by one of their sessions."""
    from memory.actions.arguments import parse_date
    from memory.contract.tracing import unwrap

    dates = {}
    for name, raw in (("since", since), ("before", before)):
        dates[name] = None if raw is None else parse_date(raw)
        if raw is not None and dates[name] is None:
            err(f"--{name} must be a date: YYYY-MM-DD, an ISO date and time, or 7d / 2w")
            return EXIT_USAGE
    if (session_id is None) == (user is None):
        err("give a SESSION or --user ID (not both)")
        return EXIT_USAGE
    if agent is not None and user is None:
        err("--agent goes with --user (a session names its agent)")
        return EXIT_USAGE
    async with open_memory(settings) as m:
        if not isinstance(unwrap(m.provider), Searcher):
            err(f"the {m.provider.name} provider cannot search")
            return EXIT_FAULT
        if user is not None:
            agent_id = agent or settings.agent.id
            session = await _latest_session(m.engine, user, agent_id)
            if session is None:
                err(f"no memory of user {user} (agent {agent_id!r}) in {m.where}")
                return EXIT_FAULT
        else:
            session = await find_session(m.engine, session_id or "")
            if session is None:
                err(f"no session {session_id!r} (see `mnemo memory sessions`)")
                return EXIT_FAULT
        query = SearchQuery(
            text=text,
            limit=limit,
            mode=SearchMode(mode),
            since=dates["since"],
            before=dates["before"],
        )
        try:
            hits = await cast(Searcher, m.provider).search(session, query)
        except ContractError as exc:
            err(str(exc))
            return EXIT_FAULT
    for hit in hits:
        snippet = " ".join(hit.content.split())
        where = f" in {hit.session_id}" if hit.session_id else ""
        print(
            terminal_safe(
                f"[{hit.source_type} {hit.source_id}{where}] {when(hit.timestamp)}  {snippet}"
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
