"""FakeTelegramServer: a small Bot API server on 127.0.0.1 with long polling and error injection."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import itertools
import json
import re
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tests.helpers.serving import LoopbackServer

_STATUS_TEXT = {
    400: "Bad Request",
    401: "Unauthorized",
    409: "Conflict",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}
_COMMAND = re.compile(r"^/[A-Za-z0-9_]+(?:@[A-Za-z0-9_]+)?")
_MENTION = re.compile(r"(?<![\w@])@[A-Za-z0-9_]{3,32}")


@dataclasses.dataclass(frozen=True)
class SentMessage:
    chat_id: int
    text: str
    message_id: int
    reply_to: int | None = None
    thread_id: int | None = None


@dataclasses.dataclass(frozen=True)
class Failure:
    status: int
    description: str
    retry_after: int | None = None


class FakeTelegramServer(LoopbackServer):
    """A real HTTP server speaking the Bot API at `{base_url}{token}/{method}`.

    `async with FakeTelegramServer() as server:` (or `with FakeTelegramServer.run_in_thread()`
    for subprocess tests). Tests inject user messages with `send_text`, read what the bot
    did from `sent`, `chat_actions`, `deleted`, `commands` and `calls` (every call, in
    order: (method, params)), and make the next calls of a method fail with `fail_next`.
    Updates stay queued until a getUpdates call confirms them with its offset, as on
    Telegram. From another thread, call the same methods: they run on the server's loop.
    """

    def __init__(self, token: str = "123456:TEST-token", username: str = "companion_test_bot") -> None:
        self.token = token
        self.bot_id = int(token.split(":", 1)[0])
        self.username = username
        self.base_url = ""
        self.port = 0
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.sent: list[SentMessage] = []
        self.chat_actions: list[tuple[int, str]] = []
        self.deleted: list[tuple[int, int]] = []
        self.commands: list[dict[str, Any]] = []
        self.get_updates_offsets: list[int | None] = []
        self._queue: list[dict[str, Any]] = []  # updates not yet confirmed
        self._delivered: dict[int, dict[str, Any]] = {}  # every update ever returned, by id
        # None in a method's queue lets one call through.
        self._failures: dict[str, collections.deque[Failure | None]] = collections.defaultdict(collections.deque)
        self._chats: dict[int, dict[str, Any]] = {}
        self._messages: dict[tuple[int, int], dict[str, Any]] = {}  # every message in a chat, by id
        self._allowed_updates: list[str] | None = None  # as the last getUpdates that named them
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(1001)
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- injecting what users do -------------------------------------------------

    def send_text(
        self,
        chat_id: int,
        user_id: int,
        text: str,
        *,
        chat_type: str = "private",
        reply_to_bot: bool = False,
        first_name: str | None = None,
        reply_to: int | None = None,
        quote: str | None = None,
        forward_origin: dict[str, Any] | None = None,
    ) -> int:
        """Queue a text message from a user, with the entities Telegram would compute; returns its message id.

        `reply_to`: the id of an earlier message of this chat (the user's or the bot's) it replies
        to, sent along whole as `reply_to_message`; `quote`: the part of that message's text the
        user selected (Bot API `TextQuote`); `forward_origin`: a Bot API `MessageOrigin` object.
        """
        extra = {"reply_to": reply_to, "quote": quote, "forward_origin": forward_origin}
        return self._in_loop(self._send_text, chat_id, user_id, text, chat_type, reply_to_bot, first_name, extra)

    def edit_text(self, chat_id: int, message_id: int, text: str) -> None:
        """The user edits an earlier message of theirs: an `edited_message` update with the new
        text, the same message id, and `edit_date` (Bot API `Message`)."""
        self._in_loop(self._edit_text, chat_id, message_id, text)

    def fail_next(
        self,
        method: str,
        status: int,
        *,
        retry_after: int | None = None,
        description: str | None = None,
        times: int = 1,
        after: int = 0,
    ) -> None:
        """Make `times` calls of `method` answer `status` (429 with retry_after for flood control),
        once `after` more calls of it have succeeded."""
        if description is None:
            description = _STATUS_TEXT.get(status, "Error")
            if retry_after is not None:
                description = f"Too Many Requests: retry after {retry_after}"
        failure = Failure(status, description, retry_after)
        self._in_loop(lambda: self._failures[method].extend([None] * after + [failure] * times))

    def redeliver(self) -> None:
        """Make every update delivered so far pending again, as when the bot stopped before confirming them."""

        def restore() -> None:
            queued = {u["update_id"] for u in self._queue}
            self._queue = sorted(
                [*self._queue, *(u for i, u in self._delivered.items() if i not in queued)],
                key=lambda u: u["update_id"],
            )
            self._notify()

        self._in_loop(restore)

    @property
    def pending_updates(self) -> int:
        return len(self._queue)

    def texts_to(self, chat_id: int) -> list[str]:
        return [m.text for m in self.sent if m.chat_id == chat_id]

    def calls_of(self, method: str) -> list[dict[str, Any]]:
        return [params for name, params in self.calls if name == method]

    # --- waiting -----------------------------------------------------------------

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until `predicate()` holds; it is re-checked after every call the bot makes."""
        deadline = asyncio.get_running_loop().time() + timeout
        while not predicate():
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise TimeoutError("FakeTelegramServer: the condition did not hold in time")
            event = self._changed
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await event.wait()

    async def wait_for_sent(self, count: int, timeout: float = 10.0) -> list[SentMessage]:
        """Wait until the bot has sent `count` messages in all; returns them all."""
        await self.wait_for(lambda: len(self.sent) >= count, timeout)
        return list(self.sent)

    async def wait_for_polling(self, timeout: float = 10.0) -> None:
        await self.wait_for(lambda: bool(self.calls_of("getUpdates")), timeout)

    def wait_for_blocking(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """`wait_for` for a test running in another thread than the server."""
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(self.wait_for(predicate, timeout), self._loop).result(timeout + 5)

    def wait_for_sent_blocking(self, count: int, timeout: float = 10.0) -> list[SentMessage]:
        self.wait_for_blocking(lambda: len(self.sent) >= count, timeout)
        return list(self.sent)

    # --- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        if self._runner is not None:
            return
        self._loop = asyncio.get_running_loop()
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._dispatch)
        await self._bind(app)
        self.base_url = f"http://127.0.0.1:{self.port}/bot"

    async def aclose(self) -> None:
        """Stop serving; safe to call twice."""
        runner, self._runner = self._runner, None
        if runner is not None:
            self._notify()
            await runner.cleanup()

    # --- the Bot API -------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.Response:
        self.hang_up_if_down(request)
        if request.match_info["token"] != self.token:
            return _error(Failure(401, "Unauthorized"))
        method = request.match_info["method"]
        params = await _params(request)
        self.calls.append((method, params))
        self._notify()
        failures = self._failures.get(method)
        if failures and (failure := failures.popleft()) is not None:
            return _error(failure)
        handler = getattr(self, f"_api_{method}", None)
        if handler is None:
            return _error(Failure(404, "Not Found: method not found"))
        result = handler(params)
        if asyncio.iscoroutine(result):
            result = await result
        self._notify()
        return web.json_response({"ok": True, "result": result})

    def _api_getMe(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._bot_user()

    def _api_deleteWebhook(self, params: dict[str, Any]) -> bool:
        return True

    def _api_setMyCommands(self, params: dict[str, Any]) -> bool:
        self.commands = list(_json_value(params.get("commands")) or [])
        return True

    def _api_sendChatAction(self, params: dict[str, Any]) -> bool:
        self.chat_actions.append((int(params["chat_id"]), str(params.get("action"))))
        return True

    def _api_deleteMessage(self, params: dict[str, Any]) -> bool:
        self.deleted.append((int(params["chat_id"]), int(params["message_id"])))
        return True

    def _api_sendMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = int(params["chat_id"])
        reply = _json_value(params.get("reply_parameters"))
        reply_to = reply.get("message_id") if isinstance(reply, dict) else params.get("reply_to_message_id")
        thread = params.get("message_thread_id")
        message = SentMessage(
            chat_id,
            str(params["text"]),
            next(self._message_ids),
            int(reply_to) if reply_to is not None else None,
            int(thread) if thread is not None else None,
        )
        self.sent.append(message)
        result = {
            "message_id": message.message_id,
            "date": int(time.time()),
            "chat": self._chat(chat_id),
            "from": self._bot_user(),
            "text": message.text,
        }
        self._messages[(chat_id, message.message_id)] = result
        return result

    def _api_sendDocument(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = int(params["chat_id"])
        document = params.get("document")
        filename = getattr(document, "filename", None) or "file"
        self.sent.append(SentMessage(chat_id, f"[document {filename}]", next(self._message_ids)))
        return {
            "message_id": self.sent[-1].message_id,
            "date": int(time.time()),
            "chat": self._chat(chat_id),
            "from": self._bot_user(),
            "document": {"file_id": f"doc{self.sent[-1].message_id}", "file_unique_id": "u", "file_name": filename},
        }

    async def _api_getUpdates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        offset = int(params["offset"]) if params.get("offset") not in (None, "") else None
        timeout = float(params.get("timeout") or 0)
        limit = int(params.get("limit") or 100)
        self.get_updates_offsets.append(offset)
        if params.get("allowed_updates") not in (None, ""):
            # Remembered until a later call names others: later updates of other kinds are not
            # kept (those created before the call still come, as the Bot API documents).
            self._allowed_updates = list(_json_value(params["allowed_updates"]) or [])
        if offset is not None:  # the offset confirms every update before it
            self._queue = [u for u in self._queue if u["update_id"] >= offset]
        deadline = asyncio.get_running_loop().time() + timeout
        while not self._queue and self._runner is not None:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                break
            event = self._changed
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await event.wait()
        batch = self._queue[:limit]
        for update in batch:
            self._delivered[update["update_id"]] = update
        return batch

    # --- internals -----------------------------------------------------------------

    def _send_text(
        self,
        chat_id: int,
        user_id: int,
        text: str,
        chat_type: str,
        reply_to_bot: bool,
        first_name: str | None,
        extra: dict[str, Any] | None = None,
    ) -> int:
        chat = self._chats.setdefault(chat_id, _chat_json(chat_id, chat_type, first_name or f"User{user_id}"))
        message_id = next(self._message_ids)
        message: dict[str, Any] = {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": chat,
            "from": {"id": user_id, "is_bot": False, "first_name": first_name or f"User{user_id}"},
            "text": text,
        }
        if entities := _entities(text):
            message["entities"] = entities
        if reply_to_bot:
            earlier = [m for m in self.sent if m.chat_id == chat_id]
            message["reply_to_message"] = {
                "message_id": earlier[-1].message_id if earlier else next(self._message_ids),
                "date": int(time.time()),
                "chat": chat,
                "from": self._bot_user(),
                "text": earlier[-1].text if earlier else "an earlier reply",
            }
        extra = extra or {}
        if extra.get("reply_to") is not None:
            replied = self._messages.get((chat_id, int(extra["reply_to"])))
            if replied is None:
                raise ValueError(f"no message {extra['reply_to']} in chat {chat_id} to reply to")
            # Telegram sends the replied-to message whole, without its own reply_to_message.
            message["reply_to_message"] = {k: v for k, v in replied.items() if k != "reply_to_message"}
            if extra.get("quote") is not None:
                position = str(replied.get("text", "")).find(extra["quote"])
                if position < 0:  # Telegram refuses a quote that is not part of the replied message
                    raise ValueError("a quote must be a part of the replied message's text")
                units = len(str(replied["text"])[:position].encode("utf-16-le")) // 2
                message["quote"] = {"text": extra["quote"], "position": units, "is_manual": True}
        if extra.get("forward_origin") is not None:
            message["forward_origin"] = _checked_origin(extra["forward_origin"])
        self._messages[(chat_id, message_id)] = message
        self._enqueue("message", message)
        return message_id

    def _enqueue(self, kind: str, message: dict[str, Any]) -> None:
        if self._allowed_updates and kind not in self._allowed_updates:
            return  # the bot did not ask for this kind of update
        self._queue.append({"update_id": next(self._update_ids), kind: message})
        self._notify()

    def _edit_text(self, chat_id: int, message_id: int, text: str) -> None:
        original = self._messages.get((chat_id, message_id))
        if original is None or original["from"].get("is_bot"):
            raise ValueError(f"no message {message_id} of a user in chat {chat_id} to edit")
        edited = {k: v for k, v in original.items() if k != "entities"}
        edited.update(text=text, edit_date=int(time.time()))
        if entities := _entities(text):
            edited["entities"] = entities
        self._messages[(chat_id, message_id)] = edited
        self._enqueue("edited_message", edited)

    def _bot_user(self) -> dict[str, Any]:
        return {"id": self.bot_id, "is_bot": True, "first_name": "Companion", "username": self.username}

    def _chat(self, chat_id: int) -> dict[str, Any]:
        return self._chats.get(chat_id) or _chat_json(chat_id, "private", "User")

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _in_loop(self, function: Callable[..., Any], *args: Any) -> Any:
        """Run `function` on the server's loop; directly when already there (or not started)."""
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop:
            return function(*args)
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(function(*args))
            except BaseException as exc:
                future.set_exception(exc)

        loop.call_soon_threadsafe(run)
        return future.result(timeout=10)


_ORIGIN_FIELDS = {
    "user": {"sender_user"},
    "hidden_user": {"sender_user_name"},
    "chat": {"sender_chat"},
    "channel": {"chat", "message_id"},
}


def _checked_origin(origin: dict[str, Any]) -> dict[str, Any]:
    """A Bot API MessageOrigin as Telegram sends it: a known `type`, a `date`, its own fields."""
    required = _ORIGIN_FIELDS.get(str(origin.get("type")))
    if required is None or "date" not in origin or not required <= set(origin):
        raise ValueError(f"not a Bot API MessageOrigin: {sorted(origin)}")
    return origin


def _chat_json(chat_id: int, chat_type: str, first_name: str) -> dict[str, Any]:
    if chat_type == "private":
        return {"id": chat_id, "type": "private", "first_name": first_name}
    return {"id": chat_id, "type": chat_type, "title": f"Group {chat_id}"}


def _entities(text: str) -> list[dict[str, Any]]:
    """bot_command and mention entities as Telegram computes them (offsets in UTF-16 code units)."""

    def units(s: str) -> int:
        return len(s.encode("utf-16-le")) // 2

    found = []
    if match := _COMMAND.match(text):
        found.append({"type": "bot_command", "offset": 0, "length": units(match.group())})
    for match in _MENTION.finditer(text):
        found.append({"type": "mention", "offset": units(text[: match.start()]), "length": units(match.group())})
    return found


async def _params(request: web.Request) -> dict[str, Any]:
    """python-telegram-bot posts form-encoded (multipart with files) bodies; JSON is accepted too."""
    if request.content_type == "application/json":
        body = await request.json()
        return dict(body) if isinstance(body, dict) else {}
    params: dict[str, Any] = dict(request.query)
    if request.method == "POST":
        form = await request.post()
        params.update(form)
    return params


def _json_value(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _error(failure: Failure) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": failure.status, "description": failure.description}
    if failure.retry_after is not None:
        body["parameters"] = {"retry_after": failure.retry_after}
    return web.json_response(body, status=failure.status)
