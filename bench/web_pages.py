"""The web console's pages over a big database: server time per page.

    .venv/bin/python bench/web_pages.py [--sessions 10000] [--messages 100000]
        [--db sqlite,postgres] [--provider lcm,simple] [--repeat 3] [--append-results]

The database is filled by bench/sessions_listing.py's loader (`--sessions` sessions of six
messages through the provider, every tenth compacted) plus one long session of
`--messages` messages (bench/lcm_bench.py's Zipf vocabulary) appended in batches and compacted as the bot would (lcm: leaf
chunks of 250 and condensed runs of 4, about 500 summaries at 100k messages; simple: a
handoff marker every 10,000 messages). Each page is fetched over HTTP from the console
(served as `mnemo run` serves it) `--repeat` times as a logged-in operator; the figure
is the best server time (the `Server-Timing` header: handler and rendering, not the
network), with the page's size.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402

from bench._common import append_results, machine  # noqa: E402
from bench.lcm_bench import VOCAB, sentence  # noqa: E402
from bench.sessions_listing import populate  # noqa: E402
from bot.config.settings import HealthSettings, Settings  # noqa: E402
from bot.runtime.health import HealthServer  # noqa: E402
from bot.web.auth import hash_token  # noqa: E402
from bot.web.console import Console  # noqa: E402
from memory.contract.options import WriteOptions  # noqa: E402
from memory.contract.types import ChangeSource, CompactionMode, Message, Session  # noqa: E402
from memory.storage.db import create_engine  # noqa: E402
from memory.testing.databases import temp_database_url  # noqa: E402
from tests.web.site import open_provider  # noqa: E402 - the console tests' own

TOKEN = "bench-operator-token"
LONG = Session("bench:long", "default", 42, "telegram")
WORDS = [
    "tea",
    "coffee",
    "aquarium",
    "river",
    "mountain",
    "lamp",
    "violin",
    "garden",
    "harbor",
    "pepper",
]
# Searched: a common word and a rarer one of the Zipf vocabulary the long session speaks.
QUERY, RARE = f"{VOCAB[30]} {VOCAB[300]}", VOCAB[300]


def settings_for(url: str, tmp: Path, provider: str) -> Settings:
    return Settings.model_validate(
        {
            "database": {"url": url},
            "data_dir": str(tmp / "data"),
            "memory": {
                "provider": provider,
                "simple": {"store_dir": str(tmp / "notes")},
                "lcm": {"leaf_chunk_size": 250, "condensed_min": 4},
            },
            "compaction": {"keep_tail": 20},
            "web": {
                "enabled": True,
                "operators": [
                    {"name": "bench", "role": "operator", "token_sha256": hash_token(TOKEN)}
                ],
            },
        }
    )


async def long_session(settings: Settings, tmp: Path, n: int) -> None:
    engine = create_engine(settings.database.url)
    provider = await open_provider(settings, engine, tmp)
    try:
        await provider.bootstrap(LONG)
        batch = 500
        for start in range(0, n, batch):
            await provider.append(
                LONG,
                *(
                    Message("user" if i % 2 == 0 else "assistant", f"{i} {sentence()}")
                    for i in range(start, min(n, start + batch))
                ),
            )
            if settings.memory.provider == "simple" and (start + batch) % 10_000 == 0:
                await provider.compact(LONG, CompactionMode.FULL)  # type: ignore[attr-defined]
        if settings.memory.provider == "lcm":
            await provider.compact(LONG, CompactionMode.FULL)  # type: ignore[attr-defined]
        for v in range(20):  # a profile with history
            await provider.set_profile(  # type: ignore[attr-defined]
                LONG.user_id,
                "default",
                f"Likes {WORDS[v % len(WORDS)]}.\nVersion {v}.",
                WriteOptions(ChangeSource.REFLECT, LONG.id),
            )
        stats = await provider.stats(LONG)
        print(
            f"  long session: {stats.message_count} messages, {stats.summary_count} summaries",
            file=sys.stderr,
        )
    finally:
        await provider.close()
        await engine.dispose()


async def measure(settings: Settings, tmp: Path, repeat: int) -> list[tuple[str, float, int]]:
    engine = create_engine(settings.database.url)
    provider = await open_provider(settings, engine, tmp)
    server = HealthServer(
        engine,
        HealthSettings.model_construct(enabled=False, listen="127.0.0.1", port=0),
        console=Console(settings, engine, provider),
    )
    await server.start()
    base = f"http://127.0.0.1:{server.port}"
    out = []
    try:
        jar = aiohttp.CookieJar(unsafe=True)
        async with aiohttp.ClientSession(cookie_jar=jar) as http:
            form = await (await http.get(f"{base}/login")).text()
            csrf = re.search(r'name="csrf" value="([^"]+)"', form).group(1)  # type: ignore[union-attr]
            await http.post(f"{base}/login", data={"token": TOKEN, "csrf": csrf})
            graph = await (await http.get(f"{base}/sessions/bench%3Along/graph")).text()
            node = re.search(r'data-node="([^"]+)"', graph)
            hits = await (
                await http.get(f"{base}/search", params={"session": LONG.id, "q": QUERY})
            ).text()
            at = re.search(r"\?at=(\d+)", hits)
            pages = {
                "sessions": "/sessions",
                "sessions, page 100": "/sessions?page=100",
                "sessions, filtered": "/sessions?q=bench%3A99&archived=1",
                "conversation (last page)": "/sessions/bench%3Along",
                "conversation, page 1": "/sessions/bench%3Along?page=1",
                "conversation at a search hit": f"/sessions/bench%3Along?at={at.group(1) if at else 1}",
                "graph": "/sessions/bench%3Along/graph",
                "graph, a node open": "/sessions/bench%3Along/graph?node="
                + (node.group(1) if node else ""),
                "search full_text": f"/search?session=bench%3Along&q={quote(QUERY)}&mode=full_text",
                "search substring": f"/search?session=bench%3Along&q={RARE}&mode=substring",
                "profile versions": "/memory/42?scope=profile",
                "changelog": "/changelog",
            }
            for name, path in pages.items():
                best, size = float("inf"), 0
                for _ in range(repeat):
                    r = await http.get(base + path)
                    body = await r.read()
                    assert r.status == 200, (name, r.status)
                    timing = r.headers["Server-Timing"].partition("dur=")[2]
                    best, size = min(best, float(timing)), len(body)
                out.append((name, best, size))
    finally:
        await server.stop()
        await provider.close()
        await engine.dispose()
    return out


async def run(kind: str, provider: str, args: argparse.Namespace) -> list[str]:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        async with temp_database_url(kind, tmp) as url:
            settings = settings_for(url, tmp, provider)
            t0 = time.perf_counter()
            await populate(settings, tmp, args.sessions)
            await long_session(settings, tmp, args.messages)
            print(f"{kind}/{provider}: filled in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
            rows = await measure(settings, tmp, args.repeat)
    lines = [
        f"| {kind} | {provider} | {name} | {ms:.0f} ms | {size / 1024:.1f} KiB |"
        for name, ms, size in rows
    ]
    for line in lines:
        print(line, flush=True)
    return lines


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sessions", type=int, default=10_000)
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--db", default="sqlite,postgres")
    p.add_argument("--provider", default="lcm,simple")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--append-results", action="store_true")
    args = p.parse_args()
    rows = []
    for kind in args.db.split(","):
        for provider in args.provider.split(","):
            rows += asyncio.run(run(kind, provider, args))
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    text = "\n".join(
        [
            f"## Web console pages over {args.sessions} sessions and one of {args.messages} messages",
            "",
            f"- date: {datetime.now(UTC):%Y-%m-%d}, tree {commit}",
            f"- machine: {machine()}",
            f"- command: `.venv/bin/python bench/web_pages.py --sessions {args.sessions} "
            f"--messages {args.messages} --db {args.db} --provider {args.provider} "
            f"--repeat {args.repeat}`",
            "",
            "| db | provider | page | server time (best) | size |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )
    print(text)
    if args.append_results:
        append_results(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
