"""11. Streamed replies through `companion run` with the shipped defaults (bursts 1.5 s, one edit a
second at most), against a fake model that sends its first token after 0.5 s and then 20 tokens a
second: the time from the person's message to the first visible text (budget: the burst window +
the first token + 1.2 s), the edits of each reply and their spacing, and the CPU time the gateway
spends on a streamed reply against the same reply sent whole (`COMPANION_STREAM_EDIT_SECONDS=off`),
the two gateways side by side in the same run, in alternating turns. Telegram and Discord."""

from __future__ import annotations

import asyncio
import itertools
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench._common import median, percentile
from bench._gateway import ChildProcess, TimedBotApi, gateway
from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.fake_openai import FakeOpenAIServer, ScriptedResponse, completion_json

BURST_SECONDS = 1.5  # shipped
EDIT_SECONDS = 1.0  # shipped
FIRST_TOKEN = 0.5
TOKEN_SECONDS = 0.05  # 20 tokens a second
WORDS = 80  # a 4-second answer
SLACK = 1.2  # the allowance past burst window and first token
CPU_RATIO_BUDGET = 1.5
CHAT = 111
DISCORD_USER = 222


def _answer(n: int) -> str:
    return f"answer {n}: " + " ".join(f"word{i}" for i in range(WORDS)) + "."


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Side:
    """One `companion run` on its own fake platform; `turn` sends a message and waits for the final
    text, noting when the first text appeared, the edits and the child's CPU time."""

    def __init__(self, name: str, child: ChildProcess) -> None:
        self.name, self.child = name, child
        self.first_text: list[float] = []
        self.edits: list[int] = []
        self.gaps: list[float] = []
        self.cpu: list[float] = []
        self.turns = 0

    async def turn(self) -> None:
        self.turns += 1
        expected = _answer(self.turns)
        sent_before, edits_before = self._counts()
        cpu = _cpu_seconds(self.child.pid)
        started = self._clock()
        await self._send(f"tell me {self.turns}")
        await self._wait(lambda: self._shows(expected, sent_before, edits_before), f"answer {self.turns}")
        await asyncio.sleep(0.3)  # the delivery's mark and the lane's end, counted in its CPU time
        self.cpu.append(_cpu_seconds(self.child.pid) - cpu)
        self.first_text.append(self._sent_at(sent_before) - started)
        edits = self._edits()[edits_before:]
        self.edits.append(len(edits))
        self.gaps += [b.at - a.at for a, b in itertools.pairwise(edits)]

    # --- the platform's half --------------------------------------------------------------------

    async def ready(self) -> None: ...

    def _counts(self) -> tuple[int, int]: ...

    def _clock(self) -> float: ...

    async def _send(self, text: str) -> None: ...

    async def _wait(self, condition: Callable[[], bool], what: str) -> None: ...

    def _shows(self, expected: str, sent_before: int, edits_before: int) -> bool: ...

    def _sent_at(self, index: int) -> float: ...

    def _edits(self) -> list: ...


class _Telegram(_Side):
    def __init__(self, name: str, api: TimedBotApi, child: ChildProcess) -> None:
        super().__init__(name, child)
        self.api = api

    async def ready(self) -> None:
        await self.child.wait_until(lambda: bool(self.api.calls_of("getUpdates")), 60, "polling", self.api.wait_for)

    def _counts(self) -> tuple[int, int]:
        return len(self.api.sent), len(self.api.edits)

    def _clock(self) -> float:
        return time.perf_counter()  # TimedBotApi notes its sendMessage times on this clock

    async def _send(self, text: str) -> None:
        self.api.send_text(CHAT, CHAT, text)

    async def _wait(self, condition: Callable[[], bool], what: str) -> None:
        await self.child.wait_until(condition, 60, what, self.api.wait_for)

    def _shows(self, expected: str, sent_before: int, edits_before: int) -> bool:
        return any(m.text == expected for m in self.api.sent[sent_before:])  # edits shown in place

    def _sent_at(self, index: int) -> float:
        return self.api.sent_at[index]

    def _edits(self) -> list:
        return self.api.edits


class _Discord(_Side):
    def __init__(self, name: str, server: FakeDiscordServer, child: ChildProcess) -> None:
        super().__init__(name, child)
        self.server = server

    async def ready(self) -> None:
        await self.server.wait_for_ready(60)

    def _counts(self) -> tuple[int, int]:
        return len(self.server.sent), len(self.server.edits)

    def _clock(self) -> float:
        return time.monotonic()  # the fake Discord notes its messages' times on this clock

    async def _send(self, text: str) -> None:
        await self.server.send_dm(DISCORD_USER, text)

    async def _wait(self, condition: Callable[[], bool], what: str) -> None:
        await self.child.wait_until(condition, 60, what)

    def _shows(self, expected: str, sent_before: int, edits_before: int) -> bool:
        # The final text is the last edit of the streamed message (or the message, sent whole).
        return any(e.content == expected for e in self.server.edits[edits_before:]) or any(
            m.content == expected for m in self.server.sent[sent_before:]
        )

    def _sent_at(self, index: int) -> float:
        return self.server.sent[index].at

    def _edits(self) -> list:
        return self.server.edits


def _model() -> FakeOpenAIServer:
    model = FakeOpenAIServer()
    model.token_seconds = TOKEN_SECONDS

    def respond(body: dict) -> ScriptedResponse:
        user = next(
            (m["content"] for m in reversed(body.get("messages") or []) if m.get("role") == "user"),
            "",
        )
        number = str(user).rsplit("tell me ", 1)[-1].split()[0] if "tell me " in str(user) else "0"
        text = _answer(int(number))
        # Unstreamed, the same answer comes whole once the model would have written its last token.
        written = 0.0 if body.get("stream") else len(text.split()) * TOKEN_SECONDS
        return ScriptedResponse(body=completion_json(text), delay=FIRST_TOKEN + written)

    model.responder = respond
    return model


def _summary(side: _Side) -> dict:
    return {
        "first_text_median_s": round(median(side.first_text), 3),
        "first_text_p95_s": round(percentile(side.first_text, 95), 3),
        "edits_per_reply": side.edits,
        "min_gap_between_edits_s": round(min(side.gaps), 3) if side.gaps else None,
        # The mean: /proc counts CPU time in 10 ms ticks, too coarse for a median of a few turns.
        "cpu_per_reply_ms": round(sum(side.cpu) / len(side.cpu) * 1000, 1),
    }


async def _measure(turns: int) -> dict:
    return {"telegram": await _telegram(turns), "discord": await _discord(turns)}


async def _telegram(turns: int) -> dict:
    async with TimedBotApi(token="1:BENCH-s") as api_s, TimedBotApi(token="2:BENCH-w") as api_w, _model() as model:
        with tempfile.TemporaryDirectory(prefix="bench-stream-") as tmp:
            root = Path(tmp)
            sides: list[_Side] = []
            for name, api, edit in (("streamed", api_s, str(EDIT_SECONDS)), ("whole", api_w, "off")):
                (root / name).mkdir()
                child = gateway(
                    root / name,
                    COMPANION_TELEGRAM_TOKEN=api.token,
                    COMPANION_TELEGRAM_BASE_URL=api.base_url,
                    COMPANION_LLM_BASE_URL=model.base_url,
                    COMPANION_ALLOWED_USERS=f"telegram:{CHAT}",
                    COMPANION_BURST_SECONDS=str(BURST_SECONDS),  # shipped (the other benches turn it off)
                    COMPANION_STREAM_EDIT_SECONDS=edit,
                )
                sides.append(_Telegram(name, api, child))
            await _alternate(sides, turns)
    return {side.name: _summary(side) for side in sides}


async def _discord(turns: int) -> dict:
    async with FakeDiscordServer() as server_s, FakeDiscordServer() as server_w, _model() as model:
        with tempfile.TemporaryDirectory(prefix="bench-stream-") as tmp:
            root = Path(tmp)
            sides: list[_Side] = []
            for name, server, edit in (("streamed", server_s, str(EDIT_SECONDS)), ("whole", server_w, "off")):
                (root / name).mkdir()
                child = gateway(
                    root / name,
                    COMPANION_DISCORD_TOKEN=server.token,
                    COMPANION_DISCORD_API_BASE=server.api_base,
                    COMPANION_DISCORD_GATEWAY_URL=server.gateway_url,
                    COMPANION_LLM_BASE_URL=model.base_url,
                    COMPANION_ALLOWED_USERS=f"discord:{DISCORD_USER}",
                    COMPANION_BURST_SECONDS=str(BURST_SECONDS),  # shipped (the other benches turn it off)
                    COMPANION_STREAM_EDIT_SECONDS=edit,
                )
                sides.append(_Discord(name, server, child))
            await _alternate(sides, turns)
    return {side.name: _summary(side) for side in sides}


async def _alternate(sides: list[_Side], turns: int) -> None:
    """Start both gateways, one warm-up turn each, then `turns` turns each in alternation; stop them."""
    try:
        for side in sides:
            await side.child.start()
        for side in sides:
            await side.ready()
        await asyncio.sleep(1.0)
        for side in sides:
            await side.turn()
            _reset(side)
        for _ in range(turns):
            for side in sides:
                await side.turn()
    finally:
        for side in sides:
            await side.child.stop()


def run(*, quick: bool = False) -> dict:
    turns = 2 if quick else 8
    measured = asyncio.run(_measure(turns))
    budget = BURST_SECONDS + FIRST_TOKEN + SLACK
    telegram = measured["telegram"]
    cpu_ratios = {
        platform: round(sides["streamed"]["cpu_per_reply_ms"] / max(sides["whole"]["cpu_per_reply_ms"], 0.1), 2)
        for platform, sides in measured.items()
    }
    answer_seconds = FIRST_TOKEN + (WORDS + 3) * TOKEN_SECONDS
    most_edits = int(answer_seconds / EDIT_SECONDS) + 2  # the shown ones, plus the final edit
    first_ok = all(platform["streamed"]["first_text_p95_s"] <= budget for platform in (telegram, measured["discord"]))
    edits_ok = all(
        max(platform["streamed"]["edits_per_reply"]) <= most_edits
        and (platform["streamed"]["min_gap_between_edits_s"] or EDIT_SECONDS) >= 0.8 * EDIT_SECONDS
        for platform in (telegram, measured["discord"])
    )
    return {
        "turns": turns,
        "budget_first_text_s": budget,
        "most_edits_per_reply": most_edits,
        "cpu_ratio": cpu_ratios,
        "cpu_ratio_budget": CPU_RATIO_BUDGET,
        **measured,
        "ok": first_ok and edits_ok and max(cpu_ratios.values()) <= CPU_RATIO_BUDGET,
    }


def _reset(side: _Side) -> None:
    """Forget the warm-up turn's figures."""
    for samples in (side.first_text, side.edits, side.gaps, side.cpu):
        samples.clear()
