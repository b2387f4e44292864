"""8. Mirrors: the added cost of a normal turn with two bindings over one with none, and the
outbox dispatcher's throughput of mirror rows against the loopback fake Discord, both as
ratios against a baseline measured in the same run.

python -m bench.mirror [--quick]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/mirror.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adapters.storage.stores import sqlite_stores
from bench._common import ZeroLatencyProvider, median, ms, percentile, ratio
from bot.bootstrap import build_companion
from core.delivery.outbox import Outbox
from core.ports.clock import SystemClock
from core.turn.config import CompanionConfig
from core.values.errors import DeliveryFailed
from core.values.model import InboundMessage, OutboundDelivery

TARGET_RATIO = 1.2
USER = "100"


class _NullSender:
    """A sender that takes every row at once: the turn's own cost is what is measured."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sent = 0

    async def send_delivery(self, delivery: OutboundDelivery) -> int:
        self.sent += 1
        return 1

    async def send_text(self, chat_id: str, text: str) -> str:
        if not chat_id:
            raise DeliveryFailed("no chat", permanent=True, parts_sent=0)
        return "1"


class _Side:
    """One companion on its own temp database, with `bindings` mirrors of its Telegram DM."""

    def __init__(self, path: Path, bindings: int) -> None:
        self.stores = sqlite_stores(path)
        self.bindings = bindings
        self.outbox = Outbox(self.stores.outbox, SystemClock())
        self.senders = [_NullSender("telegram"), _NullSender("discord")]
        for sender in self.senders:
            self.outbox.register(sender)
        config = CompanionConfig(
            allowed_accounts=frozenset({f"telegram:{USER}"}), platforms=frozenset({"telegram", "discord"})
        )
        self.companion = build_companion(self.stores, ZeroLatencyProvider(), config, outbox=self.outbox)
        self._ids = iter(range(1, 10**9))

    async def start(self) -> None:
        await self.stores.database.start()
        await self.companion.start()
        for n in range(self.bindings):
            reply = await self.say(f"/mirror discord:{900 + n}")
            assert reply.startswith("Mirror"), reply

    async def say(self, text: str) -> str:
        message = InboundMessage("telegram", USER, USER, text, is_direct=True, message_id=f"m{next(self._ids)}")
        reply = await self.companion.handle(message)
        assert reply is not None
        assert reply.delivery_id is not None
        assert reply.conversation_id is not None
        await self.outbox.deliver(reply.conversation_id, reply.delivery_id)
        return reply.text

    async def turn(self) -> None:
        """What the person waits for: the turn and its reply's delivery (mirrors go in the background)."""
        await self.say("hello there, how are you today?")

    async def settle(self) -> None:
        """The turn's mirror sends, awaited outside the timed part."""
        sending = list(self.companion._sending)
        if sending:
            await asyncio.gather(*sending)

    async def aclose(self) -> None:
        await self.settle()
        await self.stores.database.aclose()


async def _turn_cost(turns: int, warmup: int, block: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-mirror-") as tmp:
        none, two = _Side(Path(tmp) / "none.db", 0), _Side(Path(tmp) / "two.db", 2)
        await none.start()
        await two.start()
        try:
            for _ in range(warmup):
                for side in (none, two):
                    await side.turn()
                    await side.settle()
            samples: dict[str, list[float]] = {"none": [], "two": [], "two_with_sends": []}
            done = 0
            while done < turns:  # alternating blocks: load from elsewhere falls on both sides alike
                n = min(block, turns - done)
                for name, side in (("none", none), ("two", two)):
                    for _ in range(n):
                        t0 = time.perf_counter()
                        await side.turn()
                        t1 = time.perf_counter()
                        await side.settle()
                        samples[name].append(t1 - t0)
                        if name == "two":
                            samples["two_with_sends"].append(time.perf_counter() - t0)
                done += n
            mirrored = two.senders[1].sent
        finally:
            await none.aclose()
            await two.aclose()
    base, bound = median(samples["none"]), median(samples["two"])
    with_sends = median(samples["two_with_sends"])
    return {
        "turns": turns,
        "none_median_ms": ms(base),
        "two_median_ms": ms(bound),
        "none_p95_ms": ms(percentile(samples["none"], 95)),
        "two_p95_ms": ms(percentile(samples["two"], 95)),
        "ratio_median": round(ratio(bound, base), 3),
        "two_with_sends_median_ms": ms(with_sends),
        "ratio_with_sends": round(ratio(with_sends, base), 3),
        "mirror_rows_sent": mirrored,
        "target_ratio": TARGET_RATIO,
        "ok": ratio(bound, base) <= TARGET_RATIO,
    }


async def _dispatch_throughput(rows: int) -> dict:
    """Mirror rows sent by `Outbox.dispatch_due` through the real Discord sender (discord.py) to the
    fake Discord on 127.0.0.1, against discord.py's own `channel.send` of as many messages."""
    from adapters.discord import discord_platform
    from core.values.edge import EdgeSettings
    from tests.helpers.adapters import PlatformRun, core_for
    from tests.helpers.fake_discord import FakeDiscordServer

    async with FakeDiscordServer() as server:
        server.echo_own_messages = False
        second = server.snowflake()
        server.channels[second] = {**server.channels[server.guild_channel_id], "id": str(second), "name": "journal"}
        channels = [server.guild_channel_id, second]
        with tempfile.TemporaryDirectory(prefix="bench-mirror-") as tmp:
            stores = sqlite_stores(Path(tmp) / "dispatch.db")
            await stores.database.start()
            outbox = Outbox(stores.outbox, SystemClock())

            async def unused(message: InboundMessage) -> None:
                return None

            entry = core_for(unused, outbox=outbox)
            platform = discord_platform(
                entry, EdgeSettings(), token=server.token, api_base=server.api_base, gateway_url=server.gateway_url
            )
            adapter = PlatformRun(platform, entry)  # its sender takes the outbox's rows once started
            await adapter.start()
            try:
                conversation = await stores.timeline.ensure_conversation(
                    InboundMessage("telegram", USER, USER, "", True).key, "direct", None, 0.0
                )
                for channel in channels:
                    await stores.bindings.add_binding(conversation.id, "discord", str(channel), 0.0)
                from core.values.model import MirrorOf

                for n in range(rows // len(channels)):
                    user = await stores.timeline.add_message(conversation.id, "user", f"message {n}", time.time())
                    assert user is not None
                    await stores.timeline.record_reply(
                        conversation.id,
                        "",
                        time.time(),
                        stored_text=f"answer {n}",
                        mirror=MirrorOf(user, "telegram DM"),
                    )
                total = len(channels) * (rows // len(channels))
                t0 = time.perf_counter()
                await outbox.dispatch_due(at_start=True)
                dispatched = time.perf_counter() - t0
                assert len(server.sent) == total, (len(server.sent), total)
                # The baseline: discord.py's own sends of as many messages, to the same channels, in order.
                client = adapter.client
                assert client is not None
                targets = [client.get_partial_messageable(c) for c in channels]
                t0 = time.perf_counter()
                for n in range(total // len(channels)):
                    for target in targets:
                        await target.send(f"[telegram DM] you: message {n}\ncompanion: answer {n}")
                bare = time.perf_counter() - t0
            finally:
                await adapter.aclose()
                await stores.database.aclose()
    return {
        "rows": total,
        "dispatch_s": round(dispatched, 3),
        "dispatch_rows_per_s": round(total / dispatched, 1),
        "bare_sends_per_s": round(total / bare, 1),
        "ratio_time": round(ratio(dispatched, bare), 3),
    }


def run(quick: bool = False) -> dict:
    if quick:
        cost = asyncio.run(_turn_cost(turns=60, warmup=10, block=20))
        throughput = asyncio.run(_dispatch_throughput(rows=40))
    else:
        cost = asyncio.run(_turn_cost(turns=300, warmup=30, block=50))
        throughput = asyncio.run(_dispatch_throughput(rows=200))
    return {**cost, "dispatch": throughput}


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
