"""The console's aiohttp routes: login, sessions, a conversation, its summary graph,
search, a user's profile/soul/constraints with versions and rollback, the changelog;
what else an operator can change is in bot/web/acting.py.

Every page needs a login (bot/web/auth.py); `viewer`s read, `operator`s may also roll
back. Every POST checks the CSRF token first. Responses carry a CSP without inline
script or style, `nosniff`, no framing, no referrer, no caching. Pages are rendered by
Jinja2 with autoescape on (bot/web/templates/), so stored text never becomes markup.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from aiohttp import web
from markupsafe import Markup
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.config.settings import Settings
from bot.conversation.context_figures import summary_id
from bot.conversation.people import names
from bot.web import charts, reads
from bot.web.auth import FORM, LOGIN, PRE_COOKIE, SESSION_COOKIE, Gate, Login
from bot.web.dag_svg import render as render_dag
from bot.web.diff import line_diff
from bot.web.facts import FactPages
from bot.web.offload import Offload, TooSlow
from bot.web.params import BadInput, check_request, page_url, whole
from bot.web.throttle import LoginThrottle
from memory.contract.capabilities import Provider, Searcher
from memory.contract.errors import ContractError, InvalidArgument, NotFound
from memory.contract.graph import SummaryGraphReader
from memory.contract.tracing import unwrap
from memory.contract.types import (
    ChangeSource,
    ListOptions,
    Scope,
    SearchMode,
    SearchQuery,
    SearchScope,
    utcnow,
)
from memory.storage.forgetting import ERASURE_SCOPE, FORGET_SCOPE
from memory.storage.prices import format_cost, total_cost
from memory.text.tokens import message_tokens

if TYPE_CHECKING:
    from memory.storage.prices import Price
    from memory.storage.usage import ReportRow

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; script-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
}
PUBLIC = {"/login", "/favicon.ico"}  # and /static/
# Past it the OFFSET would overflow BIGINT (and no listing has a billion pages).
MAX_PAGE = 1_000_000_000
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Console(FactPages):  # and so Acting (bot/web/acting.py)
    """The console over one engine and provider; `install(app)` adds its routes."""

    def __init__(self, settings: Settings, engine: AsyncEngine, provider: Provider) -> None:
        self.settings = settings
        self.engine = engine
        self.provider = provider
        self.gate = Gate(settings.web)
        self.throttle = LoginThrottle()
        self.offload = Offload()  # templates, the SVG and diffs: off the bot's event loop
        self.jinja = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.jinja.filters["when"] = _when
        self.jinja.filters["q"] = lambda v: _quote(str(v))
        self.jinja.filters["readable"] = reads.readable_after
        self.jinja.filters["n"] = lambda v: f"{v:,}" if isinstance(v, int) else v

    def install(self, app: web.Application) -> None:
        app.middlewares.append(self._guard)
        r = app.router
        r.add_get("/", self.home)
        r.add_get("/login", self.login_form)
        r.add_post("/login", self.login)
        r.add_post("/logout", self.logout)
        r.add_get("/sessions", self.sessions)
        r.add_get("/sessions/{sid}", self.conversation)
        r.add_get("/sessions/{sid}/graph", self.graph)
        r.add_get("/sessions/{sid}/turn/{mid}", self.turn)
        r.add_get("/search", self.search)
        r.add_get("/memory/{uid}", self.memory)
        r.add_get("/memory/{uid}/rollback", self.rollback_confirm)
        r.add_post("/memory/{uid}/rollback", self.rollback)
        self.install_acting(r)
        self.install_facts(r)
        r.add_get("/changelog", self.changelog)
        r.add_get("/usage", self.usage)
        r.add_static("/static", HERE / "static", show_index=False)

    # -- the guard: headers, login, CSRF ------------------------------------------

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in ("/healthz", "/metrics"):
            return await handler(request)
        started = time.perf_counter()
        try:
            response = await self._checked(request, handler)
        except BadInput as exc:
            response = self._error(request, 400, str(exc))
        except TooSlow:
            log.warning("web console: %s took too long to draw, abandoned", request.path)
            response = self._error(
                request,
                503,
                f"This page took longer than {self.offload.limit_s:g} s to draw and was "
                "abandoned; the bot was not held up. Try again later, or a smaller page.",
                title="Too slow",
            )
        except web.HTTPException as exc:
            if exc.status < 400:  # redirects get the headers too
                for key, value in HEADERS.items():
                    exc.headers.setdefault(key, value)
                raise
            # A refusal is a framed page (with the way back), not aiohttp's bare text.
            response = self._error(request, exc.status, _said(exc), title=exc.reason)
            if "Allow" in exc.headers:  # a 405 still says which methods are
                response.headers["Allow"] = exc.headers["Allow"]
        for key, value in HEADERS.items():
            response.headers.setdefault(key, value)
        # The page's server time, for the browser's dev tools and bench/web_pages.py.
        response.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.1f}"
        return response

    async def _checked(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        login = self.gate.read_session(request.cookies.get(SESSION_COOKIE))
        request[LOGIN] = login
        public = request.path in PUBLIC or request.path.startswith("/static/")
        if login is None and not public:
            if request.method == "GET":
                raise web.HTTPSeeOther("/login")
            raise web.HTTPForbidden(text="log in first")
        check_request(request.path, request.query)
        if request.method == "POST":
            form = await request.post()
            check_request("", form)
            nonce = login.nonce if login else request.cookies.get(PRE_COOKIE)
            if not self.gate.csrf_ok(nonce, form.get("csrf")):
                log.warning("web console: a POST to %s without a valid CSRF token", request.path)
                return self._error(
                    request,
                    403,
                    "Refused: the form's token is missing or stale. Reload the page and try again.",
                )
            request[FORM] = form
        return await handler(request)

    async def _page(
        self, request: web.Request, template: str, *, status: int = 200, **values: Any
    ) -> web.Response:
        """`template` rendered off the event loop, within the time limit (TooSlow)."""
        html = await self.offload.run(self._html, request, template, values)
        return web.Response(text=html, content_type="text/html", charset="utf-8", status=status)

    def _error(
        self, request: web.Request, status: int, message: str, *, title: str = "Refused"
    ) -> web.Response:
        """The (small) error page, drawn on the loop: it must answer when the workers
        are busy, a slow page being one reason for it."""
        html = self._html(request, "error.html", {"message": message, "title": title})
        return web.Response(text=html, content_type="text/html", charset="utf-8", status=status)

    def _html(self, request: web.Request, template: str, values: dict[str, Any]) -> str:
        login: Login | None = request.get(LOGIN)
        nonce = login.nonce if login else values.pop("pre_nonce", "")
        return self.jinja.get_template(template).render(
            login=login,
            csrf=self.gate.csrf_token(nonce) if nonce else "",
            provider=self.provider.name,
            path=request.path,
            **values,
        )

    def _cookie(self, response: web.StreamResponse, name: str, value: str, max_age: int) -> None:
        response.set_cookie(
            name,
            value,
            max_age=max_age,
            httponly=True,
            samesite="Strict",
            secure=self.settings.web.secure_cookies,
            path="/",
        )

    # -- login ---------------------------------------------------------------------

    async def home(self, _request: web.Request) -> web.StreamResponse:
        raise web.HTTPSeeOther("/sessions")

    async def login_form(
        self, request: web.Request, *, error: str = "", status: int = 200
    ) -> web.Response:
        # Kept while the form is open: a second tab (or the browser's favicon request)
        # must not make the first form's token stale.
        nonce = request.cookies.get(PRE_COOKIE, "")
        if not re.fullmatch(r"[0-9a-f]{32}", nonce):
            nonce = secrets.token_hex(16)
        response = await self._page(
            request,
            "login.html",
            status=status,
            pre_nonce=nonce,
            error=error,
            configured=bool(self.settings.web.operators),
        )
        self._cookie(response, PRE_COOKIE, nonce, 3600)
        return response

    async def login(self, request: web.Request) -> web.StreamResponse:
        address = request.remote or "?"
        if self.throttle.throttled(address):
            return await self.login_form(
                request, error="Too many failed logins: wait a few minutes.", status=429
            )
        token = request[FORM].get("token")
        op = self.gate.operator_for(token) if isinstance(token, str) and token.strip() else None
        if op is None:
            self.throttle.failed(address)
            log.warning("web console: failed login from %s", address)
            return await self.login_form(request, error="Unknown token.", status=403)
        log.info("web console: %s (%s) logged in from %s", op.name, op.role, address)
        response = web.HTTPSeeOther("/sessions")
        self._cookie(
            response,
            SESSION_COOKIE,
            self.gate.session_cookie(op),
            int(self.settings.web.session_ttl_s),
        )
        response.del_cookie(PRE_COOKIE, path="/")
        raise response

    async def logout(self, request: web.Request) -> web.StreamResponse:
        response = web.HTTPSeeOther("/login")
        response.del_cookie(SESSION_COOKIE, path="/")
        raise response

    # -- sessions and a conversation ------------------------------------------------

    async def sessions(self, request: web.Request) -> web.Response:
        q = request.query
        page = whole("page", q.get("page"), 1, low=1, high=MAX_PAGE)
        user = whole("user", q.get("user"), None)
        text = q.get("q", "").strip()[:200]
        archived = q.get("archived") == "1"
        order = q.get("order", "recent")
        order = order if order in reads.LIST_ORDERS else "recent"
        opts = ListOptions(
            user_id=user,
            include_archived=archived,
            text=text,
            limit=reads.PAGE + 1,
            offset=(page - 1) * reads.PAGE,
            order=order,
        )
        rows = await reads.list_sessions(self.provider, self.engine, opts)
        total = await reads.count_sessions(self.engine, opts)
        keep = {
            "q": text,
            "user": "" if user is None else str(user),
            "archived": "1" if archived else "",
            "order": order,
        }
        return await self._page(
            request,
            "sessions.html",
            names=await names(self.engine, [r.info.user_id for r in rows]),
            rows=rows[: reads.PAGE],
            page=page,
            pages=max(1, -(-total // reads.PAGE)),
            total=total,
            order=order,
            sort_url=lambda o: page_url("/sessions", {**keep, "order": o}),
            prev_url=page_url("/sessions", keep, page=page - 1) if page > 1 else "",
            next_url=page_url("/sessions", keep, page=page + 1) if len(rows) > reads.PAGE else "",
            q=text,
            user=keep["user"],
            archived=archived,
        )

    async def _session(self, request: web.Request) -> Any:
        try:
            return await reads.session_info(self.engine, request.match_info["sid"])
        except NotFound:
            raise web.HTTPNotFound(text="no such session") from None

    async def conversation(self, request: web.Request) -> web.Response:
        info = await self._session(request)
        session = reads.as_session(info)
        q = request.query
        stats = await self.provider.stats(session)
        context = await reads.assembled_context(self.provider, self.settings, session)
        at = whole("at", q.get("at"), None)
        history = await reads.history_page(
            self.engine, info.id, whole("page", q.get("page"), None, low=1, high=MAX_PAGE), at
        )
        base = f"/sessions/{_quote(info.id)}"
        return await self._page(
            request,
            "conversation.html",
            names=await names(self.engine, [info.user_id]),
            info=info,
            stats=stats,
            context=context,
            context_rows=[(m, message_tokens(m), summary_id(m)) for m in context.history],
            bar=Markup(charts.context_bar(context.figures)),
            history=history,
            at=at,
            base=base,
            page_url=lambda n: page_url(base, {}, page=n),
            has_graph=isinstance(unwrap(self.provider), SummaryGraphReader),
        )

    async def turn(self, request: web.Request) -> web.Response:
        """One stored answer: its memory calls and what they returned, its citations,
        its model calls' tokens and cost, its latency (the chat's `/memory why`)."""
        info = await self._session(request)
        mid = whole("message", request.match_info["mid"], None)
        try:
            view = await reads.turn_view(
                self.provider, self.engine, self.settings, info, mid if mid is not None else -1
            )
        except NotFound:
            raise web.HTTPNotFound(text="no such answer in this session") from None
        return await self._page(
            request, "turn.html", info=info, view=view, base=f"/sessions/{_quote(info.id)}"
        )

    async def graph(self, request: web.Request) -> web.Response:
        info = await self._session(request)
        inner = unwrap(self.provider)
        base = f"/sessions/{_quote(info.id)}"
        if not isinstance(inner, SummaryGraphReader):
            return await self._page(
                request,
                "graph.html",
                info=info,
                base=base,
                graph=None,
                svg="",
                detail=None,
            )
        graph = await inner.summary_graph(info.id)
        selected = request.query.get("node") or None
        detail, sources = None, []
        if selected:
            try:
                detail = await inner.summary_node(info.id, selected)
            except NotFound:
                raise web.HTTPNotFound(text="no such node in this session") from None
            sources = detail.source_message_ids
        svg = ""  # the page shows no drawing of an empty graph
        if graph.nodes:
            svg = await self.offload.run(render_dag, graph, selected, f"{base}/graph?node=")
        depths: dict[int, int] = {}
        for n in graph.nodes:
            depths[n.depth] = depths.get(n.depth, 0) + 1
        return await self._page(
            request,
            "graph.html",
            info=info,
            base=base,
            graph=graph,
            depths=sorted(depths.items(), reverse=True),
            svg=Markup(svg),  # built from escaped parts (dag_svg)
            detail=detail,
            first_source=sources[0] if sources else None,
        )

    # -- search ----------------------------------------------------------------------

    async def search(self, request: web.Request) -> web.Response:
        q = request.query
        sid = q.get("session", "").strip()
        text = q.get("q", "").strip()[:500]
        mode = q.get("mode", SearchMode.FULL_TEXT.value)
        scope = q.get("scope", SearchScope.BOTH.value)
        hits, error, info, note = [], "", None, ""
        if (
            mode not in SearchMode.__members__.values()
            or scope not in SearchScope.__members__.values()
        ):
            error = "Unknown mode or scope."
        elif sid and text:
            info = await reads.session_or_user(self.engine, sid)
            if info is None:
                error = f"No session {sid!r} (nor a user with that id)."
            inner = unwrap(self.provider)
            if info is not None and not isinstance(inner, Searcher):
                error = f"The {self.provider.name} provider cannot search."
            elif info is not None:
                try:
                    hits = await self.provider.search(  # type: ignore[attr-defined]
                        reads.as_session(info),
                        SearchQuery(
                            text=text, scope=SearchScope(scope), limit=50, mode=SearchMode(mode)
                        ),
                    )
                except ContractError as exc:
                    error = str(exc)
                if mode == SearchMode.HYBRID and not getattr(inner, "semantic", None):
                    note = (
                        "Hybrid search needs embeddings, which are off (embeddings.model is "
                        "empty): these results are word search (full_text) alone."
                    )
        return await self._page(
            request,
            "search.html",
            session_id=sid,
            q=text,
            mode=mode,
            scope=scope,
            modes=[m.value for m in SearchMode],
            scopes=[s.value for s in SearchScope],
            hits=hits,
            error=error,
            note=note,
            info=info,
            searched=bool(sid and text),
        )

    # -- memory: versions, diffs, rollback -------------------------------------------

    def _owner(self, request: web.Request) -> tuple[int, str, str]:
        uid = whole("user id", request.match_info["uid"], None)
        if uid is None:
            raise web.HTTPNotFound(text="no such user")
        agent = request.query.get("agent") or self.settings.agent.id
        scope = request.query.get("scope", "profile")
        if scope not in reads.SCOPES:
            raise web.HTTPBadRequest(text="scope must be profile, soul or constraint")
        return uid, agent[:128], scope

    async def memory(self, request: web.Request) -> web.Response:
        uid, agent, scope = self._owner(request)
        hist = await reads.memory_history(self.provider, uid, agent, scope)
        chosen = whole("v", request.query.get("v"), None)
        done = whole("done", request.query.get("done"), None)
        saved = whole("saved", request.query.get("saved"), None)
        selected = next((v for v in hist.versions if v.version == chosen), None) or (
            hist.versions[0] if hist.versions else None
        )
        return await self._page(
            request,
            "memory.html",
            names=await names(self.engine, [uid]),
            hist=hist,
            selected=selected,
            diff=await self.offload.run(line_diff, selected.before, selected.after)
            if selected
            else [],
            scopes=reads.SCOPES,
            done=done,
            saved=saved,
            followups=await reads.followups(self.engine, uid, agent),
        )

    async def rollback_confirm(self, request: web.Request) -> web.Response:
        uid, agent, scope = self._owner(request)
        version = whole("version", request.query.get("version"), None)
        hist = await reads.memory_history(self.provider, uid, agent, scope)
        target = next((v for v in hist.versions if v.version == version), None)
        if target is None:
            raise web.HTTPNotFound(text="no such version")
        return await self._page(
            request,
            "rollback.html",
            hist=hist,
            target=target,
            diff=await self.offload.run(line_diff, hist.current_text, target.after),
        )

    async def rollback(self, request: web.Request) -> web.StreamResponse:
        who = self._operator(request, "roll back")
        uid, agent, _ = self._owner(request)
        form = request[FORM]
        scope = str(form.get("scope", ""))
        version = whole("version", str(form.get("version", "")), None)
        if scope not in reads.SCOPES or version is None or form.get("confirm") != "yes":
            raise web.HTTPBadRequest(text="a rollback needs a scope, a version and a confirmation")
        try:
            new = await reads.rollback(self.provider, self.engine, uid, agent, scope, version, who)
        except (InvalidArgument, NotFound) as exc:
            return self._error(request, 400, f"Rollback refused: {exc}")
        log.info(
            "web console: %s rolled back %s of user %s (agent %s) to version %d as version %d",
            who,
            scope,
            uid,
            agent,
            version,
            new,
        )
        raise web.HTTPSeeOther(
            page_url(f"/memory/{uid}", {"agent": agent, "scope": scope}, done=new)
        )

    # -- changelog -------------------------------------------------------------------

    async def changelog(self, request: web.Request) -> web.Response:
        q = request.query
        f = reads.ChangelogFilter(
            user_id=whole("user", q.get("user"), None),
            scope=q.get("scope", "")[:32],
            source=q.get("source", "")[:32],
            page=whole("page", q.get("page"), 1, low=1, high=MAX_PAGE),
        )
        rows, more = await reads.changelog_page(self.engine, f)
        keep = {
            "user": "" if f.user_id is None else str(f.user_id),
            "scope": f.scope,
            "source": f.source,
        }
        return await self._page(
            request,
            "changelog.html",
            rows=rows,
            f=f,
            keep=keep,
            # reflect: each review's row (bot/jobs/reflect/runs.py); review: the user's
            # keep / revert of reflect's changes (memory/actions/changes.py)
            scopes=[s.value for s in Scope] + [FORGET_SCOPE, ERASURE_SCOPE, "reflect", "review"],
            sources=[s.value for s in ChangeSource],
            prev_url=page_url("/changelog", keep, page=f.page - 1) if f.page > 1 else "",
            next_url=page_url("/changelog", keep, page=f.page + 1) if more else "",
        )

    async def usage(self, request: web.Request) -> web.Response:
        """What model calls cost (`mnemo memory usage`): by kind, user, day or model."""
        from bot.ops.usage import GROUPINGS
        from memory.storage.operator_reads import usage_recorded
        from memory.storage.usage import UsageStore, day_start

        by = request.query.get("by", "kind")
        by = by if by in GROUPINGS else "kind"
        days = whole("days", request.query.get("days"), 30, low=1, high=3660)
        since = day_start(utcnow()) - timedelta(days=days - 1)
        rows, daily = [], []
        if await usage_recorded(self.engine):
            store = UsageStore(self.engine)
            rows = await store.report(by, since)  # type: ignore[arg-type]
            daily = rows if by == "day" else await store.report("day", since)
        prices = self.settings.llm.price_table()
        cost = total_cost(reads.by_model((r.model, r.tokens) for r in rows), prices)
        return await self._page(
            request,
            "usage.html",
            names=await names(
                self.engine,
                [int(r.key) for r in rows if by == "user" and r.key.lstrip("-").isdigit()],
            ),
            rows=[
                (r, format_cost(prices[r.model].cost(r.tokens)) if r.model in prices else "–")
                for r in rows
            ],
            estimated=any(r.tokens.estimated for r in rows),
            by=by,
            days=days,
            since=since,
            groupings=GROUPINGS,
            calls=sum(r.calls for r in rows),
            total=sum(r.tokens.total for r in rows),
            total_cost="–" if cost is None else format_cost(cost),
            chart=Markup(charts.render(_per_day(daily, prices, since, utcnow()))),
        )


def _quote(sid: str) -> str:
    from urllib.parse import quote

    return quote(sid, safe="")


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "–"


def _said(exc: web.HTTPException) -> str:
    """What a refusal says, as a sentence: its own text, or a plain one for aiohttp's
    default ("404: Not Found")."""
    text = (exc.text or "").strip()
    if not text or text.startswith(f"{exc.status}:"):
        return "There is no such page." if exc.status == 404 else f"Refused: {exc.reason}."
    return text[0].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _per_day(
    rows: Sequence[ReportRow], prices: Mapping[str, Price], since: datetime, now: datetime
) -> list[charts.Day]:
    """The usage report by day as one entry per day of the period."""
    by_day: dict[str, list[ReportRow]] = {}
    for r in rows:
        by_day.setdefault(r.key, []).append(r)
    seen = {}
    for key, day_rows in by_day.items():
        day = date.fromisoformat(key[:10])
        cost = total_cost(reads.by_model((r.model, r.tokens) for r in day_rows), prices)
        seen[day] = charts.Day(
            day,
            sum(r.calls for r in day_rows),
            sum(r.tokens.total for r in day_rows),
            "–" if cost is None else format_cost(cost),
        )
    return charts.days_between(since.date(), now.date(), seen)
