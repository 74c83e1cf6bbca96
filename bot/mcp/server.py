"""The per-user MCP endpoint: a person's own memory, read-only, for their other AI tools
(Claude Desktop, any Model Context Protocol client), over Streamable HTTP with the
official `mcp` SDK.

Tools (each the `/memory` sub-command of the same name, run for the token's owner
exactly as if they had typed it in their private chat, so scoping, rendering and usage
are the chat's, written once in memory/actions):
- `search(query)`: hybrid search of every conversation of theirs, hits grouped by
  conversation with dates and ids;
- `show(id)`: a message (digits) or a summary (`sum_...`) found by search;
- `ask(question)`: delegated recall, answered with the message ids and dates it rests
  on; it uses the model, so it counts in the person's usage and is refused over their
  token limit, as in the chat;
- `timeline(topic)`: the dated facts the memory holds about them (what was true when,
  what replaced what), each with its source message.

Every request carries `Authorization: Bearer <token>` (`bot.mcp.access`): the SDK's
bearer middleware asks `TokenVerifier` (unknown, revoked or expired: 401 before any
tool runs), each tool call is then counted against `mcp.requests_per_minute` and
recorded. Nothing in a request names whose memory it reads: only the token does, so no
argument can reach another person's memory; an id of theirs answers "Not found." as in
the chat.

Served on its own port (`mcp.listen`, `mcp.port`) by uvicorn in the bot's event loop:
the SDK's transport is an ASGI (Starlette) application while the health server is
aiohttp, and a separate port lets an operator publish this endpoint (behind TLS) while
`/metrics` and the console stay private. Stateless (`stateless_http`): any replica
answers any request, as the tokens and the record are in the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

from bot.mcp.access import PATH, SCOPE, AccessStore, Grant, public_url
from memory.contract.types import Session

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from bot.config.settings import McpSettings

log = logging.getLogger(__name__)

MAX_REPLY = 20_000  # characters a tool answers with (the chat's limit is 4096)
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
# (sub-command words for the token's owner) -> the reply; bot.conversation.commands.handle_command
RunCommand = Callable[[Session, str], Awaitable[str]]


class Verifier:
    """The SDK's `TokenVerifier`: a token's grant, carried to the tools as claims."""

    def __init__(self, store: AccessStore) -> None:
        self.store = store

    async def verify_token(self, token: str) -> AccessToken | None:
        grant = await self.store.verify(token)
        if grant is None:  # the SDK answers 401; the token is never logged
            log.info("refused an MCP request: unknown, revoked or expired token")
            return None
        return AccessToken(
            token="",  # never kept past the check
            client_id=grant.token_id,
            scopes=[grant.scope],
            expires_at=int(grant.expires_at.timestamp()),
            subject=str(grant.user_id),
            claims={"agent_id": grant.agent_id, "channel": grant.channel},
        )


def _grant() -> Grant:
    token = get_access_token()
    if token is None or token.claims is None or SCOPE not in token.scopes:
        raise ToolError("not authorized")  # the middleware lets no such request through
    from datetime import UTC, datetime

    return Grant(
        token.client_id,
        int(token.subject or 0),
        str(token.claims["agent_id"]),
        str(token.claims["channel"]),
        SCOPE,
        datetime.fromtimestamp(token.expires_at or 0, UTC),
    )


def build_server(
    store: AccessStore, run: RunCommand, settings: McpSettings, public_url: str
) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer(
        name="mnemo",
        instructions=(
            "The user's own long-term memory of their conversations with a mnemo bot, "
            "read-only. search finds messages and summaries (with dates and ids), show "
            "reads one by id, ask answers a question citing the messages it rests on."
        ),
        token_verifier=Verifier(store),
        auth=AuthSettings(
            issuer_url=public_url,  # type: ignore[arg-type]
            resource_server_url=public_url,  # type: ignore[arg-type]
            required_scopes=[SCOPE],
            # The tokens are this bot's own, issued for this endpoint only: no audience
            # to check (that is for tokens of an outside authorization server).
            validate_token_resource=False,
        ),
    )

    async def call(tool: str, words: str) -> str:
        grant = _grant()
        if not await store.admit(grant, tool, settings.requests_per_minute):
            raise ToolError(
                f"rate limited: at most {settings.requests_per_minute} requests a minute"
            )
        session = Session(
            f"{grant.agent_id}:{grant.channel}:{grant.user_id}",
            grant.agent_id,
            grant.user_id,
            grant.channel,
        )
        started = time.monotonic()
        answer = await run(session, words)
        log.info(
            "mcp %s for user %s (token %s) in %.1fs",
            tool,
            grant.user_id,
            grant.token_id,
            time.monotonic() - started,
        )
        return answer

    @server.tool(
        name="search",
        description=(
            "Search everything the user's memory holds of their conversations (keywords "
            "and meaning). Hits are grouped by conversation, each with its id and date."
        ),
        annotations=READ_ONLY,
    )
    async def search(query: str) -> str:
        query = query.strip()
        if not query:
            raise ToolError("query: expected some words to search for")
        return await call("search", f"search {query}")

    @server.tool(
        name="show",
        description=(
            "Read one message (its numeric id) or one summary (its id) found by search, "
            "with its date and where a summary sits."
        ),
        annotations=READ_ONLY,
    )
    async def show(id: str) -> str:
        id = id.strip()
        if not id or any(c.isspace() for c in id) or len(id) > 64:
            raise ToolError("id: expected one message or summary id, as search gave it")
        return await call("show", f"show {id}")

    @server.tool(
        name="ask",
        description=(
            "Ask a question about the user's past conversations: a model searches and "
            "reads their memory and answers briefly, citing the message ids and dates it "
            "rests on. Uses the user's model budget."
        ),
        annotations=READ_ONLY,
    )
    async def ask(question: str) -> str:
        question = question.strip()
        if not question:
            raise ToolError("question: expected a question")
        return await call("ask", f"ask {question}")

    @server.tool(
        name="timeline",
        description=(
            "The facts the user's memory holds about them by the date each became true "
            "(and stopped: superseded or retracted), each with the message it rests on. "
            "Give a topic (a word of a key or value) to keep to it, or nothing for all."
        ),
        annotations=READ_ONLY,
    )
    async def timeline(topic: str = "") -> str:
        topic = " ".join(topic.split())[:100]
        return await call("timeline", f"timeline {topic}".strip())

    return server


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # SIGINT and SIGTERM are the root's (bot.app.root): it stops this server


class McpEndpoint:
    """The endpoint served by uvicorn on `mcp.listen:mcp.port`; `start()` / `stop()`.
    Port 0 picks a free port; `port` tells which after `start()`."""

    def __init__(self, store: AccessStore, run: RunCommand, settings: McpSettings) -> None:
        self.settings = settings
        self.port = settings.port
        self.server = build_server(store, run, settings, public_url(settings))
        self._uvicorn: Any = None
        self._task: asyncio.Task[None] | None = None

    def app(self) -> Starlette:
        return self.server.streamable_http_app(
            streamable_http_path=PATH,
            stateless_http=True,
            json_response=True,
            host=self.settings.listen,
        )

    async def start(self) -> None:
        config = uvicorn.Config(
            self.app(),
            host=self.settings.listen,
            port=self.settings.port,
            log_level="warning",
            access_log=False,  # tokens travel in headers only, but access is recorded in the DB
            lifespan="on",
        )
        server = self._uvicorn = _Server(config)
        self._task = asyncio.create_task(server.serve(), name="mcp-endpoint")
        while not server.started:
            if self._task.done():
                self._task.result()  # its error (the port taken, say)
                raise RuntimeError("the MCP endpoint stopped while starting")
            await asyncio.sleep(0.01)
        sockets = [s for srv in server.servers for s in srv.sockets]
        self.port = sockets[0].getsockname()[1]
        log.info("MCP endpoint on http://%s:%s%s", self.settings.listen, self.port, PATH)

    async def stop(self) -> None:
        if self._uvicorn is not None and self._task is not None:
            self._uvicorn.should_exit = True
            await asyncio.gather(self._task, return_exceptions=True)
