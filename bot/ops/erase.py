"""`mnemo memory erase`: an operator's erasure of one user's memory (`--user ID
[--agent ID]`) or retention by hand (`--older-than 90d`), each with `--dry-run` to see
what would go. Both run the path `/memory forget` runs (memory/storage/forgetting.py).
`--scrub` (alone, or after either) makes every forget so far reach the disk now
(memory/storage/disk_scrub.py: VACUUM FULL and the WAL on PostgreSQL)."""

from __future__ import annotations

import sys
from typing import TextIO

from bot.app.services import register_erasure_hooks
from bot.config.settings import Settings, parse_duration
from bot.jobs.retention import run_retention
from bot.ops.common import EXIT_FAULT, EXIT_OK, EXIT_USAGE, err, open_memory, when
from memory.contract.capabilities import Forgetter
from memory.contract.context import with_change_source
from memory.contract.tracing import unwrap
from memory.contract.types import ChangeSource, utcnow
from memory.storage import forgetting as fg
from memory.storage.forgetting import Owner

DAY_S = 86_400


async def erase(
    settings: Settings,
    user: int | None,
    agent: str | None,
    older_than: str | None,
    dry_run: bool,
    out: TextIO = sys.stdout,
    scrub: bool = False,
) -> int:
    if (user is None) == (older_than is None) and (user is not None or not scrub):
        err("give --user ID or --older-than DURATION (like 90d), and/or --scrub")
        return EXIT_USAGE
    code = EXIT_OK
    if older_than is not None:
        try:
            age_s = parse_duration(older_than)
        except ValueError as exc:
            err(f"--older-than: {exc}")
            return EXIT_USAGE
        code = await _older_than(settings, age_s, dry_run, out)
    elif user is not None:
        code = await _user(settings, Owner(user, agent or settings.agent.id), dry_run, out)
    if scrub and code == EXIT_OK:
        code = await _scrub(settings, dry_run, out)
    return code


async def _scrub(settings: Settings, dry_run: bool, out: TextIO) -> int:
    from memory.storage.disk_scrub import scrub_disk, scrub_tables

    async with open_memory(settings) as m:
        if m.engine.dialect.name != "postgresql":
            if not dry_run:
                await scrub_disk(m.engine)
            verb = "would merge" if dry_run else "merged"
            print(
                f"SQLite: {verb} the search indexes and checkpoint the WAL (every forget "
                "does it too; deleted content is zeroed as it is freed)",
                file=out,
            )
            return EXIT_OK
        if dry_run:
            tables = await scrub_tables(m.engine)
            print(
                f"would rewrite {len(tables)} table(s) with VACUUM FULL, each locked while "
                "it is rewritten, then switch and checkpoint the WAL twice: " + ", ".join(tables),
                file=out,
            )
            return EXIT_OK
        done = await scrub_disk(m.engine)
    print(f"rewrote {len(done.tables)} table(s) with VACUUM FULL", file=out)
    if done.wal_left:
        err(done.wal_left)
    else:
        print("switched and checkpointed the WAL: every older segment is deleted", file=out)
    return EXIT_OK


async def _user(settings: Settings, owner: Owner, dry_run: bool, out: TextIO) -> int:
    register_erasure_hooks()
    async with open_memory(settings) as m:
        if not isinstance(unwrap(m.provider), Forgetter):
            err(f"the {m.provider.name} provider cannot forget")
            return EXIT_FAULT
        sessions, messages = await fg.owner_counts(m.engine, owner)
        who = f"user {owner.user_id} agent {owner.agent_id}"
        if dry_run:
            print(
                f"would erase {who}: {sessions} session(s), {messages} message(s), their "
                "summaries, profile, soul, rules, versions, changelog, snapshots, notes",
                file=out,
            )
            return EXIT_OK
        with with_change_source(ChangeSource.SYSTEM):
            report = await fg.erase(m.provider, owner, "an operator (mnemo memory erase)")
    print(f"erased {who}: {report.describe()}", file=out)
    return EXIT_OK


async def _older_than(settings: Settings, age_s: float, dry_run: bool, out: TextIO) -> int:
    from datetime import timedelta

    cutoff = utcnow() - timedelta(seconds=age_s)
    if dry_run:
        async with open_memory(settings) as m:
            expired = await fg.expired(m.engine, cutoff)
            print(f"messages created before {when(cutoff)} UTC:", file=out)
            for owner, ids in expired.items():
                print(
                    f"  user {owner.user_id} agent {owner.agent_id}: {len(ids)} message(s)",
                    file=out,
                )
            total = sum(len(ids) for ids in expired.values())
            print(
                f"would forget {total} message(s) of {len(expired)} owner(s), rebuilding the "
                "summaries built on them",
                file=out,
            )
        return EXIT_OK
    from bot.model.client import MissingApiKey, require_api_key

    try:
        require_api_key(settings.llm)  # rebuilt summaries need the model
    except MissingApiKey as exc:
        err(str(exc))
        return EXIT_USAGE
    async with open_memory(settings, with_llm=True) as m:
        with with_change_source(ChangeSource.SYSTEM):
            run = await run_retention(m.provider, cutoff)
    report = run.report or fg.ForgetReport()
    print(
        f"{fg.changelog_text(report)} (messages before {when(cutoff)} UTC, "
        f"{run.owners} owner(s), {run.failed} failed)",
        file=out,
    )
    return EXIT_FAULT if run.failed else EXIT_OK
