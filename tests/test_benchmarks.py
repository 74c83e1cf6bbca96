"""The benchmarks still run: each at a toy size, as a subprocess, as `make bench` starts
them. Their figures are not checked here (bench/RESULTS.md holds them); a benchmark that
no longer starts, or hangs, is, and so is the recall benchmark's scoring, on a toy
conversation whose right answers are known."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.waits import scaled

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def run_bench(*argv: str) -> str:
    done = subprocess.run(
        [sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=scaled(240)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_bot_throughput_runs() -> None:
    out = run_bench("bench/bot_throughput.py", "--chats", "3", "--rounds", "1", "--repeat", "1")
    assert "mnemo / echo throughput" in out
    for bot in ("mnemo run", "bare PTB echo bot", "our Telegram channel"):
        assert f"| {bot}" in out


def test_bot_throughput_turns_only_runs() -> None:
    out = run_bench("bench/bot_throughput.py", "--turns-only", "--chats", "3", "--rounds", "1")
    assert "SQL statements per turn" in out


def test_compaction_latency_runs() -> None:
    out = run_bench(
        "bench/compaction_latency.py",
        "--sessions",
        "1",
        "--turns",
        "12",
        "--delay",
        "0.05",
        "--max-tokens",
        "200",
    )
    assert "p50 ratio triggering / non-triggering" in out


# A conversation in LoCoMo's format: two sessions, a captioned turn, and questions the
# bench must keep (categories 1-4 with whole D<n>:<m> ids) or skip (category 5, "D" only).
TOY_LOCOMO = [
    {
        "sample_id": "toy-1",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "Hi Bob, how was your week?"},
                {
                    "speaker": "Bob",
                    "dia_id": "D1:2",
                    "text": "Busy. I adopted a axolotl named Pip.",
                },
                {
                    "speaker": "Ann",
                    "dia_id": "D1:3",
                    "text": "Lovely! I went hiking in the hills.",
                    "blip_caption": "a photo of a trail in the mountains",
                },
            ],
            "session_2_date_time": "10:04 am on 19 June, 2023",
            "session_2": [
                {"speaker": "Bob", "dia_id": "D2:1", "text": "Pip likes the new tank."},
                {
                    "speaker": "Ann",
                    "dia_id": "D2:2",
                    "text": "I started a pottery class on Fridays.",
                },
                {"speaker": "Bob", "dia_id": "D2:3", "text": "Nice, send me a photo of your bowl."},
            ],
        },
        "qa": [
            {
                "question": "What pet did Bob adopt, the axolotl?",
                "answer": "an axolotl",
                "evidence": ["D1:2"],
                "category": 1,
            },
            {
                "question": "Which class did Ann start?",
                "answer": "pottery",
                "evidence": ["D2:2"],
                "category": 4,
            },
            {
                "question": "Where did Ann go hiking?",
                "answer": "the hills",
                "evidence": ["D1:3", "D2:2"],
                "category": 2,
            },
            {
                "question": "What did Bob say about axolotl Pip?",
                "answer": "-",
                "evidence": ["D1:2"],
                "category": 5,
            },
            {"question": "Unanswerable?", "answer": "-", "evidence": ["D"], "category": 1},
        ],
    }
]


def test_recall_runs(tmp_path: Path) -> None:
    data = tmp_path / "toy-locomo.json"
    data.write_text(json.dumps(TOY_LOCOMO), encoding="utf-8")
    results = tmp_path / "recall.json"
    out = run_bench(
        "-m",
        "bench.recall",
        "--data",
        str(data),
        "--modes",
        "substring,full_text",
        "--json",
        str(results),
    )
    table = [line for line in out.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    rows = [
        dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True))
        for line in table[1:]
    ]
    # The reference, then every provider x database x lexical mode, each scored.
    assert {(r["system"], r["db"], r["mode"]) for r in rows} == {
        ("reference FTS5", "sqlite :memory:", "full_text"),
        *(
            (p, db, m)
            for p in ("lcm", "simple")
            for db in ("sqlite", "postgres")
            for m in ("substring", "full_text")
        ),
    }
    for r in rows:
        assert r["questions"] == "3" and r["errors"] == "0", r
        assert all(0.0 <= float(r[f"R@{k}"]) <= 1.0 for k in (1, 5, 10, 20)), r
    # Each question's best turn holds most of its words: the reference ranks it first
    # (the hiking question has two evidence turns, one ranked first, both in the top 20).
    doc = json.loads(results.read_text())
    reference = next(r for r in doc["results"] if r["system"] == "reference FTS5")
    assert reference["recall"]["@1"] == pytest.approx(2.5 / 3, abs=1e-4)
    assert reference["recall"]["@20"] == 1.0


def test_recall_scores_the_only_turn_with_a_rare_word(tmp_path: Path) -> None:
    """Stored ids map back to the right turns on every provider and database (searched,
    and cited by delegated recall), and recall@k counts the first k results: the one turn holding "axolotl" (D1:2) comes first in
    full_text mode whatever the ranking, so the question scored against D1:2 gets 1 at k=1
    and the same question scored against D2:1 ("Pip", second for the reference) gets 0."""
    data = tmp_path / "probe.json"
    probes = [
        {"question": "axolotl named Pip", "answer": "-", "evidence": [turn], "category": 1}
        for turn in ("D1:2", "D2:1")
    ]
    data.write_text(json.dumps([{**TOY_LOCOMO[0], "qa": probes}]), encoding="utf-8")
    results = tmp_path / "recall.json"
    run_bench(
        "-m",
        "bench.recall",
        "--data",
        str(data),
        "--modes",
        "full_text,recall",
        "--json",
        str(results),
    )
    rows = json.loads(results.read_text())["results"]
    assert [(r["system"], r["db"], r["mode"], r["recall"]["@1"]) for r in rows] == [
        ("reference FTS5", "sqlite :memory:", "full_text", 0.5),
        *(
            (p, db, mode, 0.5)
            for p in ("lcm", "simple")
            for db in ("sqlite", "postgres")
            for mode in ("full_text", "recall")
        ),
    ]
    assert rows[0]["recall"]["@5"] == 1.0
    # Delegated recall cites what it read, the axolotl turn first; each call is counted.
    cited = [r for r in rows if r["mode"] == "recall"]
    assert all(r["errors"] == 0 and r["tokens_per_question"] > 0 for r in cited), cited


def test_cost_runs() -> None:
    out = run_bench(
        "bench/cost.py", "--turns", "12", "--providers", "lcm,simple", "--configs", "6000/2000/4"
    )
    assert "| mnemo lcm, 6000/2000/4 |" in out and "| mnemo simple, 6000/2000/4 |" in out
    assert "| reference: last 15 messages |" in out


def test_forget_bench_runs() -> None:
    out = run_bench(
        "bench/forget_bench.py", "--messages", "1200", "--users", "2", "--provider", "lcm,simple"
    )
    rows = [line for line in out.splitlines() if line.startswith("| sqlite |")]
    assert len(rows) == 2 and all(row.endswith("| yes |") for row in rows), out


def test_web_pages_runs() -> None:
    out = run_bench(
        "bench/web_pages.py",
        "--sessions",
        "12",
        "--messages",
        "600",
        "--db",
        "sqlite",
        "--repeat",
        "1",
    )
    for provider in ("lcm", "simple"):
        assert f"| sqlite | {provider} | graph, a node open |" in out
        assert f"| sqlite | {provider} | search full_text |" in out


def test_import_bench_runs() -> None:
    out = run_bench(
        "bench/import_bench.py", "--messages", "600", "--chats", "2", "--provider", "lcm",
        "--db", "sqlite",
    )  # fmt: skip
    rows = [line for line in out.splitlines() if line.startswith("| lcm | sqlite |")]
    assert len(rows) == 2 and all(row.endswith("| yes |") for row in rows), out


def test_search_scale_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "bench/search_scale.py", "--sizes", "400", "--db", "sqlite"]
        + ["--questions", "3", "--words", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=scaled(240),
        env={**os.environ, "MNEMO_SCALE_CACHE": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| 400 | sqlite | question |" in done.stdout
    assert (tmp_path / "sqlite-400-v2.db").exists()  # cached for the next run


def test_timeline_runs(tmp_path: Path) -> None:
    """bench/timeline.py on the toy conversation: the scripted facts end as expected, and
    a temporal question naming its month is scored with and without the date filter."""
    toy = json.loads(json.dumps(TOY_LOCOMO))
    toy[0]["qa"].append(
        {
            "question": "What did Bob say about Pip in June 2023?",
            "answer": "likes the tank",
            "evidence": ["D2:1"],
            "category": 2,
        }
    )
    data = tmp_path / "toy-locomo.json"
    data.write_text(json.dumps(toy), encoding="utf-8")
    out = run_bench("bench/timeline.py", "--provider", "lcm", "--data", str(data))
    assert "| lcm | sqlite | 6/6 | 0 | 0 | 0 | 0 | 0 |" in out, out
    dated = [line for line in out.splitlines() if line.startswith("| lcm (dated only")]
    assert len(dated) == 3 and all("| sqlite | 1 |" in line for line in dated), out
    # The filter keeps June: the one evidence turn is first, with the filter.
    assert "| lcm (dated only, filter +0d) | sqlite | 1 | 1.000 |" in out, out
