"""How far memory.text.tokens.estimate_tokens is from a real tokenizer, per script.

The texts are bench/data/token_samples.json (written by hand: the same few chat
messages in English, code, numbers, French/German/Spanish, Cyrillic, Greek, Chinese,
Japanese, Korean, Arabic/Hebrew, Hindi/Thai, emoji and mixtures). Their token counts
under GPT-4o's tokenizer (o200k_base) and GPT-4's (cl100k_base) are recorded in
bench/data/token_counts.json, made by bench/token_counts.js with the npm package
`gpt-tokenizer` (its vocabularies ship inside the package; nothing is downloaded at
run time, and the bot never uses it):

    mkdir /tmp/tok && (cd /tmp/tok && npm install gpt-tokenizer@2)
    NODE_PATH=/tmp/tok/node_modules node bench/token_counts.js \\
        < bench/data/token_samples.json > bench/data/token_counts.json

    python -m bench.token_estimate            # the table (also len/4, the old estimate)

tests/memory/test_tokens.py holds the estimate to these recorded counts.
"""

from __future__ import annotations

import json
from pathlib import Path

from memory.text.tokens import estimate_tokens

DATA = Path(__file__).parent / "data"


def load() -> dict[str, list[tuple[str, int, int]]]:
    """script -> [(text, o200k tokens, cl100k tokens)]."""
    samples = json.loads((DATA / "token_samples.json").read_text(encoding="utf-8"))
    counts = json.loads((DATA / "token_counts.json").read_text(encoding="utf-8"))
    return {
        name: [(t, c[0], c[1]) for t, c in zip(texts, counts[name], strict=True)]
        for name, texts in samples.items()
    }


def table() -> str:
    rows = [
        "| script | chars | o200k | cl100k | estimate | est/o200k | len/4 | len/4 / o200k |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, items in load().items():
        chars = sum(len(t) for t, _, _ in items)
        o200k = sum(o for _, o, _ in items)
        cl100k = sum(c for _, _, c in items)
        est = sum(estimate_tokens(t) for t, _, _ in items)
        old = sum((len(t) + 3) // 4 for t, _, _ in items)
        rows.append(
            f"| {name} | {chars} | {o200k} | {cl100k} | {est} | {est / o200k:.2f} "
            f"| {old} | {old / o200k:.2f} |"
        )
    return "\n".join(rows)


def main() -> None:
    print(table())


if __name__ == "__main__":
    main()
