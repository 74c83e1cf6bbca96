"""The reflect job on the bot's parts: the reflector takes its LLM conversation as an
injected callable, and this is where the bot's own tool loop
(`bot.model.tool_loop.run_turn`) is handed to it, so the project has one tool loop.

- `start_reflect(scheduler, services)`: a `bot.app.services.Job`, started by the root
  (`mnemo run`, and `mnemo reflect` as a worker: bot.app.run). The job knows nothing of
  the root: it is given the scheduler and the services.
"""

from __future__ import annotations

from typing import Any

from bot.jobs.reflect import (
    CycleReport,
    ReflectConfig,
    Reflector,
    TurnRunner,
    schedule_reflect,
)
from bot.model.tool_loop import Tool, run_turn
from bot.runtime.metrics import record_reflect_report, record_reflect_run
from memory.contract.types import Message


def reflect_turn_runner(llm: Any, max_rounds: int) -> TurnRunner:
    """`TurnRunner` over the bot's tool loop and LLM client (retries included)."""

    async def run(prompt: list[Message], schema: dict[str, Any], handler: Any) -> str:
        result = await run_turn(llm, prompt, [Tool(schema, handler)], max_rounds=max_rounds)
        return result.text

    return run


class CountedReflector(Reflector):
    """A Reflector whose cycles are counted in the Prometheus metrics (bot.runtime.metrics)."""

    async def run_cycle(self, *, slot: int | None = None) -> CycleReport:
        try:
            report = await super().run_cycle(slot=slot)
        except Exception:
            record_reflect_run("error")
            raise
        record_reflect_report(report)
        return report


def build_reflector(services: Any) -> Reflector:
    """The Reflector of a running app (`bot.app.services.Services`)."""
    settings = services.settings
    budgets = getattr(services, "budgets", None)
    guard = None
    if budgets is not None:

        async def guard(user_id: int) -> bool:
            return await budgets.allow_background("reflect", user_id)

    return CountedReflector(
        services.engine,
        services.provider,
        reflect_turn_runner(services.llm, settings.llm.max_tool_rounds),
        ReflectConfig.from_settings(settings),
        usage=getattr(services, "usage", None),
        guard=guard,
        on_changed=getattr(services.conversations, "reflect_listeners", ()),
    )


def start_reflect(scheduler: Any, services: Any) -> Any | None:
    """Schedule reflect on the application's APScheduler `scheduler`; None (one log
    line) when disabled."""
    return schedule_reflect(scheduler, build_reflector(services))


def render_report(report: CycleReport) -> str:
    lines = [report.summary()]
    for s in report.sessions:
        what = {
            "changed": f"{s.changes} change(s)",
            "unchanged": "no changes",
            "nothing_new": "nothing new",
            "busy": "skipped, being reviewed elsewhere",
            "failed": "FAILED",
            "deferred": "put off by the spend guard (limits.background)",
        }.get(s.status, s.status)
        detail = f": {s.detail}" if s.detail and s.status in ("failed", "changed") else ""
        lines.append(f"  {s.session_id}: {what}{detail}")
    return "\n".join(lines)
