"""Facts that keep up with the truth (issue #29, item 5): two measurements.

1. **Scripted conversations through the bot.** The real bot (`build_application` on the
   fake Bot API, tests/reliability/harness.py's `live_bot`) talks with people whose facts
   change: a move, a new job, a relationship ending and another starting, a preference
   retracted, restatements, and a fact stated by someone else in a supergroup. The model
   is scripted (the fake OpenAI server): on each message it emits the structured
   operation a good model would (`fact_set` / `fact_retract` through the memory tool,
   citing by default the user's message), then answers. Reported: current facts vs the
   expected ones (right, wrong, missing, extra), duplicates (two current facts on a key,
   or a restatement that made a second fact), superseded or retracted facts still in the
   rendered profile, evidence ids that resolve to the message that said it, and the
   prompt-cache prefix: turns whose system prompt changed from the chat's previous turn
   (the model's own writes wait for a compaction, so 0 is right), and versions whose
   rendered profile read again at the end differs from the rendering at that version
   when it was written (0 is right: a snapshot's rendering depends on its version only).

2. **Temporal recall on LoCoMo dev** (`../shared/data/locomo-dev.json`, category 2:
   "when did ...", "what did ... in May 2023"): turn-level recall@k as bench/recall.py
   measures it (full_text, each provider on SQLite), without a date filter and with one
   derived from the question (`since`/`before` of the search). Most temporal questions
   ask for a date and name none, so the filter applies to the few that name a period
   ("in May 2023", "on 1 May, 2022", "the week before 16 November 2023"); the others are
   asked as without. The period is widened past its end by `--slack-days` (people tell of
   an event after it happened: the session reporting it is dated later); both the strict
   period (0) and the slack run are reported.

    .venv/bin/python bench/timeline.py [--provider lcm|simple|all] [--db sqlite|postgres]
        [--slack-days 31] [--skip-locomo] [--conversations N] [--append-results]
"""

from __future__ import annotations

import argparse
import asyncio
import calendar
import json
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._common import append_results, machine  # noqa: E402
from bench.recall import (  # noqa: E402
    KS,
    LIMIT,
    chat_of,
    default_data,
    fresh_provider,
    parse_conversation,
    recall_at,
    stored_dia_ids,
)
from memory.contract.facts import FactState  # noqa: E402
from memory.contract.types import Message, SearchMode, SearchQuery, SearchScope  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, text, tool_call  # noqa: E402
from tests.fakes.telegram_server import FakeTelegram, User  # noqa: E402
from tests.reliability.harness import live_bot  # noqa: E402

AGENT = "default"
ALICE, BOB, CAROL = User(42, "Alice"), User(43, "Bob"), User(44, "Carol")
GROUP = -1005550001  # a supergroup: its memory is the group's (user id = chat id)

# --- 1. scripted conversations ------------------------------------------------------


@dataclass(frozen=True)
class Step:
    chat: str  # "private" (Alice) or "group"
    who: User
    said: str
    op: dict[str, Any] | None  # the memory tool call the scripted model makes, or None


def _set(key: str, value: str) -> dict[str, Any]:
    return {"action": "fact_set", "key": key, "value": value}


def _retract(key: str) -> dict[str, Any]:
    return {"action": "fact_retract", "key": key}


SCRIPT = [
    Step("private", ALICE, "I live in London, near the river", _set("home city", "London")),
    Step("private", ALICE, "I work at Acme as an engineer", _set("employer", "Acme")),
    Step("private", ALICE, "my partner is Sam", _set("partner", "Sam")),
    Step("private", ALICE, "I'm vegetarian", _set("diet", "vegetarian")),
    Step("private", ALICE, "I love jazz", _set("music", "jazz")),
    Step("private", ALICE, "how's the weather?", None),
    Step("private", ALICE, "big news: I moved to Berlin last week", _set("home city", "Berlin")),
    Step("private", ALICE, "I started at Globex today", _set("employer", "Globex")),
    Step("private", ALICE, "Sam and I broke up", _set("partner", "")),  # see below
    Step("private", ALICE, "I'm not vegetarian any more", _retract("diet")),
    Step("private", ALICE, "as I said, Berlin is home now", _set("home city", "Berlin")),
    Step("private", ALICE, "jazz, always jazz", _set("music", "jazz")),
    Step("private", ALICE, "I'm seeing Alex now", _set("partner", "Alex")),
    Step("group", BOB, "Alice moved to Paris, by the way", _set("alice's home city", "Paris")),
    Step("group", CAROL, "yes, Alice lives in Paris now", _set("alice's home city", "Paris")),
    Step("group", BOB, "our standup moved to Tuesdays", _set("standup day", "Tuesday")),
]
# "Sam and I broke up" is a retraction, not a set with an empty value.
SCRIPT[8] = Step("private", ALICE, "Sam and I broke up", _retract("partner"))

EXPECTED = {
    ALICE.id: {"home city": "Berlin", "employer": "Globex", "partner": "Alex", "music": "jazz"},
    GROUP: {"alice's home city": "Paris", "standup day": "Tuesday"},
}
RESTATED = {
    (ALICE.id, "home city", "Berlin"),
    (ALICE.id, "music", "jazz"),
    (GROUP, "alice's home city", "Paris"),
}


@dataclass
class FactFigures:
    provider: str
    db: str
    expected: int = 0
    right: int = 0
    wrong: int = 0
    missing: int = 0
    extra: int = 0
    duplicates: int = 0
    stale_rendered: int = 0
    evidence: int = 0
    evidence_resolved: int = 0
    turns: int = 0
    prompt_changes: int = 0
    versions: int = 0
    renderings_moved: int = 0
    after_compaction_rendered: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


async def _send(tg: FakeTelegram, chat: Any, step: Step) -> None:
    before = len(tg.bot_messages(chat.id))
    chat.send(step.said, user=step.who)
    await tg.wait_for(lambda: len(tg.bot_messages(chat.id)) > before, within=60)


async def facts_through_the_bot(provider: str, db: str, tmp: Path) -> FactFigures:
    out = FactFigures(provider, db)
    started = time.perf_counter()
    async with FakeTelegram() as tg, FakeOpenAI() as llm:
        sections = {"telegram": {"group_mode": "always"}}
        async with live_bot(tmp, tg, llm, provider=provider, db_kind=db, **sections) as bot:
            store = bot.provider
            chats = {"private": tg.private(ALICE.id, "Alice"), "group": tg.group(GROUP, "Team")}
            owners = {"private": ALICE.id, "group": GROUP}
            prompts: dict[str, list[str]] = {"private": [], "group": []}
            rendered_then: dict[tuple[int, int], str] = {}
            for step in SCRIPT:
                if step.op is not None:
                    llm.push(tool_call("memory", step.op), text("noted"))
                asked = len(llm.requests)
                await _send(tg, chats[step.chat], step)
                for request in llm.requests[asked:]:
                    system = request["messages"][0]
                    if system["role"] == "system":
                        prompts[step.chat].append(system["content"])
                        break
                owner = owners[step.chat]
                version = await store.memory_version(owner, AGENT)
                rendered_then[(owner, version)] = await store.get_profile_at(owner, AGENT, version)
            for seen in prompts.values():
                out.turns += len(seen)
                out.prompt_changes += sum(a != b for a, b in zip(seen, seen[1:], strict=False))
            for (owner, version), then in rendered_then.items():
                out.versions += 1
                out.renderings_moved += then != await store.get_profile_at(owner, AGENT, version)
            await _score_facts(out, store, tg, chats, owners)
            # After a compaction the prompt is rebuilt: the current facts are in it.
            for chat_name, chat in chats.items():
                await _send(tg, chat, Step(chat_name, ALICE, "/compact", None))
                asked = len(llm.requests)
                await _send(tg, chat, Step(chat_name, ALICE, "and now?", None))
                system = llm.requests[asked]["messages"][0]["content"]
                expected = EXPECTED[owners[chat_name]]
                out.after_compaction_rendered += sum(
                    f"- {k}: {v} (since " in system for k, v in expected.items()
                )
    out.seconds = time.perf_counter() - started
    return out


async def _score_facts(
    out: FactFigures, store: Any, tg: FakeTelegram, chats: dict[str, Any], owners: dict[str, int]
) -> None:
    from memory.contract.types import Session

    said = {s.said for s in SCRIPT}
    for owner in owners.values():
        expected = EXPECTED[owner]
        current = await store.current_facts(owner, AGENT)
        out.expected += len(expected)
        keys: dict[str, list[str]] = {}
        for f in current:
            keys.setdefault(f.key, []).append(f.value)
        out.duplicates += sum(len(v) - 1 for v in keys.values())
        for key, value in expected.items():
            got = keys.get(key)
            if not got:
                out.missing += 1
            elif got == [value]:
                out.right += 1
            else:
                out.wrong += 1
        out.extra += len(set(keys) - set(expected))
        history = await store.fact_history(owner, AGENT)
        for o, key, value in RESTATED:
            if o == owner:
                copies = [f for f in history if f.key == key and f.value == value]
                out.duplicates += max(0, len(copies) - 1)
        profile = await store.get_profile(owner, AGENT)
        for f in history:
            if f.state != FactState.CURRENT and f"- {f.key}: {f.value} (" in profile:
                live = any(c.key == f.key and c.value == f.value for c in current)
                out.stale_rendered += not live
        session = Session(f"{AGENT}:telegram:{owner}", AGENT, owner, "telegram")
        for f in history:
            for message_id in f.evidence:
                out.evidence += 1
                try:
                    found = await store.read_message(session, str(message_id))
                except Exception as exc:  # counted: an id that does not resolve
                    out.notes.append(f"evidence {message_id}: {type(exc).__name__}")
                    continue
                content = found.message.content
                out.evidence_resolved += any(content.endswith(s) for s in said)


# --- 2. temporal recall on LoCoMo ----------------------------------------------------

TEMPORAL = 2
MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_MONTH = "|".join(MONTHS)
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}}) ({_MONTH}),? (\d{{4}})\b", re.I)
_MONTH_DAY_YEAR = re.compile(rf"\b({_MONTH}) (\d{{1,2}}),? (\d{{4}})\b", re.I)
_MONTH_YEAR = re.compile(rf"\b({_MONTH}),? (\d{{4}})\b", re.I)
_MONTH_ONLY = re.compile(rf"\b({_MONTH})\b", re.I)
_WEEK_BEFORE = re.compile(r"\bweek before\b", re.I)


@dataclass(frozen=True)
class Temporal:
    text: str
    evidence: frozenset[str]
    window: tuple[datetime, datetime] | None  # the period the question names, if any


def _month(year: int, month: int) -> tuple[datetime, datetime]:
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    return start, end


def question_window(
    question: str, first: datetime, last: datetime
) -> tuple[datetime, datetime] | None:
    """The period a question names: a day, a month of a year, a month alone (the latest
    such month the conversation reaches), "the week before <day>", or from the first to
    the last of several; None when it names none."""
    spans: list[tuple[datetime, datetime]] = []
    rest = question
    for m in _DAY_MONTH_YEAR.finditer(rest):
        day = datetime(int(m[3]), MONTHS[m[2].lower()], int(m[1]), tzinfo=UTC)
        spans.append((day, day + timedelta(days=1)))
    rest = _DAY_MONTH_YEAR.sub(" ", rest)
    for m in _MONTH_DAY_YEAR.finditer(rest):
        day = datetime(int(m[3]), MONTHS[m[1].lower()], int(m[2]), tzinfo=UTC)
        spans.append((day, day + timedelta(days=1)))
    rest = _MONTH_DAY_YEAR.sub(" ", rest)
    for m in _MONTH_YEAR.finditer(rest):
        spans.append(_month(int(m[2]), MONTHS[m[1].lower()]))
    rest = _MONTH_YEAR.sub(" ", rest)
    for m in _MONTH_ONLY.finditer(rest):
        month = MONTHS[m[1].lower()]
        year = last.year if datetime(last.year, month, 1, tzinfo=UTC) <= last else last.year - 1
        if datetime(year + 1, 1, 1, tzinfo=UTC) > first:
            spans.append(_month(year, month))
    if not spans:
        return None
    start, end = min(s for s, _ in spans), max(e for _, e in spans)
    if _WEEK_BEFORE.search(question) and end - start <= timedelta(days=1):
        start, end = start - timedelta(days=7), start
    return start, end


def temporal_questions(raw: dict[str, Any], first: datetime, last: datetime) -> list[Temporal]:
    out = []
    for qa in raw["qa"]:
        evidence = frozenset(
            e.strip() for e in qa.get("evidence", []) if re.fullmatch(r"D\d+:\d+", e.strip())
        )
        if qa.get("category") == TEMPORAL and evidence:
            text = str(qa["question"])
            out.append(Temporal(text, evidence, question_window(text, first, last)))
    return out


@dataclass
class RecallRow:
    provider: str
    db: str
    label: str
    questions: int = 0
    sums: dict[int, float] = field(default_factory=lambda: dict.fromkeys(KS, 0.0))

    def add(self, ranked: list[str], evidence: frozenset[str]) -> None:
        self.questions += 1
        for k, v in recall_at(ranked, evidence).items():
            self.sums[k] += v

    def at(self, k: int) -> float:
        return self.sums[k] / self.questions if self.questions else float("nan")


async def _ask(
    store: Any, session: Any, ids: dict[str, str], question: str, window: Any
) -> list[str]:
    query = SearchQuery(
        question,
        SearchScope.MESSAGES,
        LIMIT,
        SearchMode.FULL_TEXT,
        since=window[0] if window else None,
        before=window[1] if window else None,
    )
    hits = await store.search(session, query)
    return list(dict.fromkeys(ids.get(h.source_id, "") for h in hits))


async def temporal_recall(
    provider: str, db: str, data: Path, limit: int | None, slacks: list[int], tmp: Path
) -> list[RecallRow]:
    raw_all = json.loads(await asyncio.to_thread(data.read_text, encoding="utf-8"))[:limit]
    convs = [parse_conversation(r) for r in raw_all]
    rows = {"none": RecallRow(provider, db, "all, no filter")}
    for s in slacks:
        rows[f"all+{s}"] = RecallRow(provider, db, f"all, filter +{s}d")
    subset = {"none": RecallRow(provider, db, "dated only, no filter")}
    for s in slacks:
        subset[f"all+{s}"] = RecallRow(provider, db, f"dated only, filter +{s}d")
    async with fresh_provider(provider, db, tmp, None) as (store, engine):
        for i, conv in enumerate(convs):
            session = chat_of(i, conv)
            await store.bootstrap(session)
            await store.append(
                session,
                *(Message(role="user", content=t.content, created_at=t.at) for t in conv.turns),
            )
        ids = await stored_dia_ids(engine, convs)
        for i, (raw, conv) in enumerate(zip(raw_all, convs, strict=True)):
            session = chat_of(i, conv)
            first, last = conv.turns[0].at, conv.turns[-1].at
            for q in temporal_questions(raw, first, last):
                plain = await _ask(store, session, ids, q.text, None)
                rows["none"].add(plain, q.evidence)
                if q.window is not None:
                    subset["none"].add(plain, q.evidence)
                for s in slacks:
                    window = None
                    if q.window is not None:
                        window = (q.window[0], q.window[1] + timedelta(days=s))
                    ranked = await _ask(store, session, ids, q.text, window) if window else plain
                    rows[f"all+{s}"].add(ranked, q.evidence)
                    if window is not None:
                        subset[f"all+{s}"].add(ranked, q.evidence)
    return [*rows.values(), *subset.values()]


# --- the report ----------------------------------------------------------------------


def report(facts: list[FactFigures], recall: list[RecallRow], argv: list[str]) -> str:
    lines = [
        f"## Facts timeline (bench/timeline.py), {datetime.now(UTC):%Y-%m-%d}",
        f"- machine: {machine()}",
        f"- command: .venv/bin/python bench/timeline.py {' '.join(argv)}".rstrip(),
        "",
    ]
    if facts:
        lines += [
            "| provider | db | current right/expected | wrong | missing | extra | duplicates "
            "| stale rendered | evidence resolved | prompt changes / turns | renderings moved "
            "/ versions | facts in prompt after /compact | s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for f in facts:
            lines.append(
                f"| {f.provider} | {f.db} | {f.right}/{f.expected} | {f.wrong} | {f.missing} "
                f"| {f.extra} | {f.duplicates} | {f.stale_rendered} "
                f"| {f.evidence_resolved}/{f.evidence} | {f.prompt_changes}/{f.turns} "
                f"| {f.renderings_moved}/{f.versions} | {f.after_compaction_rendered}/"
                f"{f.expected} | {f.seconds:.1f} |"
            )
            lines += [f"  - {n}" for n in f.notes[:5]]
        lines.append("")
    if recall:
        lines += [
            "LoCoMo dev, category 2 (temporal), full_text, turn-level recall@k:",
            "",
            "| provider | db | questions | " + " | ".join(f"R@{k}" for k in KS) + " |",
            "|---|---|---|" + "---|" * len(KS),
        ]
        for r in recall:
            figures = " | ".join(f"{r.at(k):.3f}" for k in KS)
            lines.append(f"| {r.provider} ({r.label}) | {r.db} | {r.questions} | {figures} |")
    return "\n".join(lines)


async def run(ns: argparse.Namespace, argv: list[str]) -> str:
    providers = ["lcm", "simple"] if ns.provider == "all" else [ns.provider]
    facts: list[FactFigures] = []
    recall: list[RecallRow] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, provider in enumerate(providers):
            facts.append(await facts_through_the_bot(provider, ns.db, Path(tmp) / f"bot{i}"))
        if not ns.skip_locomo:
            data = Path(ns.data) if ns.data else default_data()
            if data is None:
                raise SystemExit("no LoCoMo data: pass --data")
            slacks = sorted({0, ns.slack_days})
            for i, provider in enumerate(providers):
                where = Path(tmp) / f"locomo{i}"
                where.mkdir()
                recall += await temporal_recall(
                    provider, ns.db, data, ns.conversations, slacks, where
                )
    return report(facts, recall, argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--provider", default="all", choices=("lcm", "simple", "all"))
    p.add_argument("--db", default="sqlite", choices=("sqlite", "postgres"))
    p.add_argument("--slack-days", type=int, default=31)
    p.add_argument("--skip-locomo", action="store_true")
    p.add_argument("--conversations", type=int, default=None)
    p.add_argument("--data", default="")
    p.add_argument("--append-results", action="store_true")
    ns = p.parse_args(argv)
    text = asyncio.run(run(ns, argv))
    print(text)
    if ns.append_results:
        append_results(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
