"""What an operator can do to memory from the console, beside rolling back: edit a
user's profile or soul, forget a message or a summary's messages (the preview and
rebuild of `/memory forget`), erase a user's memory, download a conversation's export.

Each change is two POSTs through the guard (CSRF checked): the form, answered by a page
showing exactly what will change, then its confirmation. The confirmation carries a
digest of what the page showed as "now", and is refused if the memory moved since (a
reflect run, the user's own `/memory`, another operator): a button acts only on what it
was shown for. Writes go through the provider with source `operator` and the session
column `web:<name>`, and move the user's snapshots as a rollback does. Viewers get the
pages, never the buttons, and a refusal if they post anyway.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bot.web import reads
from bot.web.auth import FORM, LOGIN
from bot.web.diff import line_diff
from bot.web.params import page_url
from memory.contract.errors import ContractError, NotFound
from memory.contract.types import Owner

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from bot.config.settings import Settings
    from bot.web.offload import Offload
    from memory.contract.capabilities import Provider

log = logging.getLogger(__name__)

# Texts edited whole; rules are a list, each added or removed on its own (one atomic
# store write each: an edited rule would be two, a removal and an addition).
EDITABLE = ("profile", "soul")
MAX_RULE_CHARS = 2000


def digest(text: str) -> str:
    """What a confirmation names the text it was shown: the first 16 hex of its SHA-256."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class Acting:
    """The console's handlers that change memory (mixed into `Console`)."""

    settings: Settings
    engine: AsyncEngine
    provider: Provider
    offload: Offload

    # Provided by Console.
    async def _page(
        self, request: web.Request, template: str, *, status: int = 200, **values: Any
    ) -> web.Response:
        raise NotImplementedError

    def _error(
        self, request: web.Request, status: int, message: str, *, title: str = "Refused"
    ) -> web.Response:
        raise NotImplementedError

    def _owner(self, request: web.Request) -> tuple[int, str, str]:
        raise NotImplementedError

    def install_acting(self, r: web.UrlDispatcher) -> None:
        r.add_get("/memory/{uid}/edit", self.edit_form)
        r.add_post("/memory/{uid}/edit", self.edit)
        r.add_get("/memory/{uid}/rule", self.rule_form)
        r.add_post("/memory/{uid}/rule", self.rule)
        r.add_get("/memory/{uid}/erase", self.erase_form)
        r.add_post("/memory/{uid}/erase", self.erase)
        r.add_get("/sessions/{sid}/export.json", self.export)
        r.add_get("/sessions/{sid}/forget", self.forget_form)
        r.add_post("/sessions/{sid}/forget", self.forget)

    def _operator(self, request: web.Request, what: str) -> str:
        """The operator's name; a viewer is refused (403, framed by the guard)."""
        login = request[LOGIN]
        assert login is not None  # the guard lets no anonymous request reach a page
        if not login.can_write:
            log.warning("web console: viewer %s tried to %s", login.name, what)
            raise web.HTTPForbidden(text=f"Refused: a viewer cannot {what} (an operator can).")
        return login.name

    # -- edit a profile or soul ------------------------------------------------------

    async def edit_form(self, request: web.Request) -> web.Response:
        uid, agent, scope = self._owner(request)
        if scope not in EDITABLE:
            raise web.HTTPBadRequest(text="only a profile or a soul is edited here")
        hist = await reads.memory_history(self.provider, uid, agent, scope)
        return await self._page(
            request, "edit.html", hist=hist, text=hist.current_text, shown=digest(hist.current_text)
        )

    async def edit(self, request: web.Request) -> web.StreamResponse:
        who = self._operator(request, "edit memory")
        uid, agent, _ = self._owner(request)
        form = request[FORM]
        scope, text = str(form.get("scope", "")), str(form.get("text", "")).replace("\r\n", "\n")
        if scope not in EDITABLE:
            raise web.HTTPBadRequest(text="only a profile or a soul is edited here")
        hist = await reads.memory_history(self.provider, uid, agent, scope)
        if form.get("shown") != digest(hist.current_text):
            return self._error(
                request,
                409,
                f"The {scope} changed since you opened it (a reflect run, the user or another "
                "operator): nothing was written. Open it again to see the new text.",
                title="Changed meanwhile",
            )
        if form.get("confirm") != "yes":  # the first POST: show what would change
            return await self._page(
                request,
                "edit.html",
                hist=hist,
                text=text,
                shown=digest(hist.current_text),
                diff=await self.offload.run(line_diff, hist.current_text, text),
            )
        try:
            new = await reads.write_text(self.provider, self.engine, uid, agent, scope, text, who)
        except ContractError as exc:
            return self._error(request, 400, f"Edit refused: {exc}")
        log.info("web console: %s edited the %s of user %s (agent %s)", who, scope, uid, agent)
        raise web.HTTPSeeOther(
            page_url(f"/memory/{uid}", {"agent": agent, "scope": scope}, saved=new)
        )

    # -- add or remove a rule -----------------------------------------------------------

    async def _rules(self, uid: int, agent: str) -> tuple[Any, str]:
        hist = await reads.memory_history(self.provider, uid, agent, "constraint")
        return hist, digest(hist.current_text)

    async def rule_form(self, request: web.Request) -> web.Response:
        uid, agent, _ = self._owner(request)
        hist, shown = await self._rules(uid, agent)
        remove = request.query.get("remove", "")[:64]
        rule = reads.rule_text(hist, remove) if remove else ""
        if remove and rule is None:
            raise web.HTTPNotFound(text="no such rule (removed meanwhile?)")
        return await self._page(
            request, "rule.html", hist=hist, shown=shown, add="", remove=remove, rule=rule
        )

    async def rule(self, request: web.Request) -> web.StreamResponse:
        who = self._operator(request, "change rules")
        uid, agent, _ = self._owner(request)
        form = request[FORM]
        add = " ".join(str(form.get("add", "")).split())[:MAX_RULE_CHARS]
        remove = str(form.get("remove", ""))[:64]
        hist, shown = await self._rules(uid, agent)
        if form.get("shown") != shown:
            return self._error(
                request,
                409,
                "The rules changed since you opened them (a reflect run, the user or another "
                "operator): nothing was written. Open them again.",
                title="Changed meanwhile",
            )
        rule = reads.rule_text(hist, remove) if remove else add
        if not rule:
            raise web.HTTPBadRequest(text="write the rule to add, or name one to remove")
        if form.get("confirm") != "yes":  # the first POST: show what would change
            return await self._page(
                request, "rule.html", hist=hist, shown=shown, add=add, remove=remove, rule=rule
            )
        try:
            new = await reads.write_rule(
                self.provider, self.engine, uid, agent, add=add, remove=remove, operator=who
            )
        except ContractError as exc:
            return self._error(request, 400, f"Refused: {exc}")
        log.info("web console: %s changed the rules of user %s (agent %s)", who, uid, agent)
        raise web.HTTPSeeOther(
            page_url(f"/memory/{uid}", {"agent": agent, "scope": "constraint"}, saved=new)
        )

    # -- forget a message, or what a summary was made of ---------------------------

    async def _preview(self, request: web.Request, item: str) -> tuple[Any, Any]:
        try:
            info = await reads.session_info(self.engine, request.match_info["sid"])
        except NotFound:
            raise web.HTTPNotFound(text="no such session") from None
        if not (item.isdigit() or item.startswith("sum_")):
            raise web.HTTPBadRequest(text="name a message id or a summary id to forget")
        try:
            return info, await reads.forget_preview(self.provider, info, item)
        except ContractError as exc:
            raise web.HTTPBadRequest(text=f"nothing to forget: {exc}") from None

    async def forget_form(self, request: web.Request) -> web.Response:
        item = request.query.get("item", "").strip()[:64]
        info, preview = await self._preview(request, item)
        return await self._page(
            request,
            "forget.html",
            info=info,
            item=item,
            preview=preview,
            shown=digest(",".join(map(str, preview.ids))),
            done=None,
        )

    async def forget(self, request: web.Request) -> web.StreamResponse:
        who = self._operator(request, "forget")
        form = request[FORM]
        item = str(form.get("item", "")).strip()[:64]
        info, preview = await self._preview(request, item)
        if form.get("confirm") != "yes" or form.get("shown") != digest(
            ",".join(map(str, preview.ids))
        ):
            return self._error(
                request,
                409,
                "What this would forget changed since the preview was drawn (or the form was "
                "not confirmed): nothing was forgotten. Open the preview again.",
                title="Changed meanwhile",
            )
        report = await reads.forget(self.provider, preview, who)
        log.info("web console: %s forgot %d message(s) of %s", who, report.messages, info.id)
        return await self._page(
            request, "forget.html", info=info, item=item, preview=preview, shown="", done=report
        )

    # -- erase a user's memory -------------------------------------------------------

    async def erase_form(self, request: web.Request) -> web.Response:
        uid, agent, _ = self._owner(request)
        plan = await reads.erasure_plan(self.engine, uid, agent)
        return await self._page(request, "erase.html", uid=uid, agent=agent, plan=plan, done=None)

    async def erase(self, request: web.Request) -> web.StreamResponse:
        who = self._operator(request, "erase memory")
        uid, agent, _ = self._owner(request)
        form = request[FORM]
        plan = await reads.erasure_plan(self.engine, uid, agent)
        if form.get("confirm") != "yes" or form.get("shown") != plan.digest:
            return self._error(
                request,
                409,
                "The memory changed since the confirmation page was drawn (or the form was "
                "not confirmed): nothing was erased. Open the page again.",
                title="Changed meanwhile",
            )
        report = await reads.erase(self.provider, Owner(uid, agent), f"an operator (web:{who})")
        log.info("web console: %s erased user %s (agent %s)", who, uid, agent)
        return await self._page(request, "erase.html", uid=uid, agent=agent, plan=plan, done=report)

    # -- download an export ------------------------------------------------------------

    async def export(self, request: web.Request) -> web.StreamResponse:
        who = self._operator(request, "download an export")
        sid = request.match_info["sid"]
        try:
            doc = await reads.export(self.engine, self.provider, sid)
        except NotFound:
            raise web.HTTPNotFound(text="no such session") from None
        log.info("web console: %s downloaded the export of %s", who, sid)
        body = json.dumps(doc, indent=2, ensure_ascii=False)
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in sid)[:100]
        return web.Response(
            text=body,
            content_type="application/json",
            charset="utf-8",
            headers={"Content-Disposition": f'attachment; filename="mnemo-{name}.json"'},
        )
