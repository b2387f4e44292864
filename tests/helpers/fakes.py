"""Named fakes at the port level for core tests (the wire-level fakes live beside this file)."""

from __future__ import annotations

import asyncio

from core.ports.model import PartialSink
from core.values.copy import PLACEHOLDER
from core.values.errors import ProviderUnavailable
from core.values.model import Completion, CompletionRequest, Partial


class FakeClock:
    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class FakeProvider:
    """Records every request; answers from a script, else a deterministic line. With `streams`, a
    request given a `partial` sink gets its answer's text in `stream_steps` growing pieces first
    (a tool call's start as `calling`), `stream_pause` seconds apart, each awaited as a server's
    chunk would be; `partials` records every piece handed to a sink."""

    name = "fake"

    def __init__(self) -> None:
        self.streams = False
        self.stream_steps = 4
        self.stream_pause = 0.0
        self.partials: list[Partial] = []
        self.requests: list[CompletionRequest] = []
        self.script: list[Completion | Exception] = []
        self.fail_all = False
        self.delay = 0.0
        self.gate: asyncio.Event | None = None  # when given, each request waits until it is set (10 s at most)

    async def complete(self, request: CompletionRequest, *, partial: PartialSink | None = None) -> Completion:
        completion = await self._answer(request)
        if partial is not None and self.streams:
            await self._stream(completion, partial)
        return completion

    async def _stream(self, completion: Completion, partial: PartialSink) -> None:
        text = completion.text
        for step in range(1, self.stream_steps + 1):
            piece = Partial(text[: len(text) * step // self.stream_steps])
            self.partials.append(piece)
            await partial(piece)
            if self.stream_pause:
                await asyncio.sleep(self.stream_pause)
        if completion.tool_calls:
            piece = Partial(text, calling=True)
            self.partials.append(piece)
            await partial(piece)

    async def _answer(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.gate is not None:
            async with asyncio.timeout(10):
                await self.gate.wait()
        if self.fail_all:
            raise ProviderUnavailable("fake provider is down")
        if self.script:
            item = self.script.pop(0)
            if isinstance(item, Exception):
                raise item
            return item
        if request.purpose == "summary":
            return Completion("SUMMARY:\nfolded\nFACTS:\n- none")
        return Completion(f"reply {len(self.requests)}")

    async def request_body(self, request: CompletionRequest, *, streamed: bool = False) -> None:
        return None  # nothing is sent anywhere: the requests are recorded in memory

    async def aclose(self) -> None:
        return None

    def replies(self) -> list[CompletionRequest]:
        return [r for r in self.requests if r.purpose == "reply"]

    def last_reply_request(self) -> CompletionRequest:
        return self.replies()[-1]


def request_text(request: CompletionRequest) -> str:
    """Everything a request carries, as one string, for leak checks."""
    parts = [m.content or "" for m in request.messages]
    parts += [c.arguments for m in request.messages for c in m.tool_calls]
    parts += [t.name + t.description for t in request.tools]
    return "\n".join(parts)


def placeholders(request: CompletionRequest) -> int:
    return sum(1 for m in request.messages if m.content == PLACEHOLDER)


class FakeSender:
    """A platform's sending half for the outbox (core.ports.BaseSender): records what it sent,
    part by part (`limit` characters a part), and fails as told: `fail_with` a list of
    (permanent, kind) consumed one per send attempt, or `down` for every attempt."""

    def __init__(self, name: str = "telegram", limit: int = 4096) -> None:
        self.name = name
        self.limit = limit
        self.sent: list[tuple[str, str, str | None]] = []  # (chat_id, part, reply_to)
        self.fail_with: list[tuple[bool, str]] = []
        self.down = False
        self.fail_after_parts: int | None = None  # fail once after this many parts of one delivery
        self.posts: list[tuple[str, str]] = []  # (chat_id, text) of test posts (send_text)

    async def send_delivery(self, delivery) -> int:
        from core.values.errors import DeliveryFailed

        parts = [delivery.text[i : i + self.limit] for i in range(0, len(delivery.text), self.limit)] or [""]
        if self.down:
            raise DeliveryFailed("NetworkError", permanent=False, parts_sent=delivery.parts_sent)
        if self.fail_with:
            permanent, kind = self.fail_with.pop(0)
            raise DeliveryFailed(kind, permanent=permanent, parts_sent=delivery.parts_sent)
        for index in range(delivery.parts_sent, len(parts)):
            if self.fail_after_parts is not None and index == self.fail_after_parts:
                self.fail_after_parts = None
                raise DeliveryFailed("TimedOut", permanent=False, parts_sent=index)
            self.sent.append((delivery.target.chat_id, parts[index], delivery.target.reply_to if index == 0 else None))
        return len(parts)

    async def send_text(self, chat_id: str, text: str) -> str:
        """A binding's test post: recorded in `posts`; fails as `send_delivery` does."""
        from core.values.errors import DeliveryFailed

        if self.down:
            raise DeliveryFailed("NetworkError", permanent=False, parts_sent=0)
        if self.fail_with:
            permanent, kind = self.fail_with.pop(0)
            raise DeliveryFailed(kind, permanent=permanent, parts_sent=0)
        self.posts.append((chat_id, text))
        return str(len(self.posts))

    def texts(self) -> list[str]:
        return [part for _, part, _ in self.sent]

    def texts_to(self, chat_id: str) -> list[str]:
        return [part for chat, part, _ in self.sent if chat == chat_id]


class FakeStreamer(FakeSender):
    """A platform that also shows replies while written (core.ports.BaseStreamer): `posts_shown`
    and `edits` record every post and edit of a streamed reply as (message id, text); the final
    send of a streamed delivery edits its messages (recorded in `edits`, then in `sent`)."""

    def __init__(self, name: str = "telegram", limit: int = 4096) -> None:
        super().__init__(name, limit)
        self.posts_shown: list[tuple[str, str]] = []
        self.edits: list[tuple[str, str]] = []
        self.messages: dict[str, str] = {}  # what each message shows now
        self.throttle: list[float] = []  # retry_after of the next edits, one each
        self._ids = 0

    def pieces(self, text: str, *, final: bool = False) -> list[str]:
        from adapters.rendering.pieces import stream_pieces

        return stream_pieces(text, self.limit, final=final)

    async def post(self, reply, text: str, index: int) -> str:
        self._ids += 1
        message_id = f"s{self._ids}"
        self.posts_shown.append((message_id, text))
        self.messages[message_id] = text
        return message_id

    async def edit(self, reply, message_id: str, text: str) -> None:
        from core.values.errors import DeliveryThrottled

        if self.throttle:
            raise DeliveryThrottled(self.throttle.pop(0))
        self.edits.append((message_id, text))
        self.messages[message_id] = text

    async def send_delivery(self, delivery) -> int:
        if not delivery.streamed:
            return await super().send_delivery(delivery)
        pieces = self.pieces(delivery.text, final=True)
        for index, piece in enumerate(pieces):
            if index < len(delivery.streamed):
                await self.edit(None, delivery.streamed[index], piece)
            else:
                self.messages[await self.post(None, piece, index)] = piece
            self.sent.append((delivery.target.chat_id, piece, None))
        for message_id in delivery.streamed[len(pieces) :]:
            self.messages.pop(message_id, None)  # deleted
        return len(pieces)


class FakeChatSender(FakeStreamer):
    """A platform's sending half as the core's hand-off and typing service use it (core.ports.ChatSender),
    and its streaming half: `answers` records what was sent without a row, as (target, text, confirm,
    file names); `deleted` the message ids deleted (`deletes` False: the platform cannot, as in a
    Discord DM); `typing` one chat id per typing request; `buttons` the button each row's send
    carried. `answer_pauses`: seconds the next answers take to go out, one each (a slow platform)."""

    def __init__(self, name: str = "telegram", limit: int = 4096, *, typing_every: float | None = 0.01) -> None:
        super().__init__(name, limit)
        self.typing_every = typing_every
        self.deletes = True
        self.answers: list[tuple] = []
        self.deleted: list[str | None] = []
        self.typing: list[str] = []
        self.buttons: dict[int, object] = {}
        self.answer_pauses: list[float] = []
        self.fail_answers: Exception | None = None

    async def send_answer(self, target, text: str, *, confirm=None, files=()) -> None:
        if self.answer_pauses:
            await asyncio.sleep(self.answer_pauses.pop(0))
        if self.fail_answers is not None:
            raise self.fail_answers
        self.answers.append((target, text, confirm, tuple(f.filename for f in files)))

    async def delete(self, target, message_id: str | None) -> bool:
        if not self.deletes:
            return False
        self.deleted.append(message_id)
        return True

    async def show_typing(self, target) -> None:
        self.typing.append(target.chat_id)

    async def send_delivery(self, delivery) -> int:
        self.buttons[delivery.id] = delivery.confirm
        return await super().send_delivery(delivery)

    def answer_texts(self) -> list[str]:
        return [text for _, text, _, _ in self.answers]


class FakeIntake:
    """An intake with no connection (core.ports.BaseIntake): a test hands events to the core itself."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.taking = False
        self._lost = asyncio.Event()

    async def start(self) -> None:
        self.taking = True

    async def stop_intake(self) -> None:
        self.taking = False

    async def aclose(self) -> None:
        self.taking = False

    async def wait_lost(self) -> str:
        await self._lost.wait()
        return f"{self.name}: lost"

    def ready(self) -> str | None:
        return None if self.taking else "not taking"


def fake_platform(sender: FakeChatSender, *, streams: bool = False):
    """A platform of three parts on `sender` (its streamer too, with `streams`), for the core's entry."""
    from core.ports.chat import Platform

    return Platform(sender.name, FakeIntake(sender.name), sender, streamer=sender if streams else None)


class FakeToolServers:
    """A core.ports.tools.ToolServers of the port's shape: the catalogue and states the test sets,
    every call recorded with its arguments, answered from `results` (by tool name) or a constant line.
    `on_call`: run at each call (a catalogue that changes while a turn runs)."""

    def __init__(self, tools=(), states=()) -> None:
        self.tools = list(tools)
        self.server_states = list(states)
        self.calls: list[tuple[str, str, dict]] = []
        self.results: dict = {}
        self.on_call = None

    def catalogue(self):
        return tuple(self.tools)

    def states(self):
        return tuple(self.server_states)

    async def call(self, server: str, name: str, arguments: dict):
        from core.ports.tools import ServedResult

        self.calls.append((server, name, arguments))
        if self.on_call is not None:
            self.on_call()
        return self.results.get(name) or ServedResult(f"{name} of {server} answered", "ok", 0.02)
