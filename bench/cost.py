"""What a long conversation costs (issue 17): prompt tokens, the cacheable prefix,
compactions and the bill, mnemo (lcm and simple) against a plain "last 15 messages" bot.

The real bot (`bot.app.services.build_services`: the pool, the memory tool, automatic compaction,
the LLM summarizer over HTTP) talks to the fake OpenAI server on loopback, whose model
is scripted here (`Model`): a ~600-character answer to every message, the memory tool's
`search` when asked about something said long ago (and an answer quoting what the
search returned: recall is measured, not assumed), one `profile_update` when told a
preference (the agent's own memory write), and an extractive summary of the asked length
for every summarizer request. Every turn waits for its background compaction, as a person
typing does.

The conversation: `--turns` (200) user messages of ~1,000 characters; three facts planted
at turns 5, 40 and 90, asked about in the last turns (190, 194, 198 of 200).

Figures, per configuration, from the requests the server received:
- prompt tokens: the request's tools and messages as JSON, `memory.text.tokens.estimate_tokens`;
  per turn (all of a turn's model calls) min / median / max, and the total;
- cacheable prefix: the identical leading tokens of each chat request and the one before
  it (same conversation), over its prompt tokens: median, and token-weighted (sum of
  prefixes / sum of prompts);
- billed-equivalent tokens: uncached prompt + half of cached + completion (OpenAI's
  standard cache discount), where cached is the prefix as OpenAI bills it (only from
  1,024 tokens on, in steps of 128); summarizer calls count in full, uncached;
- cost at gpt-4o-mini's prices (USD per million: input 0.15, cached input 0.075, output
  0.60);
- the reference bot: system prompt + the last 15 messages (user and its own answers),
  no tools, no memory, computed the same way from the same conversation.

    .venv/bin/python bench/cost.py [--turns 200] [--providers lcm,simple]
        [--configs default,small,large] [--append-results]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import append_results, machine  # noqa: E402
from bot.app.services import build_services  # noqa: E402
from bot.config.settings import Settings  # noqa: E402
from memory.contract.types import Session  # noqa: E402
from memory.text.tokens import estimate_tokens  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, Response, text, tool_call  # noqa: E402

# USD per million tokens (gpt-4o-mini, OpenAI's list price).
PRICE_INPUT, PRICE_CACHED, PRICE_OUTPUT = 0.15, 0.075, 0.60
CACHE_MIN, CACHE_STEP = 1024, 128  # OpenAI caches prefixes from 1,024 tokens, per 128
REFERENCE_WINDOW = 15

# (turn planted, what the user says, the question, the word the answer must hold)
FACTS = [
    (
        5,
        "By the way, my grandmother's violin was built in Cremona in 1894 by a luthier "
        "called Quintavalle, and it still hangs in our hallway.",
        "Who built my grandmother's violin, the one in the hallway?",
        "Quintavalle",
    ),
    (
        40,
        "Something I never told you: the first car I owned was a turquoise Skoda "
        "Felicia that I named Bartholomew.",
        "What did I name my first car, the turquoise one?",
        "Bartholomew",
    ),
    (
        90,
        "My dentist, who is also my neighbour, is Dr. Oyelaran-Whitcombe; she plays the "
        "oboe in a brass band.",
        "What is the name of my dentist who plays the oboe?",
        "Oyelaran-Whitcombe",
    ),
]
QUESTION_TURNS_FROM_END = (10, 6, 2)  # asked at turns 190, 194, 198 of 200
PROFILE_TURN = 20
PROFILE_TEXT = "Please remember for good: I am vegetarian and I live in Porto."
QUESTION_MARK = "Question from long ago: "

WORDS = [
    "garden",
    "river",
    "bicycle",
    "project",
    "meeting",
    "recipe",
    "travel",
    "weather",
    "mountain",
    "library",
    "concert",
    "budget",
    "office",
    "window",
    "coffee",
    "market",
    "holiday",
    "train",
    "kitchen",
    "painting",
    "music",
    "football",
    "teacher",
    "hospital",
    "software",
    "report",
    "museum",
    "forest",
    "harbour",
    "castle",
    "festival",
    "village",
    "airport",
    "bakery",
    "theatre",
    "journey",
    "winter",
    "summer",
    "autumn",
    "spring",
    "island",
    "lake",
    "bridge",
    "tower",
    "studio",
    "lecture",
    "neighbour",
    "cousin",
    "friend",
    "colleague",
    "weekend",
    "evening",
]

CONFIGS: dict[str, dict[str, int]] = {
    # The defaults of config.yaml (bot/config/settings.py), and a smaller and a larger budget.
    "default": {},
    "small": {"budget_tokens": 8000, "max_tokens": 6000, "keep_tail": 8},
    "large": {"budget_tokens": 32000, "max_tokens": 24000, "keep_tail": 20},
    "old": {"budget_tokens": 80000, "max_tokens": 80000, "keep_tail": 20},  # before #17
}


def user_message(rng: random.Random, turn: int) -> str:
    """About 1,000 characters of small talk."""
    sentences = []
    while sum(len(s) + 1 for s in sentences) < 1000:
        words = rng.sample(WORDS, 9)
        sentences.append(f"On turn {turn} I keep thinking about the {' and the '.join(words)}.")
    return " ".join(sentences)


def conversation(turns: int) -> list[str]:
    rng = random.Random(17)
    msgs = [user_message(rng, t) for t in range(1, turns + 1)]
    for planted, said, _, _ in FACTS:
        if planted <= turns:
            msgs[planted - 1] = said + " " + msgs[planted - 1][: 1000 - len(said)]
    if turns >= PROFILE_TURN:
        msgs[PROFILE_TURN - 1] = PROFILE_TEXT
    for (_, _, question, _), back in zip(FACTS, QUESTION_TURNS_FROM_END, strict=True):
        if turns - back >= 1:
            msgs[turns - back - 1] = QUESTION_MARK + question
    return msgs


def answer_to(user: str) -> str:
    """The scripted model's ordinary answer: ~600 characters, fixed per message."""
    rng = random.Random(user)
    out = []
    while sum(len(s) + 1 for s in out) < 600:
        out.append(f"That reminds me of the {' and the '.join(rng.sample(WORDS, 6))}.")
    return " ".join(out)


_TARGET = re.compile(r"(?:about|at most|under about) (\d+) tokens")
_BODY = re.compile(r"<(conversation|summaries)>\n(.*)\n</\1>", re.S)


def summary_for(prompt: str) -> str:
    """An extractive summary as long as the prompt asks: the first sentence of every
    message (or summary line), cut at the target."""
    target = int(m.group(1)) if (m := _TARGET.search(prompt)) else 200
    body = m.group(2) if (m := _BODY.search(prompt)) else prompt
    firsts = [line.split(". ")[0][:200] for line in body.splitlines() if line.strip()]
    return "\n".join(firsts)[: target * 4] or "nothing happened"


def is_summary_request(body: dict[str, Any]) -> bool:
    msgs = body.get("messages", [])
    return not body.get("tools") and len(msgs) == 1 and msgs[0].get("role") == "user"


class Model:
    """The scripted model (see the module doc)."""

    def __call__(self, body: dict[str, Any]) -> Response:
        msgs = body.get("messages", [])
        if is_summary_request(body):
            return text(summary_for(str(msgs[0].get("content") or "")), chunk_size=4096)
        last = msgs[-1] if msgs else {}
        content = str(last.get("content") or "")
        if last.get("role") == "tool":
            # Answers from what the tool returned, nothing else: recall is the search's.
            return text("From my memory: " + content[:500], chunk_size=4096)
        if content.startswith(QUESTION_MARK):
            return tool_call("memory", {"action": "search", "text": content[len(QUESTION_MARK) :]})
        if content == PROFILE_TEXT:
            return tool_call(
                "memory",
                {"action": "profile_update", "content": "Vegetarian. Lives in Porto."},
            )
        return text(answer_to(content), chunk_size=4096)


def render(body: dict[str, Any]) -> str:
    """What the server tokenizes, in order: the tools, then the messages."""
    return json.dumps(
        {"tools": body.get("tools") or [], "messages": body.get("messages") or []},
        ensure_ascii=False,
    )


def common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n  # binary search over slices: C speed, fine for 100k characters
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def billed_cached(prefix_tokens: int) -> int:
    if prefix_tokens < CACHE_MIN:
        return 0
    return prefix_tokens // CACHE_STEP * CACHE_STEP


@dataclass
class Call:
    prompt: int
    completion: int
    prefix: int = 0  # identical leading tokens with the previous chat call
    summary: bool = False


@dataclass
class Run:
    name: str
    turns: list[list[Call]] = field(default_factory=list)
    compactions: int = 0
    after_write: float = float("nan")  # prefix ratio of the turn after the profile write
    recalled: int = 0
    asked: int = 0
    seconds: float = 0.0

    @property
    def calls(self) -> list[Call]:
        return [c for t in self.turns for c in t]

    def per_turn_prompt(self) -> list[int]:
        return [sum(c.prompt for c in t if not c.summary) for t in self.turns]

    def figures(self) -> dict[str, float]:
        chat = [c for c in self.calls if not c.summary]
        summaries = [c for c in self.calls if c.summary]
        later = chat[1:]
        ratios = [c.prefix / c.prompt for c in later if c.prompt]
        cached = sum(billed_cached(c.prefix) for c in chat)
        prompt = sum(c.prompt for c in self.calls)
        completion = sum(c.completion for c in self.calls)
        billed = prompt - cached + cached / 2 + completion
        cost = ((prompt - cached) * PRICE_INPUT + cached * PRICE_CACHED) / 1e6
        cost += completion * PRICE_OUTPUT / 1e6
        per_turn = self.per_turn_prompt()
        return {
            "min": min(per_turn),
            "median": statistics.median(per_turn),
            "max": max(per_turn),
            "prompt": prompt,
            "ratio_median": statistics.median(ratios) if ratios else 0.0,
            "ratio_weighted": (
                sum(c.prefix for c in later) / sum(c.prompt for c in later) if later else 0.0
            ),
            "summaries": len(summaries),
            "billed": billed,
            "saved": (cached / 2) / (prompt + completion),  # of the bill without a cache
            "cost": cost,
        }


def chat_call(body: dict[str, Any], previous: str | None, completion_text: str) -> tuple[Call, str]:
    rendered = render(body)
    prefix = estimate_tokens(rendered[: common_prefix(previous, rendered)]) if previous else 0
    return Call(estimate_tokens(rendered), estimate_tokens(completion_text), prefix), rendered


def completion_of(resp: Response) -> str:
    return resp.content + "".join(args for _, _, args in resp.calls)


def config_of(name: str) -> dict[str, int]:
    """A named configuration, or `BUDGET/MAX_TOKENS/KEEP_TAIL[/TARGET_PERCENT]` (e.g.
    16000/12000/10 or 16000/12000/10/60)."""
    if name in CONFIGS:
        return CONFIGS[name]
    budget, max_tokens, keep_tail, *target = (int(x) for x in name.split("/"))
    out = {"budget_tokens": budget, "max_tokens": max_tokens, "keep_tail": keep_tail}
    if target:
        out["target_percent"] = target[0]
    return out


async def run_mnemo(provider: str, config: str, msgs: list[str], tmp: Path) -> Run:
    overrides = config_of(config)
    model = Model()
    run = Run(f"mnemo {provider}, {config}")
    async with FakeOpenAI(model) as server:
        memory: dict[str, Any] = {
            "provider": provider,
            "simple": {"store_dir": str(tmp / "notes")},
        }
        compaction: dict[str, Any] = {}
        if "budget_tokens" in overrides:
            memory["budget_tokens"] = overrides["budget_tokens"]
        for key in ("max_tokens", "keep_tail"):
            if key in overrides:
                compaction[key] = overrides[key]
        if "target_percent" in overrides:
            compaction["target_fraction"] = overrides["target_percent"] / 100
        settings = Settings.model_validate(
            {
                "database": {"url": f"sqlite+aiosqlite:///{tmp}/cost.db"},
                "llm": {"base_url": server.base_url, "api_key": "bench", "max_retries": 0},
                "data_dir": str(tmp),
                "memory": memory,
                "compaction": compaction,
                "reflect": {"enabled": False},
            }
        )
        services = await build_services(settings)
        try:
            pool = services.conversations
            session = await pool.current_session(Session("tg:1", "default", 1, "telegram"))
            previous: str | None = None
            started = time.perf_counter()
            for user in msgs:
                first = len(server.requests)
                reply = await pool.chat(session, user)
                await pool.drain()  # a person types slower than a compaction runs
                calls = []
                summarized = False
                for body in server.requests[first:]:
                    resp = model(body)
                    if is_summary_request(body):
                        summarized = True
                        calls.append(
                            Call(
                                estimate_tokens(render(body)),
                                estimate_tokens(completion_of(resp)),
                                summary=True,
                            )
                        )
                        continue
                    call, previous = chat_call(body, previous, completion_of(resp))
                    calls.append(call)
                run.turns.append(calls)
                run.compactions += summarized
                if len(run.turns) == PROFILE_TURN + 1 and calls and not summarized:
                    run.after_write = calls[0].prefix / calls[0].prompt
                if user.startswith(QUESTION_MARK):
                    run.asked += 1
                    word = next(w for _, _, q, w in FACTS if user.endswith(q))
                    run.recalled += word in reply.text
            run.seconds = time.perf_counter() - started
        finally:
            await services.close()
    return run


def run_reference(msgs: list[str], system: str) -> Run:
    """System prompt + the last 15 messages, its own answers; no tools, no memory."""
    run = Run(f"reference: last {REFERENCE_WINDOW} messages")
    history: list[dict[str, str]] = []
    previous: str | None = None
    for user in msgs:
        history.append({"role": "user", "content": user})
        body = {"messages": [{"role": "system", "content": system}, *history[-REFERENCE_WINDOW:]]}
        answer = answer_to(user)
        call, previous = chat_call(body, previous, answer)
        run.turns.append([call])
        history.append({"role": "assistant", "content": answer})
        if user.startswith(QUESTION_MARK):
            run.asked += 1
            word = next(w for _, _, q, w in FACTS if user.endswith(q))
            recent = " ".join(m["content"] for m in history[-REFERENCE_WINDOW:])
            run.recalled += word in recent
    return run


def table(runs: list[Run], reference: Run) -> str:
    ref = reference.figures()
    head = (
        "| configuration | prompt tokens / turn min / median / max | prompt tokens total "
        "| cacheable prefix median / weighted | compactions | summarizer calls "
        "| billed-equivalent | x reference | saved by the cache | cost (gpt-4o-mini) | recall "
        "| prefix after the agent's memory write |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = [head]
    for run in [*runs, reference]:
        f = run.figures()
        rows.append(
            f"| {run.name} | {f['min']:,.0f} / {f['median']:,.0f} / {f['max']:,.0f} "
            f"| {f['prompt']:,.0f} | {f['ratio_median']:.3f} / {f['ratio_weighted']:.3f} "
            f"| {run.compactions} | {f['summaries']:.0f} | {f['billed']:,.0f} "
            f"| {f['billed'] / ref['billed']:.2f} | {f['saved']:.0%} | ${f['cost']:.3f} "
            f"| {run.recalled}/{run.asked} | {run.after_write:.3f} |"
        )
    return "\n".join(rows)


def plot(runs: list[Run], reference: Run, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for run in [*runs, reference]:
        ax.plot(range(1, len(run.turns) + 1), run.per_turn_prompt(), label=run.name, lw=1)
    ax.set_xlabel("turn")
    ax.set_ylabel("prompt tokens")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


async def main(args: argparse.Namespace) -> str:
    msgs = conversation(args.turns)
    runs = []
    for config in args.configs.split(","):
        for provider in args.providers.split(","):
            with tempfile.TemporaryDirectory(prefix="cost-bench-") as tmp:
                runs.append(await run_mnemo(provider, config, msgs, Path(tmp)))
            print(f"  {runs[-1].name}: {runs[-1].seconds:.1f} s", file=sys.stderr, flush=True)
    system = Settings().agent.system_prompt
    reference = run_reference(msgs, system)
    defaults = Settings()
    command = "python bench/cost.py " + " ".join(sys.argv[1:])
    out = [
        f"## Conversation cost ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)",
        "",
        f"- machine: {machine()}",
        f"- command: `{command.strip()}`",
        f"- conversation: {args.turns} turns, user messages ~1,000 characters, answers "
        "~600; facts planted at turns 5, 40, 90 and asked in the last turns through the "
        "memory tool; one profile_update at turn 20",
        f"- defaults: memory.budget_tokens {defaults.memory.budget_tokens}, "
        f"compaction.max_tokens {defaults.compaction.max_tokens}, target_fraction "
        f"{defaults.compaction.target_fraction}, keep_tail {defaults.compaction.keep_tail}; "
        + "; ".join(
            f"{name}: budget {c['budget_tokens']}, max_tokens {c['max_tokens']}, "
            f"keep_tail {c['keep_tail']}"
            for name in args.configs.split(",")
            if (c := config_of(name))
        ),
        "",
        table(runs, reference),
    ]
    if args.plot and plot(runs, reference, Path(args.plot)):
        out.append(f"\nPrompt tokens per turn: {args.plot}")
    return "\n".join(out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--providers", default="lcm,simple")
    parser.add_argument("--configs", default="default,small,large")
    parser.add_argument("--plot", default="", help="write a PNG of prompt tokens per turn")
    parser.add_argument("--append-results", action="store_true")
    ns = parser.parse_args()
    os.environ.setdefault("MNEMO_LOG_LEVEL", "WARNING")
    report = asyncio.run(main(ns))
    print(report)
    if ns.append_results:
        append_results(report)
