"""The commands that run the root: `mnemo run` runs the channels `channels:` names
(`bot.channels.registry`), `mnemo reflect` runs reflect's schedule with no channel (or
one cycle). `mnemo chat` builds its own root with the terminal (bot.cli)."""

from __future__ import annotations

from bot.app.root import Root
from bot.app.services import build_services
from bot.channels.registry import named
from bot.config.settings import Settings
from bot.jobs.reflect.job import build_reflector, render_report


def start_problems(settings: Settings) -> list[str]:
    """What stops `mnemo run` before it starts, one line each, as the configured
    channels declare it (a missing bot token)."""
    return [p for channel in named(settings.channels) if (p := channel.problem(settings))]


async def run_channels(settings: Settings) -> int:
    """`mnemo run`: the root with the configured channels, until SIGINT or SIGTERM (or
    one of them ends); 0 on a clean stop. Raises `bot.channels.base.ChannelRefused`."""
    return await Root(settings, [channel.load() for channel in named(settings.channels)]).run()


async def reflect_command(settings: Settings, once: bool) -> int:
    """`mnemo reflect [--once]`. Exit 1 when a review failed (for cron and alerts)."""
    # `reflect.enabled` is about the schedule (inside `mnemo run` or this worker); an
    # explicit --once still runs, so cron can take over from a disabled in-bot job.
    if not settings.reflect.enabled and not once:
        print(
            "reflect is disabled (reflect.enabled: false): nothing to do; "
            "`mnemo reflect --once` runs one cycle anyway"
        )
        return 0
    if not once:
        return await Root(settings, health=False).run()
    services = await build_services(settings)
    try:
        report = await build_reflector(services).run_cycle()
        print(render_report(report))
        return 1 if report.failed else 0
    finally:
        await services.close()
