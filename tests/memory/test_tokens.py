"""The token estimate by script, held to a real tokenizer's counts (GPT-4o's o200k_base,
recorded in bench/data/token_counts.json by bench/token_counts.js), and the calibration
against what a server reports."""

from __future__ import annotations

import pytest

from bench.token_estimate import load
from memory.text.tokens import FACTOR_BOUNDS, Calibration, estimate_tokens

SAMPLES = load()


@pytest.mark.parametrize("script", sorted(SAMPLES))
def test_each_script_is_within_ten_percent_of_the_tokenizer(script: str) -> None:
    items = SAMPLES[script]
    real = sum(o for _, o, _ in items)
    estimated = sum(estimate_tokens(t) for t, _, _ in items)
    assert 0.9 <= estimated / real <= 1.1, (script, estimated, real)
    for text, o200k, _ in items:  # and no single text far off
        assert 0.6 <= estimate_tokens(text) / o200k <= 1.5, (text, o200k)


@pytest.mark.parametrize(
    ("text", "low", "high"),
    [
        ("光合作用将光能转化为化学能", 9, 13),  # CJK: about one token a character
        ("Фотосинтез преобразует световую энергию", 9, 14),  # Cyrillic: chars/3 or so
        ("👨‍👩‍👧‍👦", 9, 14),  # one family emoji: seven code points, many tokens
        ("hello world", 2, 3),
        ("x", 1, 1),
    ],
)
def test_scripts_that_len_over_4_got_wrong(text: str, low: int, high: int) -> None:
    assert low <= estimate_tokens(text) <= high


def test_empty_and_cached_estimates_agree() -> None:
    assert estimate_tokens("") == 0
    text = "Привет, 世界! " * 50
    assert estimate_tokens(text) == estimate_tokens("".join(list(text)))


def test_calibration_learns_bounded_and_smoothed() -> None:
    cal = Calibration()
    assert cal.factor("m") == 1.0 and cal.scaled_budget("m", 8000) == 8000
    cal.observe("m", estimated=10, reported=50)  # too small a prompt to say anything
    assert cal.samples("m") == 0
    cal.observe("m", estimated=1000, reported=1300)
    assert cal.factor("m") == pytest.approx(1.3)
    assert cal.scaled_budget("m", 13000) == 10000  # 13,000 real tokens are 10,000 estimated
    cal.observe("m", estimated=1000, reported=1000)
    assert cal.factor("m") == pytest.approx(1.3 + 0.2 * (1.0 - 1.3))  # moves, does not jump
    for _ in range(50):
        cal.observe("m", estimated=1000, reported=1_000_000)  # a server reporting nonsense
    assert cal.factor("m") == pytest.approx(FACTOR_BOUNDS[1], rel=1e-3)
    assert cal.factor("m") <= FACTOR_BOUNDS[1]
    assert cal.factor("other") == 1.0  # per model
