"""The facts of a user's memory in the console: each current fact with when it became
true and the messages it rests on, every earlier one with its interval, and for an
operator setting or retracting one.

A change is two POSTs as every console change is (acting.py): the form, answered by a
page naming the fact, then its confirmation, which carries a digest of the facts the
page showed and is refused when they moved since. Writes are `apply_facts` with source
`operator` and the session column `web:<name>`, and move the user's snapshots.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiohttp import web

from bot.web import reads
from bot.web.acting import Acting, digest
from bot.web.auth import FORM
from bot.web.params import page_url
from memory.contract.errors import ContractError
from memory.contract.facts import FactOpKind

if TYPE_CHECKING:
    from memory.contract.facts import Fact

log = logging.getLogger(__name__)

OPS = (FactOpKind.SET, FactOpKind.RETRACT)


def shown_digest(current: list[Fact]) -> str:
    """What a confirmation names the facts it was drawn over: ids and values."""
    return digest("\n".join(f"{f.id}\t{f.key}\t{f.value}" for f in current))


class FactPages(Acting):
    """The console's fact pages (mixed into `Console` with `Acting`, whose page helpers
    and operator check they use)."""

    def install_facts(self, r: web.UrlDispatcher) -> None:
        r.add_get("/memory/{uid}/facts", self.facts)
        r.add_post("/memory/{uid}/facts", self.change_fact)

    async def facts(self, request: web.Request) -> web.Response:
        uid, agent, _ = self._owner(request)
        topic = request.query.get("topic", "").strip()[:100]
        view = await reads.fact_view(self.provider, self.engine, uid, agent, topic)
        op, key = request.query.get("op", ""), request.query.get("key", "")[:64]
        return await self._page(
            request,
            "facts.html",
            view=view,
            view_uid=uid,
            view_agent=agent,
            topic=topic,
            shown=shown_digest(view.current),
            op=op if op in OPS else "",
            key=key,
            value="",
            confirming=False,
            saved=request.query.get("saved", "")[:20],
        )

    async def change_fact(self, request: web.Request) -> web.StreamResponse:
        who = self._operator(request, "change facts")
        uid, agent, _ = self._owner(request)
        form = request[FORM]
        op = str(form.get("op", ""))
        key = " ".join(str(form.get("key", "")).split())[:64]
        value = " ".join(str(form.get("value", "")).split())[:500]
        if op not in OPS or not key or (op == FactOpKind.SET and not value):
            raise web.HTTPBadRequest(text="name the fact's key (and its value, to set it)")
        view = await reads.fact_view(self.provider, self.engine, uid, agent, "")
        shown = shown_digest(view.current)
        if form.get("shown") != shown:
            return self._error(
                request,
                409,
                "The facts changed since you opened them (a reflect run, the user or another "
                "operator): nothing was written. Open them again.",
                title="Changed meanwhile",
            )
        if form.get("confirm") != "yes":  # the first POST: name what would change
            return await self._page(
                request,
                "facts.html",
                view=view,
                view_uid=uid,
                view_agent=agent,
                topic="",
                shown=shown,
                op=op,
                key=key,
                value=value,
                confirming=True,
                saved="",
            )
        try:
            version = await reads.write_fact(
                self.provider, self.engine, uid, agent, op=op, key=key, value=value, operator=who
            )
        except ContractError as exc:
            return self._error(request, 400, f"Refused: {exc}")
        log.info("web console: %s %s a fact of user %s (agent %s)", who, op, uid, agent)
        raise web.HTTPSeeOther(page_url(f"/memory/{uid}/facts", {"agent": agent}, saved=version))
