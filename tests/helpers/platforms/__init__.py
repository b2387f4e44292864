"""The chat apps as the tests drive them: one face per platform (a `ChatDriver` in process, a `WirePlatform`
for `companion run`), what each platform has, and one harness that starts, stops and restarts a platform."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, Self

import pytest

from adapters.llm.openai_compat import OpenAICompatibleProvider
from adapters.storage.stores import Stores
from bot.bootstrap import build_companion
from core.delivery.outbox import Outbox
from core.ports.clock import Clock
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from tests.helpers.fake_openai import FakeOpenAIServer

PLATFORMS = ("telegram", "discord", "web")
# What each platform lets a person do, by the name a test `needs`: edit a message, forward one, quote
# one (reply to it), send a photo, press a button, write while the bot is down and be caught up,
# mirror a DM to another chat of the platform, and refuse the bot's sends (a fake server's fault).
# The web chat is one text box in this process: no edit, forward, quote or upload, a message sent
# while it is down is refused, its one chat has nowhere to mirror to, and its send is a publish to the
# open pages that cannot fail (a fault there would be a fake of our own code, not of a far end).
HAS: dict[str, frozenset[str]] = {
    "telegram": frozenset({"edit", "forward", "quote", "media", "button", "catch_up", "mirror", "send_fault"}),
    "discord": frozenset({"edit", "forward", "quote", "media", "button", "catch_up", "mirror", "send_fault"}),
    "web": frozenset({"button"}),
}

needs = pytest.mark.needs  # `@needs("edit")`: generated only for the platforms that have it


def platform_cases(cases: Mapping[str, str | None]) -> list[Any]:
    """`(platform, case)` params for the cases each platform has (`cases`: case -> the feature it
    needs, or None), for a test parametrizing both: `indirect=["platform"]`."""
    return [
        pytest.param(name, case, id=f"{name}-{case}")
        for name in PLATFORMS
        for case, feature in cases.items()
        if feature is None or feature in HAS[name]
    ]


@dataclass(frozen=True)
class Origin:
    """Whose message a forward carries: the person's own message `of` (of this DM), the companion's
    answer to it, or someone else's message (dated as `of` where the platform dates a forward's
    origin; at the epoch's first second without it)."""

    who: Literal["person", "companion", "someone"]
    of: str | None = None


class Running(Protocol):
    """A platform as a driver builds it for the harness: started, then closed in the gateway's order."""

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...


class ChatDriver(Protocol):
    """One platform's chat as a person uses it, on its fake server (or in this process, for the web).

    `person`: the account, as allowed_accounts names it; `serves`: the platforms a companion serving
    it is configured with (None: as the chat adapters' tests always built it); `mirror_chat`: a chat
    of the platform a DM can be mirrored to; `forward_names`: the name the model reads for each kind
    of `Origin`; `send_tries`: the adapter's own tries of one send (what `fail_sends` refuses);
    `date_step`: how long until what the person sends is dated after a restart just made."""

    name: str
    has: frozenset[str]
    person: str
    serves: frozenset[str] | None
    mirror_chat: str | None
    forward_names: Mapping[str, str]
    send_tries: int
    date_step: float

    def build(self, companion: Companion) -> Running:
        """The platform's adapter for `companion`, on the fake server with quick timings (not started)."""
        ...

    async def attach(self, adapter: Running) -> None:
        """After the adapter started (the web chat opens its page here)."""
        ...

    async def detach(self) -> None:
        """After the adapter closed."""
        ...

    async def say(
        self, text: str, *, reply_to: str | None = None, quote: str | None = None, forward: Origin | None = None
    ) -> str:
        """Send `text` as the person in the DM and wait for the one answer it gets; its message id.
        `quote`: the part of `reply_to` quoted, where a platform quotes a part (Telegram)."""
        ...

    async def post(self, text: str) -> str:
        """Send `text` as the person, not waiting for an answer; its message id."""
        ...

    async def edit(self, message_id: str, text: str) -> None: ...

    async def send_photo(self, caption: str) -> None:
        """A photo with `caption`, waiting for the answer."""
        ...

    async def press(self, command: str) -> None:
        """Press the last answer's button that sends `command`; wait for the answer and its file."""
        ...

    def post_while_down(self, text: str) -> None:
        """Send `text` while no adapter runs (the next start catches up)."""
        ...

    def shown(self, chat: Literal["dm", "mirror"] = "dm") -> list[str]:
        """What the chat shows now: the companion's messages there, in order."""
        ...

    def sent(self) -> list[str]:
        """Every text the companion got through to the platform, any chat."""
        ...

    def fail_sends(self) -> None:
        """The next message send fails each of the adapter's `send_tries` (an outage for the outbox)."""
        ...

    def send_calls(self) -> int:
        """Message sends the adapter tried so far, failed ones too."""
        ...

    async def wait_until(self, predicate: Callable[[], bool], what: str) -> None: ...


class ChatAppDriver:
    """What the drivers of the chat apps share: their fake server (`server`, made by the subclass,
    served by `async with`), nothing to do around the adapter's start and stop, and `say` as `post`
    then one more message shown."""

    server: Any

    async def __aenter__(self) -> Self:
        await self.server.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.server.aclose()

    async def attach(self, adapter: Running) -> None:
        pass

    async def detach(self) -> None:
        pass

    async def say(
        self, text: str, *, reply_to: str | None = None, quote: str | None = None, forward: Origin | None = None
    ) -> str:
        before = len(self.shown())
        message_id = await self.post(text, reply_to=reply_to, quote=quote, forward=forward)
        await self.wait_until(lambda: len(self.shown()) > before, "the answer")
        return message_id

    async def post(
        self, text: str, *, reply_to: str | None = None, quote: str | None = None, forward: Origin | None = None
    ) -> str:
        raise NotImplementedError

    def shown(self, chat: Literal["dm", "mirror"] = "dm") -> list[str]:
        raise NotImplementedError

    async def wait_until(self, predicate: Callable[[], bool], what: str) -> None:
        raise NotImplementedError


class PlatformGateway:
    """A companion and one platform's adapter on the fake servers, on `clock`; `start` again after
    `stop` is a restart on the same store (what was sent meanwhile is caught up where the platform
    keeps it)."""

    def __init__(
        self, driver: ChatDriver, model: FakeOpenAIServer, stores: Stores, clock: Clock, passphrase_hash: str
    ) -> None:
        self.driver, self.model, self.stores, self.clock = driver, model, stores, clock
        self.passphrase_hash = passphrase_hash
        self.running: list[tuple[Running, Companion, OpenAICompatibleProvider]] = []

    async def start(self, **config: Any) -> Companion:
        driver = self.driver
        provider = OpenAICompatibleProvider(self.model.base_url, "sk-test", "test-model", timeout=5.0, max_retries=0)
        outbox = Outbox(self.stores.outbox, self.clock, base_delay=0.01, max_delay=0.01, platforms=driver.serves)
        companion = build_companion(
            self.stores,
            provider,
            CompanionConfig(
                allowed_accounts=frozenset({driver.person}),
                passphrase_hash=self.passphrase_hash,
                platforms=driver.serves,
                **config,
            ),
            clock=self.clock,
            outbox=outbox,
        )
        await companion.start()
        adapter = driver.build(companion)
        self.running.append((adapter, companion, provider))  # closed by `stop` even if its start fails
        await adapter.start()
        await driver.attach(adapter)
        return companion

    async def stop(self) -> None:
        while self.running:
            adapter, companion, provider = self.running.pop()
            await adapter.aclose()
            await self.driver.detach()
            await companion.drain()
            await provider.aclose()

    @property
    def companion(self) -> Companion:
        """The companion running now."""
        return self.running[-1][1]


# --- `companion run` in a subprocess --------------------------------------------------------------

Where = Literal["dm", "group"]
Fault = Literal["refuse", "hang", "take"]

USER = 111  # the person, allowed on both chat apps


class WirePlatform(Protocol):
    """One platform as `companion run` meets it: `wheres` its chats a test says something in, `faults`
    what it can do to the bot's sends; `account` the person's (None: the platform's one signed-in owner)."""

    name: str
    account: str | None
    wheres: tuple[Where, ...]
    faults: tuple[Fault, ...]

    def settings(self) -> dict[str, str]: ...
    def say(self, where: Where, text: str) -> None: ...
    def replies(self, where: Where) -> list[str]: ...
    def fault(self, fault: Fault) -> None: ...
    def faulted(self) -> bool: ...
    def release(self) -> None: ...


def hung_up(server: Any) -> None:
    """Until the fake server hung up on the sends it held for a process that is gone (let through
    afterwards, such a send would still be taken: a copy no gateway is waiting for)."""
    deadline = time.monotonic() + 10
    while server.holding and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not server.holding, "a send of the stopped gateway is still held"
