"""FakeTelegramServer: a small Bot API server on 127.0.0.1 with long polling, webhooks and error injection."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import itertools
import json
import math
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
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
MAX_GET_FILE_BYTES = 20 * 1024 * 1024  # getFile's limit on the hosted Bot API
_EXTENSIONS = {"photo": "jpg", "thumb": "jpg", "voice": "oga", "audio": "mp3", "video": "mp4", "document": "bin"}
_COMMAND = re.compile(r"^/[A-Za-z0-9_]+(?:@[A-Za-z0-9_]+)?")
_MENTION = re.compile(r"(?<![\w@])@[A-Za-z0-9_]{3,32}")
_WEBHOOK_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
WEBHOOK_CONFLICT = (
    "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"
)


@dataclasses.dataclass(frozen=True, slots=True)
class Delivery:
    """One POST of an update to the webhook: its answer's status, or None when it timed out."""

    update_id: int
    status: int | None


@dataclasses.dataclass(frozen=True)
class SentMessage:
    """A message of the bot as the chat shows it now: an edit replaces its text, entities and
    keyboard (`edits` counts them), a deletion marks it `deleted`; `at` is when it was sent
    (time.monotonic() of the server's process)."""

    chat_id: int
    text: str
    message_id: int
    reply_to: int | None = None
    thread_id: int | None = None
    entities: tuple[dict[str, Any], ...] = dataclasses.field(default=(), hash=False)
    reply_markup: dict[str, Any] | None = None  # an inline keyboard, as sent
    at: float = dataclasses.field(default=0.0, compare=False)
    edits: int = dataclasses.field(default=0, compare=False)
    deleted: bool = dataclasses.field(default=False, compare=False)


@dataclasses.dataclass(frozen=True)
class Edit:
    """One editMessageText Telegram took: the message's new text and entities, and when
    (time.monotonic() of the server's process)."""

    chat_id: int
    message_id: int
    text: str
    entities: tuple[dict[str, Any], ...]
    at: float


class BadRequest(Exception):
    """A method refused its parameters: answered 400 with this description."""


@dataclasses.dataclass(frozen=True)
class Failure:
    status: int
    description: str
    retry_after: int | None = None
    migrate_to_chat_id: int | None = None


class FakeTelegramServer(LoopbackServer):
    """A real HTTP server speaking the Bot API at `{base_url}{token}/{method}`.

    `async with FakeTelegramServer() as server:` (or `with FakeTelegramServer.run_in_thread()`
    for subprocess tests). Tests inject user messages with `send_text`, read what the bot
    did from `sent`, `chat_actions`, `deleted`, `commands` and `calls` (every call, in
    order: (method, params)), and make the next calls of a method fail with `fail_next`.
    `sent` holds the bot's messages as the chat shows them now (an edit changes its message in
    place); `edits` records every edit taken, with its time, and `flood` turns flood control on.
    editMessageText is as strict as Telegram's: 400 "message is not modified" for the text and
    entities (and keyboard) the message has, "message to edit not found", "message can't be
    edited" (not the bot's), "message is too long" past 4096 UTF-16 code units.
    Updates stay queued until a getUpdates call confirms them with its offset, as on
    Telegram. From another thread, call the same methods: they run on the server's loop.

    Webhooks as the Bot API documents them: setWebhook (an https URL, a secret_token of 1-256 of
    A-Z a-z 0-9 _ -), deleteWebhook, getWebhookInfo; while one is set getUpdates answers 409. The
    public URL is only recorded: `deliver_to(target)` names where on 127.0.0.1 the updates are
    POSTed (as a reverse proxy would pass them on), with the secret header, one at a time per chat
    and in order, each again after an answer that is not 2xx or none within `delivery_timeout`
    (`time_out_next` makes the next answers count as too late: Telegram delivers those again).
    Every POST is in `deliveries`.
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
        self.edits: list[Edit] = []
        # Flood control (`flood`): the methods it holds, until when (time.monotonic()), and each
        # 429 it answered (method, when, retry_after).
        self._flooded: dict[str, float] = {}
        self._flood_next: dict[str, int] = {}
        self.floods: list[tuple[str, float, int]] = []
        self.commands: list[dict[str, Any]] = []
        self.get_updates_offsets: list[int | None] = []
        self.files: dict[str, tuple[str, bytes]] = {}  # file_id -> (file_path, bytes)
        self.downloads: list[str] = []  # file paths the bot downloaded
        # Inline keyboards (tests/helpers/fake_telegram.py: press_button): answered callback queries,
        # the update types the bot asked for (getUpdates `allowed_updates`; None: never said),
        # and updates Telegram never queued because their type was not asked for.
        self.callback_answers: list[dict[str, Any]] = []
        self.allowed_updates: list[str] | None = None
        self.dropped_updates: list[dict[str, Any]] = []
        self._callback_queries: dict[str, bool] = {}  # id -> answered
        self._callback_ids = itertools.count(770001)
        self._queue: list[dict[str, Any]] = []  # updates not yet confirmed
        self._delivered: dict[int, dict[str, Any]] = {}  # every update ever returned, by id
        # None in a method's queue lets one call through.
        self._failures: dict[str, collections.deque[Failure | None]] = collections.defaultdict(collections.deque)
        self._cut: collections.Counter[str] = collections.Counter()  # methods whose next answers are cut short
        self.cut_answers: list[bytes] = []  # every answer cut short, as sent
        self._chats: dict[int, dict[str, Any]] = {}
        self._messages: dict[tuple[int, int], dict[str, Any]] = {}  # every message in a chat, by id
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(1001)
        # A supergroup numbers its messages itself, from 1; a basic group shares the bot's numbering.
        self._chat_message_ids: dict[int, itertools.count[int]] = {}
        self.migrated: dict[int, int] = {}  # basic group id -> the supergroup it was upgraded to
        # sendMessage waits, unanswered and with nothing stored, while `hold_sends` is set (a send in
        # flight); with `hold_answers` it is taken (in `sent`) and then waits unanswered (a send
        # Telegram has but whose answer has not reached the bot). Both are set from the test's thread.
        self.hold_sends = False
        self.hold_answers = False
        self.hold_methods: set[str] = set()  # calls of these methods wait, unanswered, while named here
        self.holding = 0  # sendMessage requests waiting on either hold now
        self._polls_to_end = 0  # long polls to answer at once (`end_long_poll`)
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Webhooks: what setWebhook set (None: none), where updates are POSTed, and each POST.
        self.webhook: dict[str, Any] | None = None
        self.webhook_target: str | None = None
        self.delivery_timeout = 10.0
        self.deliveries: list[Delivery] = []
        self.last_webhook_error: str | None = None  # getWebhookInfo's last_error_message
        self._late_answers = 0  # the next answers of the webhook counted as timed out
        self._delivering_chats: set[object] = set()
        self._delivery_task: asyncio.Task[None] | None = None

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

    def edit_caption(self, chat_id: int, message_id: int, caption: str) -> None:
        """The user edits the caption of an earlier media message of theirs: an `edited_message`
        update with the whole message, the new caption, and `edit_date`."""
        self._in_loop(self._edit_caption, chat_id, message_id, caption)

    def send_unparsable(self, chat_id: int, user_id: int, text: str) -> int:
        """Queue a `message` update python-telegram-bot cannot parse (its `chat` lacks the required
        `type`: `Update.de_json` raises TypeError); returns its update id."""
        return self._in_loop(self._send_unparsable, chat_id, user_id, text)

    def _send_unparsable(self, chat_id: int, user_id: int, text: str) -> int:
        update_id = next(self._update_ids)
        message = {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": {"id": chat_id, "first_name": f"User{user_id}"},
            "from": {"id": user_id, "is_bot": False, "first_name": f"User{user_id}"},
            "text": text,
        }
        self._queue.append({"update_id": update_id, "message": message})
        self._notify()
        return update_id

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

    def flood(self, retry_after: int, *, methods: tuple[str, ...] = ("editMessageText",)) -> None:
        """Flood control, as Telegram applies it: the next call of each of `methods` answers 429
        with `parameters.retry_after`, and so does every later one until that many seconds have
        passed (with the seconds left, rounded up); then they go through again."""

        def arm() -> None:
            for method in methods:
                self._flood_next[method] = retry_after

        self._in_loop(arm)

    def _flood_control(self, method: str) -> Failure | None:
        now = time.monotonic()
        if (seconds := self._flood_next.pop(method, None)) is not None:
            self._flooded[method] = now + seconds
        until = self._flooded.get(method)
        if until is None or now >= until:
            self._flooded.pop(method, None)
            return None
        retry_after = max(1, math.ceil(until - now))
        self.floods.append((method, now, retry_after))
        return Failure(429, f"Too Many Requests: retry after {retry_after}", retry_after)

    def edits_of(self, chat_id: int) -> list[Edit]:
        return [edit for edit in self.edits if edit.chat_id == chat_id]

    def cut_next(self, method: str) -> None:
        """Cut short the next answer of `method` that has a result (not an empty list): its last
        bytes are missing, as from a connection a proxy dropped, so it is not JSON."""
        self._in_loop(lambda: self._cut.update([method]))

    def forget_failures(self, method: str) -> None:
        """Drop the failures still scripted for `method` (the platform works again)."""
        self._in_loop(lambda: self._failures.pop(method, None))

    def end_long_poll(self) -> None:
        """Answer the long poll waiting now (or, when none is, the next one) at once with what is queued,
        as Telegram may before the poll's timeout: a test waits for the gateway's next getUpdates without
        waiting out its long-poll timeout (25 s as shipped)."""

        def end() -> None:
            self._polls_to_end += 1
            self._notify()

        self._in_loop(end)

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

    def migrate_chat(
        self, old: int, new: int, *, by_user: int = 111, service_messages: bool = True, first_message_id: int = 1
    ) -> None:
        """Upgrade basic group `old` to supergroup `new`, as Telegram does: every later call naming
        `old` answers 400 "Bad Request: group chat was upgraded to a supergroup chat" with
        `parameters.migrate_to_chat_id`, and (with `service_messages`) the two service messages
        arrive as updates: `migrate_to_chat_id` in the old chat, `migrate_from_chat_id` in the new
        one. The supergroup numbers its messages afresh from `first_message_id`."""

        def migrate() -> None:
            self.migrated[old] = new
            self._chats[old] = _chat_json(old, "group", "")
            supergroup = self._chats[new] = _chat_json(new, "supergroup", "")
            self._chat_message_ids[new] = itertools.count(first_message_id)
            if not service_messages:
                return
            user = {"id": by_user, "is_bot": False, "first_name": f"User{by_user}"}
            now = int(time.time())
            for message in (
                {
                    "message_id": next(self._message_ids),
                    "date": now,
                    "chat": self._chats[old],
                    "from": user,
                    "migrate_to_chat_id": new,
                },
                {
                    "message_id": next(self._chat_message_ids[new]),
                    "date": now,
                    "chat": supergroup,
                    "from": user,
                    "sender_chat": supergroup,
                    "migrate_from_chat_id": old,
                },
            ):
                self._queue.append({"update_id": next(self._update_ids), "message": message})
            self._notify()

        self._in_loop(migrate)

    @property
    def pending_updates(self) -> int:
        return len(self._queue)

    def texts_to(self, chat_id: int) -> list[str]:
        """The texts of the bot's messages the chat shows now (as edited; deleted ones left out)."""
        return [m.text for m in self.sent if m.chat_id == chat_id and not m.deleted]

    def message(self, chat_id: int, message_id: int) -> SentMessage:
        """The bot's message as the chat shows it now."""
        return next(m for m in self.sent if m.chat_id == chat_id and m.message_id == message_id)

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
        app.router.add_get("/file/bot{token}/{file_path:.+}", self._download)
        await self._bind(app)
        self.base_url = f"http://127.0.0.1:{self.port}/bot"

    async def aclose(self) -> None:
        """Stop serving; safe to call twice."""
        runner, self._runner = self._runner, None
        task, self._delivery_task = self._delivery_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if runner is not None:
            self._notify()
            await runner.cleanup()

    # --- webhooks ----------------------------------------------------------------

    def deliver_to(self, target: str, *, timeout: float | None = None) -> None:
        """POST updates to `target` (http://127.0.0.1:port/path) while a webhook is set."""

        def start() -> None:
            self.webhook_target = target
            if timeout is not None:
                self.delivery_timeout = timeout
            if self._delivery_task is None:
                self._delivery_task = asyncio.get_running_loop().create_task(self._delivering())
            self._notify()

        self._in_loop(start)

    def time_out_next(self, count: int = 1) -> None:
        """Count the next `count` answers of the webhook as timed out, whatever they were (the update is
        delivered again, as when a 200 comes after Telegram stopped waiting)."""
        self._in_loop(lambda: setattr(self, "_late_answers", self._late_answers + count))

    def delivered_ids(self) -> list[int]:
        """The update ids the webhook answered 2xx in time for, in order."""
        return [d.update_id for d in self.deliveries if d.status is not None and 200 <= d.status < 300]

    async def _delivering(self) -> None:
        async with aiohttp.ClientSession() as session:
            while self._runner is not None:
                event = self._changed
                self._start_deliveries(session)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.2):
                        await event.wait()

    def _start_deliveries(self, session: aiohttp.ClientSession) -> None:
        if self.webhook is None or self.webhook_target is None:
            return
        seen: set[object] = set()
        for update in list(self._queue):
            chat = _chat_of(update)
            if chat in seen:
                continue  # one at a time per chat, in order
            seen.add(chat)
            if chat in self._delivering_chats:
                continue
            self._delivering_chats.add(chat)
            asyncio.get_running_loop().create_task(self._deliver(session, update, chat))

    async def _deliver(self, session: aiohttp.ClientSession, update: dict[str, Any], chat: object) -> None:
        status: int | None = None
        try:
            webhook, target = self.webhook, self.webhook_target
            if webhook is None or target is None:
                return
            # Under the public URL's host, as a reverse proxy passes Telegram's request on.
            headers = {"Content-Type": "application/json", "Host": urlsplit(webhook["url"]).netloc}
            if webhook.get("secret_token"):
                headers[SECRET_HEADER] = webhook["secret_token"]
            try:
                async with session.post(
                    target,
                    data=json.dumps(update).encode(),
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=self.delivery_timeout),
                ) as response:
                    await response.read()
                    status = response.status
            except (TimeoutError, aiohttp.ClientError):
                status = None
            if status is not None and self._late_answers:
                self._late_answers -= 1
                status = None
            self.deliveries.append(Delivery(update["update_id"], status))
            if status is not None and 200 <= status < 300:
                self._queue = [u for u in self._queue if u["update_id"] != update["update_id"]]
                self._delivered[update["update_id"]] = update
            else:
                self.last_webhook_error = (
                    f"Wrong response from the webhook: {status} {_STATUS_TEXT.get(status, '')}".rstrip()
                    if status is not None
                    else "Connection timed out"
                )
                await asyncio.sleep(0.1)  # Telegram waits before it tries again
        finally:
            self._delivering_chats.discard(chat)
            self._notify()

    # --- the Bot API -------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.Response:
        self.hang_up_if_down(request)
        if request.match_info["token"] != self.token:
            return _error(Failure(401, "Unauthorized"))
        method = request.match_info["method"]
        params = await _params(request)
        self.calls.append((method, params))
        self._notify()
        await self._while(lambda: method in self.hold_methods)
        failures = self._failures.get(method)
        if failures and (failure := failures.popleft()) is not None:
            return _error(failure)
        if (flooded := self._flood_control(method)) is not None:
            self._notify()
            return _error(flooded)
        if (moved := self.migrated.get(_int_or_none(params.get("chat_id")))) is not None:
            return _error(Failure(400, "Bad Request: group chat was upgraded to a supergroup chat", None, moved))
        handler = getattr(self, f"_api_{method}", None)
        if handler is None:
            return _error(Failure(404, "Not Found: method not found"))
        if method == "sendMessage":
            await self._while(lambda: self.hold_sends)
        try:
            result = handler(params)
            if asyncio.iscoroutine(result):
                result = await result
        except BadRequest as exc:
            return _error(Failure(400, f"Bad Request: {exc}"))
        self._notify()
        if method == "sendMessage":
            await self._while(lambda: self.hold_answers)
        if isinstance(result, web.Response):  # the method refused the call
            return result
        if isinstance(result, Failure):
            return _error(result)
        if self._cut[method] and result not in ([], None):
            self._cut[method] -= 1
            cut = json.dumps({"ok": True, "result": result}).encode()[:-3]
            self.cut_answers.append(cut)
            return web.Response(body=cut, content_type="application/json")
        return web.json_response({"ok": True, "result": result})

    def _api_getMe(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._bot_user()

    def _api_deleteWebhook(self, params: dict[str, Any]) -> bool:
        self.webhook = None
        if str(params.get("drop_pending_updates", "")).lower() == "true":
            self._queue = []
        return True

    def _api_setWebhook(self, params: dict[str, Any]) -> bool | Failure:
        url = str(params.get("url") or "")
        if not url:  # an empty URL removes the webhook, as deleteWebhook
            return self._api_deleteWebhook(params)
        if not url.startswith("https://"):
            return Failure(400, "Bad Request: bad webhook: An HTTPS URL must be provided for webhook")
        secret = params.get("secret_token")
        if secret is not None and not _WEBHOOK_SECRET.fullmatch(str(secret)):
            return Failure(400, "Bad Request: secret token contains unallowed characters")
        if "allowed_updates" in params:
            self.allowed_updates = list(_json_value(params["allowed_updates"]) or [])
        if str(params.get("drop_pending_updates", "")).lower() == "true":
            self._queue = []
        self.webhook = {"url": url, "secret_token": secret, "allowed_updates": self.allowed_updates}
        return True

    def _api_getWebhookInfo(self, params: dict[str, Any]) -> dict[str, Any]:
        webhook = self.webhook or {}
        info: dict[str, Any] = {
            "url": webhook.get("url", ""),
            "has_custom_certificate": False,
            "pending_update_count": len(self._queue),
        }
        if webhook:
            info["max_connections"] = 40
            if self.last_webhook_error is not None:
                info["last_error_date"] = int(time.time())
                info["last_error_message"] = self.last_webhook_error
            if self.allowed_updates is not None:
                info["allowed_updates"] = self.allowed_updates
        return info

    def _api_setMyCommands(self, params: dict[str, Any]) -> bool:
        self.commands = list(_json_value(params.get("commands")) or [])
        return True

    def _api_sendChatAction(self, params: dict[str, Any]) -> bool:
        self.chat_actions.append((int(params["chat_id"]), str(params.get("action"))))
        return True

    def _api_deleteMessage(self, params: dict[str, Any]) -> bool:
        chat_id, message_id = int(params["chat_id"]), int(params["message_id"])
        if self._messages.pop((chat_id, message_id), None) is None:
            raise BadRequest("message to delete not found")
        self.deleted.append((chat_id, message_id))
        for number, sent in enumerate(self.sent):
            if (sent.chat_id, sent.message_id) == (chat_id, message_id):
                self.sent[number] = dataclasses.replace(sent, deleted=True)
        return True

    def _api_editMessageText(self, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("inline_message_id"):
            raise BadRequest("inline messages are not faked here")
        chat_id, message_id = int(params["chat_id"]), int(params["message_id"])
        stored = self._messages.get((chat_id, message_id))
        if stored is None:
            raise BadRequest("message to edit not found")
        if not stored["from"].get("is_bot") or "text" not in stored:
            raise BadRequest("message can't be edited")
        text = str(params.get("text", ""))
        entities, refusal = check_message(text, params.get("entities"))
        if refusal is not None:
            raise BadRequest(refusal)
        markup = _inline_keyboard(params.get("reply_markup"))
        if (text, entities, markup) == (stored["text"], stored.get("entities", []), stored.get("reply_markup")):
            raise BadRequest(
                "message is not modified: specified new message content and reply markup are exactly the same"
                " as a current content and reply markup of the message"
            )
        number, shown = next(
            (i, m) for i, m in enumerate(self.sent) if (m.chat_id, m.message_id) == (chat_id, message_id)
        )
        edited = dataclasses.replace(
            shown, text=text, entities=tuple(entities), reply_markup=markup, edits=shown.edits + 1
        )
        self.sent[number] = edited
        self.edits.append(Edit(chat_id, message_id, text, tuple(entities), time.monotonic()))
        result = {**self._sent_json(edited), "date": stored["date"], "edit_date": int(time.time())}
        self._messages[(chat_id, message_id)] = result
        return result

    def _api_sendMessage(self, params: dict[str, Any]) -> dict[str, Any] | web.Response:
        chat_id = int(params["chat_id"])
        entities, refusal = check_message(str(params.get("text", "")), params.get("entities"))
        if refusal is not None:
            return _error(Failure(400, f"Bad Request: {refusal}"))
        reply = _json_value(params.get("reply_parameters"))
        reply_to = reply.get("message_id") if isinstance(reply, dict) else params.get("reply_to_message_id")
        thread = params.get("message_thread_id")
        markup = _inline_keyboard(params.get("reply_markup"))
        message = SentMessage(
            chat_id,
            str(params["text"]),
            self._next_message_id(chat_id),
            int(reply_to) if reply_to is not None else None,
            int(thread) if thread is not None else None,
            tuple(entities),
            markup,
            at=time.monotonic(),
        )
        self.sent.append(message)
        result = self._sent_json(message)
        self._messages[(chat_id, message.message_id)] = result
        return result

    def _sent_json(self, message: SentMessage) -> dict[str, Any]:
        sent: dict[str, Any] = {
            "message_id": message.message_id,
            "date": int(time.time()),
            "chat": self._chat(message.chat_id),
            "from": self._bot_user(),
            "text": message.text,
        }
        if message.entities:
            sent["entities"] = list(message.entities)
        if message.reply_markup is not None:
            sent["reply_markup"] = message.reply_markup
        return sent

    def _api_answerCallbackQuery(self, params: dict[str, Any]) -> bool:
        query_id = str(params.get("callback_query_id"))
        if self._callback_queries.get(query_id, True):  # unknown, or answered already
            raise BadRequest("query is too old and response timeout expired or query ID is invalid")
        if len(str(params.get("text") or "")) > 200:
            raise BadRequest("MESSAGE_TOO_LONG")
        self._callback_queries[query_id] = True
        self.callback_answers.append(params)
        return True

    # --- inline keyboards ------------------------------------------------------------

    def press_button(self, chat_id: int, user_id: int, message_id: int, data: str) -> str:
        """The user presses the inline button carrying `data` under the bot's message `message_id`;
        returns the callback query's id. The update is queued only if the bot asked for
        callback_query updates (its latest getUpdates `allowed_updates`), as on Telegram."""
        return self._in_loop(self._press, chat_id, user_id, message_id, data)

    def _press(self, chat_id: int, user_id: int, message_id: int, data: str) -> str:
        message = next((m for m in self.sent if m.chat_id == chat_id and m.message_id == message_id), None)
        assert message is not None and message.reply_markup is not None, "that message has no inline keyboard"
        buttons = [b for row in message.reply_markup["inline_keyboard"] for b in row]
        assert any(b.get("callback_data") == data for b in buttons), "no button carries that data"
        query_id = str(next(self._callback_ids))
        self._callback_queries[query_id] = False
        self._queue_update(
            {
                "callback_query": {
                    "id": query_id,
                    "from": {"id": user_id, "is_bot": False, "first_name": f"User{user_id}"},
                    "message": self._sent_json(message),
                    "chat_instance": f"ci{chat_id}",
                    "data": data,
                }
            }
        )
        return query_id

    def _queue_update(self, content: dict[str, Any]) -> None:
        (kind,) = content
        allowed = self.allowed_updates or [t for t in _UPDATE_TYPES if t not in _NOT_BY_DEFAULT]
        if kind not in allowed:
            self.dropped_updates.append(content)
            return
        self._queue.append({"update_id": next(self._update_ids), **content})
        self._notify()

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

    async def _api_getUpdates(self, params: dict[str, Any]) -> list[dict[str, Any]] | Failure:
        if self.webhook is not None:
            return Failure(409, WEBHOOK_CONFLICT)
        offset = int(params["offset"]) if params.get("offset") not in (None, "") else None
        timeout = float(params.get("timeout") or 0)
        limit = int(params.get("limit") or 100)
        self.get_updates_offsets.append(offset)
        if "allowed_updates" in params:  # not given: the previous setting stays
            self.allowed_updates = list(_json_value(params["allowed_updates"]) or [])
        if offset is not None:  # the offset confirms every update before it
            self._queue = [u for u in self._queue if u["update_id"] >= offset]
        deadline = asyncio.get_running_loop().time() + timeout
        while not self._queue and self._runner is not None:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                break
            if self._polls_to_end:  # a poll that would wait (not a short one) is ended (`end_long_poll`)
                self._polls_to_end -= 1
                break
            event = self._changed
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await event.wait()
        batch = self._queue[:limit]
        for update in batch:
            self._delivered[update["update_id"]] = update
        return batch

    # --- media: files, getFile and downloads ------------------------------------------
    # Payload shapes as documented (https://core.telegram.org/bots/api#message): `photo` is a list
    # of PhotoSize (file_id, file_unique_id, width, height, file_size), smallest first; a caption
    # comes with `caption_entities`. getFile refuses files over 20 MB ("file is too big"), and a
    # file is downloaded from `/file/bot<token>/<file_path>`.

    def add_file(self, data: bytes, kind: str = "file") -> dict[str, Any]:
        """Keep `data` as a file the bot may fetch; returns its file_id, file_unique_id and file_size."""
        number = len(self.files) + 1
        file_id = f"AgAC{kind}{number}x{self.bot_id}"
        self.files[file_id] = (f"{kind}s/file_{number}.{_EXTENSIONS.get(kind, 'bin')}", data)
        return {"file_id": file_id, "file_unique_id": f"AQAD{number}", "file_size": len(data)}

    def send_media(
        self,
        chat_id: int,
        user_id: int,
        fields: dict[str, Any],
        *,
        caption: str | None = None,
        chat_type: str = "private",
        first_name: str | None = None,
    ) -> int:
        """Queue a media message from a user (`fields`: e.g. {"voice": {...}}); returns its message id."""
        return self._in_loop(self._send_media, chat_id, user_id, fields, caption, chat_type, first_name)

    def send_photo(
        self,
        chat_id: int,
        user_id: int,
        image: bytes,
        *,
        caption: str | None = None,
        width: int = 800,
        height: int = 600,
    ) -> int:
        """A photo as Telegram delivers it: a thumbnail and the full size, each its own file."""
        thumb = self.add_file(image[:64], "thumb")
        full = self.add_file(image, "photo")
        scale = 90 / max(width, height)
        sizes = [
            {**thumb, "width": max(1, round(width * scale)), "height": max(1, round(height * scale))},
            {**full, "width": width, "height": height},
        ]
        return self.send_media(chat_id, user_id, {"photo": sizes}, caption=caption)

    def send_voice(self, chat_id: int, user_id: int, audio: bytes, *, duration: int = 3) -> int:
        voice = {**self.add_file(audio, "voice"), "duration": duration, "mime_type": "audio/ogg"}
        return self.send_media(chat_id, user_id, {"voice": voice})

    def _send_media(
        self,
        chat_id: int,
        user_id: int,
        fields: dict[str, Any],
        caption: str | None,
        chat_type: str,
        first_name: str | None,
    ) -> int:
        chat = self._chats.setdefault(chat_id, _chat_json(chat_id, chat_type, first_name or f"User{user_id}"))
        message_id = next(self._message_ids)
        message: dict[str, Any] = {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": chat,
            "from": {"id": user_id, "is_bot": False, "first_name": first_name or f"User{user_id}"},
            **fields,
        }
        if caption is not None:
            message["caption"] = caption
            if entities := _entities(caption):
                message["caption_entities"] = entities
        self._messages[(chat_id, message_id)] = message
        self._enqueue("message", message)
        return message_id

    def _api_getFile(self, params: dict[str, Any]) -> dict[str, Any] | Failure:
        file_id = str(params.get("file_id") or "")
        if file_id not in self.files:
            return Failure(400, "Bad Request: invalid file_id")
        path, data = self.files[file_id]
        if len(data) > MAX_GET_FILE_BYTES:
            return Failure(400, "Bad Request: file is too big")
        return {"file_id": file_id, "file_unique_id": "AQAD", "file_size": len(data), "file_path": path}

    async def _download(self, request: web.Request) -> web.Response:
        self.hang_up_if_down(request)
        path = request.match_info["file_path"]
        self.downloads.append(path)
        self._notify()
        found = [data for stored, data in self.files.values() if stored == path]
        if request.match_info["token"] != self.token or not found:
            return _error(Failure(404, "Not Found"))
        return web.Response(body=found[0], content_type="application/octet-stream")

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
        message_id = self._next_message_id(chat_id)
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

    def _next_message_id(self, chat_id: int) -> int:
        return next(self._chat_message_ids.get(chat_id, self._message_ids))

    def _enqueue(self, kind: str, message: dict[str, Any]) -> None:
        self._queue_update({kind: message})  # dropped if the bot did not ask for this kind

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

    def _edit_caption(self, chat_id: int, message_id: int, caption: str) -> None:
        original = self._messages.get((chat_id, message_id))
        if original is None or original["from"].get("is_bot") or "text" in original:  # a text has no caption
            raise ValueError(f"no media message {message_id} of a user in chat {chat_id} to edit")
        edited = {k: v for k, v in original.items() if k != "caption_entities"}
        edited.update(caption=caption, edit_date=int(time.time()))
        if entities := _entities(caption):
            edited["caption_entities"] = entities
        self._messages[(chat_id, message_id)] = edited
        self._enqueue("edited_message", edited)

    async def _while(self, held: Callable[[], bool]) -> None:
        """Wait while `held()`: a flag set from the test's thread (an asyncio.Event would belong to
        this loop), so it is polled; the wait ends with the request when the client hangs up."""
        if not held():
            return
        self.holding += 1
        self._notify()
        try:
            while held():  # noqa: ASYNC110 - polled across threads, see above
                await asyncio.sleep(0.05)
        finally:
            self.holding -= 1
            self._notify()

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


def _chat_of(update: dict[str, Any]) -> object:
    """The chat an update belongs to (its deliveries are in order), or its own id when it has none."""
    for kind in ("message", "edited_message", "channel_post"):
        if kind in update:
            return update[kind]["chat"]["id"]
    message = update.get("callback_query", {}).get("message")
    return message["chat"]["id"] if message else ("update", update["update_id"])


_UPDATE_TYPES = ("message", "edited_message", "channel_post", "callback_query", "chat_member", "message_reaction")
_NOT_BY_DEFAULT = ("chat_member", "message_reaction")


def _inline_keyboard(value: Any) -> dict[str, Any] | None:
    """A reply_markup as Telegram checks an inline keyboard: rows of buttons, each with a text and
    exactly one action; callback_data 1-64 bytes. Raises BadRequest."""
    if value in (None, ""):
        return None
    markup = _json_value(value)
    if not isinstance(markup, dict) or not isinstance(markup.get("inline_keyboard"), list):
        raise BadRequest("can't parse reply keyboard markup JSON object")
    for row in markup["inline_keyboard"]:
        if not isinstance(row, list):
            raise BadRequest('field "inline_keyboard" of the InlineKeyboardMarkup should be an Array of Arrays')
        for button in row:
            if not isinstance(button, dict) or not str(button.get("text") or ""):
                raise BadRequest("can't parse inline keyboard button: Text must be non-empty")
            actions = [k for k in button if k in ("callback_data", "url", "switch_inline_query", "pay", "web_app")]
            if len(actions) != 1:
                raise BadRequest(
                    "can't parse inline keyboard button: Text buttons are unallowed in the inline keyboard"
                )
            data = button.get("callback_data")
            if "callback_data" in button and not (isinstance(data, str) and 1 <= len(data.encode()) <= 64):
                raise BadRequest("BUTTON_DATA_INVALID")
    return markup


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


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


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
    if failure.migrate_to_chat_id is not None:
        body["parameters"] = {"migrate_to_chat_id": failure.migrate_to_chat_id}
    return web.json_response(body, status=failure.status)


# --- what sendMessage accepts (Bot API: sendMessage, MessageEntity, "Formatting options") ---------

MAX_TEXT_UNITS = 4096
ENTITY_TYPES = frozenset(
    {
        "mention", "hashtag", "cashtag", "bot_command", "url", "email", "phone_number", "bold", "italic",
        "underline", "strikethrough", "spoiler", "blockquote", "expandable_blockquote", "code", "pre",
        "text_link", "text_mention", "custom_emoji", "date_time",
    }
)  # fmt: skip
_FORMATTING = frozenset({"bold", "italic", "underline", "strikethrough", "spoiler"})
_QUOTES = frozenset({"blockquote", "expandable_blockquote"})


def check_message(text: str, raw_entities: Any) -> tuple[list[dict[str, Any]], str | None]:
    """The entities of a sendMessage call and, when Telegram would refuse the call, its reason.

    Entities: a JSON array of MessageEntity; a documented type; offset and length in UTF-16
    code units inside the text, length above zero; text_link with a url, text_mention with a
    user, custom_emoji with its id, pre's language a string. Two entities sharing characters:
    one holds the other; bold, italic, underline, strikethrough and spoiler may hold or sit in
    any entity but pre and code; a blockquote holds no blockquote; no other entity holds another.
    The text: not empty, at most 4096 UTF-16 code units.
    """
    units = len(text.encode("utf-16-le", "surrogatepass")) // 2
    if not text.strip():
        return [], "message text is empty"
    if units > MAX_TEXT_UNITS:
        return [], "message is too long"
    if raw_entities is None or raw_entities == "":
        return [], None
    entities = _json_value(raw_entities)
    if not isinstance(entities, list) or not all(isinstance(e, dict) for e in entities):
        return [], "can't parse entities: an array of MessageEntity expected"
    for entity in entities:
        kind, offset, length = entity.get("type"), entity.get("offset"), entity.get("length")
        if kind not in ENTITY_TYPES:
            return [], f"can't parse entities: unsupported entity type {kind!r}"
        if not (isinstance(offset, int) and isinstance(length, int)) or offset < 0 or length <= 0:
            return [], "can't parse entities: bad offset or length"
        if offset + length > units:
            return [], f"can't parse entities: entity at UTF-16 offset {offset} ends after the end of the text"
        needs = {"text_link": "url", "text_mention": "user", "custom_emoji": "custom_emoji_id"}.get(kind)
        if needs and not entity.get(needs):
            return [], f"can't parse entities: {kind} without {needs}"
        if kind == "pre" and not isinstance(entity.get("language", ""), str):
            return [], "can't parse entities: pre language must be a string"
    for a, b in itertools.combinations(entities, 2):
        if not _may_share(a, b):
            return [], f"can't parse entities: {a['type']} and {b['type']} overlap"
    return entities, None


def _may_share(a: dict[str, Any], b: dict[str, Any]) -> bool:
    a_end, b_end = a["offset"] + a["length"], b["offset"] + b["length"]
    if a_end <= b["offset"] or b_end <= a["offset"]:
        return True
    if a["offset"] <= b["offset"] and b_end <= a_end and _may_contain(a["type"], b["type"]):
        return True
    return b["offset"] <= a["offset"] and a_end <= b_end and _may_contain(b["type"], a["type"])


def _may_contain(outer: str, inner: str) -> bool:
    if inner in _FORMATTING:
        return outer not in ("pre", "code")
    if outer in _FORMATTING:
        return True
    return outer in _QUOTES and inner not in _QUOTES
