"""Token estimation shared by every provider and the pool: script-aware, no vocabulary.

No tokenizer ships its vocabulary in a wheel we could use at run time (tiktoken fetches
its BPE files from the internet), and the model behind `llm.base_url` may be anything.
So the estimate counts what drives a BPE tokenizer's output, by script:

- Latin words (ASCII and accented letters): about one token per common word plus a
  little per letter, a bit more per accented letter (they split merges), and a token
  per three letters past a word's twelfth (no vocabulary holds such words whole);
- digits: groups of up to three (as GPT-4o's tokenizer splits them), and a little
  per number for the separators around it;
- ASCII punctuation: most of a token each; line breaks and indentation: a token a run;
- Cyrillic, Greek, Arabic/Hebrew and Indic: a token per word plus a part per letter
  (those alphabets have fewer merges); Thai (no spaces) three quarters a letter;
- CJK ideographs, kana and hangul: most of a token per character;
- emoji: one and a half tokens each, nearly two per modifier (skin tone, joiner,
  variation selector, flag letter);
- anything else: one token per character.

The weights were fitted to GPT-4o's tokenizer (o200k_base) over bench/data/
token_samples.json (`python -m bench.token_estimate` prints the error per script;
bench/RESULTS.md has the table). Other models tokenize differently: `Calibration`
learns, per model, the ratio between what the server reports for a prompt and what
this estimate said, and the bot divides its token budgets by it.

Every count is computed by regular expressions in C (no Python loop per character):
a turn estimates its whole context.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from memory.contract.types import Message

_LATIN = re.compile(r"[A-Za-z\u00C0-\u024F\u1E00-\u1EFF]+")
# Letters past the twelfth of a word: no vocabulary holds such words whole (hashes,
# identifiers, "aaaaaaaa..."), so they cost about a token per three letters.
_LONG_WORD = 12
_LONG_LATIN = re.compile(r"[A-Za-z\u00C0-\u024F\u1E00-\u1EFF]{13,}")
_ACCENTED = re.compile(r"[\u00C0-\u024F\u1E00-\u1EFF]")
_DIGITS = re.compile(r"[0-9]+")
_PUNCT = re.compile(r"[!-/:-@\[-`{-~]")
_BREAKS = re.compile(r"(?:\n|[ \t]{2})\s*")
_NON_ASCII_RUNS = re.compile(r"[^\x00-\x7F]+")

# (characters of one script, tokens per run of them, tokens per character)
_SCRIPT_RANGES: tuple[tuple[str, float, float], ...] = (
    ("\u0400-\u052f\u1c80-\u1c8f", 1.0, 0.18),  # Cyrillic
    ("\u0370-\u03ff\u1f00-\u1fff", 1.0, 0.29),  # Greek
    ("\u0590-\u06ff\u0750-\u077f\u08a0-\u08ff", 1.0, 0.19),  # Hebrew, Arabic
    ("\u0900-\u0dff", 1.0, 0.30),  # Indic scripts
    ("\u0e00-\u0eff", 0.0, 0.75),  # Thai, Lao (written without spaces)
    # CJK ideographs, their punctuation and the full-width forms
    (
        "\u2e80-\u2fdf\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
        "\uff00-\uffef\U00020000-\U0003ffff",
        0.0,
        0.78,
    ),
    ("\u3040-\u30ff\u31f0-\u31ff", 0.0, 0.72),  # kana
    ("\uac00-\ud7af\u1100-\u11ff\u3130-\u318f", 1.0, 0.55),  # hangul
    # emoji: per character, whatever surrounds them
    (
        "\U0001f000-\U0001f1e5\U0001f200-\U0001f3fa\U0001f400-\U0001faff\u2600-\u27bf\u2b00-\u2bff",
        0.0,
        1.5,
    ),
    # emoji modifiers: joiner, variation selector, skin tones, flag letters
    ("\u200d\ufe0f\U0001f3fb-\U0001f3ff\U0001f1e6-\U0001f1ff", 0.0, 1.8),
)
_SCRIPTS = tuple(
    (re.compile(f"[{chars}]+" if per_run else f"[{chars}]"), per_run, per_char)
    for chars, per_run, per_char in _SCRIPT_RANGES
)
# Non-ASCII characters of no script above and no Latin letter: a token each.
_UNKNOWN = re.compile(
    "[^\\x00-\\x7F\u00c0-\u024f\u1e00-\u1eff"
    + "".join(chars for chars, _, _ in _SCRIPT_RANGES)
    + "]"
)
CACHE_SIZE = 65_536  # texts whose estimate is remembered
_cache: OrderedDict[tuple[int, int], int] = OrderedDict()
_cache_lock = threading.Lock()
_WORD_TOKENS, _LETTER_TOKENS, _ACCENT_TOKENS, _LONG_LETTER_TOKENS = 0.8, 0.075, 0.3, 0.33
_PUNCT_TOKENS, _BREAK_TOKENS, _NUMBER_TOKENS = 0.6, 1.0, 0.3


def _runs(pattern: re.Pattern[str], text: str) -> tuple[int, int]:
    """How many runs of `pattern` `text` holds, and how many characters they span."""
    runs = pattern.findall(text)
    return len(runs), sum(map(len, runs))


def estimate_tokens(text: str) -> int:
    """Tokens `text` takes in a prompt, estimated by script (see the module doc);
    rounded up, at least 1 for any non-empty text."""
    if not text:
        return 0
    # A turn estimates the same history again: remember texts by length and hash (not
    # the text itself, which may be half a megabyte).
    key = (len(text), hash(text))
    known = _cache.get(key)
    if known is not None:
        return known
    tokens = _estimate(text)
    with _cache_lock:
        _cache[key] = tokens
        if len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return tokens


def estimate_uncached(text: str) -> int:
    """`estimate_tokens` without the cache: for the many prefixes of one text a binary
    search tries, which would only evict what is worth remembering."""
    return _estimate(text) if text else 0


def _estimate(text: str) -> int:
    words, letters = _runs(_LATIN, text)
    total = _WORD_TOKENS * words + _LETTER_TOKENS * letters
    long_letters = sum(len(w) - _LONG_WORD for w in _LONG_LATIN.findall(text))
    total += (_LONG_LETTER_TOKENS - _LETTER_TOKENS) * long_letters
    digits = _DIGITS.findall(text)
    total += sum((len(d) + 2) // 3 for d in digits) + _NUMBER_TOKENS * len(digits)
    total += _PUNCT_TOKENS * len(_PUNCT.findall(text))
    total += _BREAK_TOKENS * len(_BREAKS.findall(text))
    if not text.isascii():
        # Only the non-ASCII runs, apart (a space keeps each run a run of its own).
        rest = " ".join(_NON_ASCII_RUNS.findall(text))
        total += _ACCENT_TOKENS * len(_ACCENTED.findall(rest))
        for pattern, per_run, per_char in _SCRIPTS:
            runs, chars = _runs(pattern, rest)
            total += per_run * runs + per_char * chars
        total += len(_UNKNOWN.findall(rest))
    return max(1, math.ceil(total))


def message_tokens(msg: Message) -> int:
    return estimate_tokens(msg.text())


def messages_tokens(msgs: Iterable[Message]) -> int:
    return sum(message_tokens(m) for m in msgs)


# --- calibration against what the server reports -----------------------------------

# The learnt ratio stays within these bounds (a server that reports nonsense, or a
# prompt mostly of images, must not make budgets absurd), moves by this fraction of
# each new observation, and ignores prompts too small to say anything.
FACTOR_BOUNDS = (0.5, 2.5)
SMOOTHING = 0.2
MIN_SAMPLE_TOKENS = 64


@dataclass
class _Ratio:
    factor: float
    samples: int


class Calibration:
    """Per model: reported prompt tokens / estimated prompt tokens, smoothed (an
    exponential moving average) and bounded. Kept in memory only: it is relearnt in a
    few turns after a start, and a replica learns its own."""

    def __init__(self) -> None:
        self._ratios: dict[str, _Ratio] = {}
        self._lock = threading.Lock()

    def observe(self, model: str, estimated: int, reported: int) -> None:
        """One request: the estimate of its prompt and what the server counted."""
        if estimated < MIN_SAMPLE_TOKENS or reported <= 0:
            return
        low, high = FACTOR_BOUNDS
        ratio = min(high, max(low, reported / estimated))
        with self._lock:
            known = self._ratios.get(model)
            if known is None:
                self._ratios[model] = _Ratio(ratio, 1)
            else:
                known.factor += SMOOTHING * (ratio - known.factor)
                known.samples += 1

    def factor(self, model: str) -> float:
        """The ratio learnt for `model`; 1.0 before any report."""
        known = self._ratios.get(model)
        return known.factor if known is not None else 1.0

    def samples(self, model: str) -> int:
        known = self._ratios.get(model)
        return known.samples if known is not None else 0

    def scaled_budget(self, model: str, budget: int) -> int:
        """`budget` real tokens in estimated ones: the budget the estimate is held to,
        so that what the server counts stays within `budget`."""
        return max(1, int(budget / self.factor(model)))


# --- a request as the server sees it ------------------------------------------------

# What each message adds around its content (role, separators) in OpenAI's chat format.
MESSAGE_OVERHEAD = 4


def _content_text(content: object) -> tuple[str, int]:
    """A message's text, and how many non-text parts (images) it holds."""
    if isinstance(content, str):
        return content, 0
    if isinstance(content, list):
        texts = [p.get("text", "") for p in content if isinstance(p, dict) and "text" in p]
        return " ".join(str(t) for t in texts), len(content) - len(texts)
    return "", 0


def request_tokens(messages: Iterable[dict[str, object]], tools: object = None) -> tuple[int, int]:
    """The estimated prompt tokens of an OpenAI chat request (its messages, their tool
    calls and the tool schemas), and how many image parts it holds (which the estimate
    leaves out: their cost depends on the server)."""
    total = images = 0
    for message in messages:
        text, extra = _content_text(message.get("content"))
        images += extra
        total += MESSAGE_OVERHEAD + estimate_tokens(text)
        calls = message.get("tool_calls")
        if calls:
            total += estimate_tokens(json.dumps(calls, ensure_ascii=False))
    if tools:
        total += estimate_tokens(json.dumps(tools, ensure_ascii=False))
    return total, images
