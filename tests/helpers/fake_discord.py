"""FakeDiscordServer: a Discord REST API and gateway on 127.0.0.1 for the real discord.py client.

One aiohttp server serves both: REST under `/api/v10` and the gateway websocket at
`/gateway`. It speaks just enough of Discord for a bot that reads and answers
messages: login (`/users/@me`, `/oauth2/applications/@me`), `/gateway/bot`,
HELLO / IDENTIFY / READY / GUILD_CREATE / heartbeat ACK / RESUME, MESSAGE_CREATE
dispatches, sending, editing, typing and deleting messages. It checks what the real one
checks where a test depends on it: the token (401 on REST, close 4004 on the
gateway), privileged intents (close 4014), `enforce_nonce` (a nonce the same author
used within the last few minutes returns that message instead of a second one; a
nonce is at most 25 characters), deleting in a DM (403), and which mentions a sent
message would ping under its `allowed_mentions`. An edit (`PATCH /channels/{id}/messages/{id}`)
is as strict as Discord's: 404 Unknown Message (10008) for a message not there, 403 (50005) for
another author's, 400 Invalid Form Body (50035) over 2000 characters and 400 (50006) for an
empty message; an edit to the same words is a 200 (Discord has no "not modified"). Every edit
is recorded with the moment it arrived (`edits`), so tests count and space them; a 429 (with
`retry_after` in the body and Discord's headers) comes when told (`fail_next("PATCH", MESSAGE, ...)`).

REST answers carry `Content-Type: application/json` exactly: discord.py parses
nothing else as JSON. Gateway payloads go out as zlib-stream binary frames when the
client asks for `compress=zlib-stream` (discord.py does), as text frames otherwise.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import dataclasses
import hashlib
import itertools
import json
import re
import time
import zlib
from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from aiohttp import WSMsgType, web

from tests.helpers.fake_discord_interactions import FakeInteractions, component_errors, invalid_form
from tests.helpers.serving import LoopbackServer

T = TypeVar("T")

API_PREFIX = "/api/v10"
DISCORD_EPOCH_MS = 1_420_070_400_000
# "If true and nonce is present, it will be checked for uniqueness in the past few minutes. If another
# message was created by the same author with the same nonce, that message will be returned and no new
# message will be created" (Create Message, `enforce_nonce`). Discord names no number: the fake keeps
# two minutes, the short end of "a few", so it never forgives a repeat that Discord would double.
NONCE_WINDOW_SECONDS = 120.0
MAX_NONCE_CHARS = 25  # "nonce: integer or string ... (up to 25 characters)"

# Gateway intents (https://discord.com/developers/docs/events/gateway#gateway-intents).
GUILD_MEMBERS = 1 << 1
GUILD_PRESENCES = 1 << 8
MESSAGE_CONTENT = 1 << 15
PRIVILEGED_INTENTS = GUILD_MEMBERS | GUILD_PRESENCES | MESSAGE_CONTENT

# Message types.
DEFAULT = 0
REPLY = 19
IS_VOICE_MESSAGE = 1 << 13  # a message flag

# Routes as `fail_next` takes them: creating messages in a channel, and editing or deleting one.
MESSAGES = "/channels/{channel_id}/messages"
MESSAGE = "/channels/{channel_id}/messages/{message_id}"

_FAULT = web.RequestKey("fault", object)
_USER_MENTION = re.compile(r"<@!?(\d+)>")
_ROLE_MENTION = re.compile(r"<@&(\d+)>")


@dataclasses.dataclass(frozen=True)
class SentMessage:
    """A message the bot created through `POST /channels/{id}/messages`."""

    id: int
    channel_id: int
    content: str
    allowed_mentions: dict[str, Any] | None
    message_reference: dict[str, Any] | None
    nonce: str | None
    enforce_nonce: bool
    files: tuple[tuple[str, bytes], ...]
    pings: frozenset[str]  # what Discord would notify: "everyone", "user:ID", "role:ID"
    at: float = 0.0  # when it was created (time.monotonic(), this process's clock)


@dataclasses.dataclass(frozen=True)
class MessageEdit:
    """An edit of one of the bot's messages that Discord took (`PATCH /channels/{id}/messages/{id}`):
    its new content, and when it arrived (time.monotonic(), this process's clock)."""

    message_id: int
    channel_id: int
    content: str
    at: float


@dataclasses.dataclass(frozen=True)
class RestFault:
    """A scripted failure for the next request to one route.

    `status` 429 gets Discord's rate-limit headers and body (`retry_after`);
    `store_then_disconnect` (message POST only) stores the message, then hangs up
    without answering, as when a response is lost on the way back.
    """

    status: int = 500
    body: Any = None
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    retry_after: float = 0.05
    store_then_disconnect: bool = False


class _Session:
    """One gateway websocket connection."""

    def __init__(self, ws: web.WebSocketResponse, compress: bool) -> None:
        self.ws = ws
        self.sequence = 0
        self.session_id: str | None = None
        self.ready = False
        self.number = 0  # the count of sessions opened until this one (FakeDiscordServer.sessions_opened)
        self.compressed = compress
        self._deflate = zlib.compressobj() if compress else None
        self._lock = asyncio.Lock()

    async def send(self, payload: dict[str, Any]) -> None:
        data = json.dumps(payload)
        async with self._lock:
            if self.ws.closed:
                return
            if self._deflate is None:
                await self.ws.send_str(data)
            else:
                # zlib-stream: one shared deflate context, each payload ends in a sync flush.
                frame = self._deflate.compress(data.encode()) + self._deflate.flush(zlib.Z_SYNC_FLUSH)
                await self.ws.send_bytes(frame)

    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        self.sequence += 1
        await self.send({"op": 0, "t": event, "s": self.sequence, "d": data})


class FakeDiscordServer(LoopbackServer):
    """A Discord REST API and gateway on 127.0.0.1 (`async with`, or `run_in_thread()` for subprocesses).

    Records: `sent` (SentMessage), `edits` (MessageEdit), `typing` (channel ids), `deleted`
    ((channel, message) ids), `identifies` and `resumes` (their payloads), `requests` ((method,
    route, status; 0 for a hang-up)), `bodies` (every REST request body), `frames` (every gateway
    frame received) and `events`, one ordered log of ("typing" | "message" | "edit" | "delete",
    channel id). `shown(channel)` is what the bot's messages there say now.
    """

    def __init__(
        self,
        *,
        token: str = "fake-discord-token",
        privileged_intents: int = MESSAGE_CONTENT,
        heartbeat_interval_ms: float = 41_250.0,
        bot_name: str = "Companion",
    ) -> None:
        self.token = token
        self.privileged_intents = privileged_intents  # enabled for the application in the portal
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.forbid_deletes = False  # the bot lacks Manage Messages in the guild
        self.echo_own_messages = True  # the gateway sends the bot its own messages, as Discord does
        self.silent_gateway = False  # accept gateway connections, then say nothing (no HELLO, no READY)
        self.refuse_gateway = False  # answer gateway connections 503, as in an outage (counted in `refused`)
        self.refused = 0
        # Message POSTs wait (unanswered, nothing stored) while this is set: sends stay in flight.
        self.hold_messages = False
        self.held_messages = 0  # message POSTs that waited so
        self.holding = 0  # message POSTs waiting on either hold now
        # Message POSTs are taken (stored, dispatched) and then wait, unanswered, while this is set:
        # a send the platform has but whose answer has not reached the bot (held in `held_answers`).
        self.hold_answers = False
        self.held_answers = 0
        # Every message POST that got past the holds and its channel check: (channel id, nonce), in
        # order, whether a message was created or its nonce returned an earlier one.
        self.message_posts: list[tuple[int, str | None]] = []
        self.nonce_window = NONCE_WINDOW_SECONDS
        self.clock: Callable[[], float] = time.monotonic  # the nonce window's clock
        self.bodies: list[bytes] = []  # every REST request body received, in order
        self.frames: list[str] = []  # every gateway frame the client sent
        self._snowflakes = itertools.count(1)
        self.bot_id = self.snowflake()
        self.app_id = self.bot_id
        self.owner_id = self.snowflake()
        self.guild_id = self.snowflake()
        self.guild_channel_id = self.snowflake()
        self.bot_role_id = self.snowflake()  # the role Discord gives a bot in each guild it joins
        self.bot_user = _user(self.bot_id, bot_name, bot=True)
        self.users: dict[int, dict[str, Any]] = {self.bot_id: self.bot_user}
        self.channels: dict[int, dict[str, Any]] = {
            self.guild_channel_id: {
                "id": str(self.guild_channel_id),
                "type": 0,
                "guild_id": str(self.guild_id),
                "name": "general",
                "position": 0,
                "permission_overwrites": [],
                "nsfw": False,
                "parent_id": None,
                "topic": None,
                "rate_limit_per_user": 0,
                "last_message_id": None,
            }
        }
        self.messages: dict[int, dict[str, Any]] = {}
        # Attachment files the CDN serves, by (channel, attachment id): (filename, bytes, signature).
        self.cdn: dict[tuple[int, int], tuple[str, bytes, str]] = {}
        self.cdn_downloads: list[int] = []  # attachment ids fetched
        self.sent: list[SentMessage] = []
        self.edits: list[MessageEdit] = []
        self.typing: list[int] = []
        self.deleted: list[tuple[int, int]] = []
        self.identifies: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str, int]] = []
        self.faults_served: list[tuple[str, str, int, float]] = []  # (method, route, status, monotonic time)
        self.events: list[tuple[str, int]] = []
        self.sessions: list[_Session] = []  # the open ones
        self.sessions_opened = 0
        self._faults: dict[tuple[str, str], collections.deque[RestFault]] = collections.defaultdict(collections.deque)
        self._nonces: dict[tuple[str, str], tuple[int, float]] = {}  # (author, nonce) -> (message, when)
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.port = 0
        # Application commands and interactions (tests/helpers/fake_discord_interactions.py).
        self.interactions = FakeInteractions(self)

    # --- addresses ---------------------------------------------------------------

    @property
    def api_base(self) -> str:
        """What COMPANION_DISCORD_API_BASE is set to (the version included, like https://discord.com/api/v10)."""
        return f"http://127.0.0.1:{self.port}{API_PREFIX}"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    def snowflake(self) -> int:
        """A fresh id shaped like Discord's: milliseconds since 2015 in the high bits."""
        ms = int(time.time() * 1000) - DISCORD_EPOCH_MS
        return (ms << 22) | (next(self._snowflakes) & 0x3FFFFF)

    # --- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        if self._runner is not None:
            return
        self._loop = asyncio.get_running_loop()
        app = web.Application(middlewares=[self._record_and_authorize])
        api = API_PREFIX
        app.router.add_get(f"{api}/users/@me", self._get_me)
        app.router.add_get(f"{api}/oauth2/applications/@me", self._get_application)
        app.router.add_get(f"{api}/gateway", self._get_gateway)
        app.router.add_get(f"{api}/gateway/bot", self._get_gateway_bot)
        app.router.add_post(f"{api}/users/@me/channels", self._create_dm)
        app.router.add_post(f"{api}/channels/{{channel_id}}/messages", self._create_message)
        app.router.add_get(f"{api}/channels/{{channel_id}}/messages", self._get_messages)
        app.router.add_get(f"{api}/channels/{{channel_id}}", self._get_channel)
        app.router.add_post(f"{api}/channels/{{channel_id}}/typing", self._trigger_typing)
        app.router.add_delete(f"{api}/channels/{{channel_id}}/messages/{{message_id}}", self._delete_message)
        app.router.add_patch(f"{api}/channels/{{channel_id}}/messages/{{message_id}}", self._edit_bot_message)
        self.interactions.add_routes(app, api)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/gateway/", self._gateway)
        app.router.add_get("/attachments/{channel_id}/{attachment_id}/{filename}", self._attachment_file)
        await self._bind(app)

    async def aclose(self) -> None:
        """Close every gateway connection and stop serving; safe to call twice."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        for session in list(self.sessions):
            with contextlib.suppress(Exception):
                await session.ws.close(code=1001)
        await runner.cleanup()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        """Run `coro` on the server's loop from another thread and return its result."""
        assert self._loop is not None, "the server is not running"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    # --- scripting ---------------------------------------------------------------

    def fail_next(self, method: str, route: str, fault: RestFault | int, *, times: int = 1) -> None:
        """Fail the next `times` requests to `route` (as written here: "/channels/{channel_id}/messages")."""
        if isinstance(fault, int):
            fault = RestFault(status=fault)
        self._faults[(method.upper(), API_PREFIX + route)].extend([fault] * times)

    def forget_faults(self, method: str, route: str) -> None:
        """Drop the failures still scripted for `route` (the platform works again)."""
        self._faults.pop((method.upper(), API_PREFIX + route), None)

    async def close_gateway(self, code: int) -> None:
        """Close every gateway connection with `code` (4000 lets the client resume, 4014 does not)."""
        for session in list(self.sessions):
            await session.ws.close(code=code)

    # --- injecting messages ------------------------------------------------------

    def dm_channel_id(self, user_id: int) -> int:
        """The DM channel between the bot and `user_id` (created on first use)."""
        for channel_id, channel in self.channels.items():
            if channel["type"] == 1 and channel["recipients"][0]["id"] == str(user_id):
                return channel_id
        channel_id = self.snowflake()
        self.channels[channel_id] = {
            "id": str(channel_id),
            "type": 1,
            "last_message_id": None,
            "recipients": [self._user_of(user_id)],
        }
        return channel_id

    async def send_dm(
        self,
        user_id: int,
        text: str,
        *,
        bot: bool = False,
        reply_to: int | None = None,
        forward_of: int | None = None,
    ) -> int:
        """A user writes to the bot in their DM; returns the message id.

        `reply_to`: an earlier message of the DM (theirs or the bot's) this one replies to
        (`message_reference` type 0, with `referenced_message`). `forward_of`: a message of any
        channel forwarded here (`message_reference` type 1, the words in `message_snapshots`,
        an empty `content`), as Discord sends forwards.
        """
        author = self._user_of(user_id, bot=bot)
        channel_id = self.dm_channel_id(user_id)
        reference = None
        if reply_to is not None:
            reference = self.messages.get(reply_to)
            if reference is None or reference["channel_id"] != str(channel_id):
                raise ValueError(f"no message {reply_to} in this DM to reply to")  # Discord: 400 Unknown message
        message = self._message(channel_id, author, "" if forward_of is not None else text, reference=reference)
        if forward_of is not None:
            original = self.messages.get(forward_of)
            if original is None:
                raise ValueError(f"no message {forward_of} to forward")
            message["message_reference"] = {
                "type": 1,
                "message_id": original["id"],
                "channel_id": original["channel_id"],
                **({"guild_id": original["guild_id"]} if "guild_id" in original else {}),
            }
            # A snapshot is a partial message: no author, no id, no channel.
            snapshot_keys = ("type", "content", "embeds", "attachments", "timestamp", "edited_timestamp", "flags")
            snapshot = {key: original[key] for key in snapshot_keys}
            snapshot.update(mentions=[], mention_roles=[])
            message["message_snapshots"] = [{"message": snapshot}]
        return await self._deliver(message)

    async def edit_message(self, message_id: int, content: str) -> None:
        """The author edits a message: MESSAGE_UPDATE with the whole message, the new content and
        its `edited_timestamp` (Discord sends the full message object on an edit)."""
        original = self.messages.get(message_id)
        if original is None or original["author"].get("bot"):
            raise ValueError(f"no user message {message_id} to edit")
        edited = {**original, "content": content, "edited_timestamp": datetime.now(UTC).isoformat()}
        edited["mentions"] = [self._user_of(int(uid)) for uid in dict.fromkeys(_USER_MENTION.findall(content))]
        self.messages[message_id] = edited
        await self._broadcast("MESSAGE_UPDATE", edited)

    async def add_link_preview(self, message_id: int, url: str) -> None:
        """Discord unfurls a link: MESSAGE_UPDATE with an embed added, the content and
        `edited_timestamp` as they were (not an edit by the author)."""
        original = self.messages.get(message_id)
        if original is None:
            raise ValueError(f"no message {message_id}")
        updated = {**original, "embeds": [*original["embeds"], {"type": "link", "url": url}]}
        self.messages[message_id] = updated
        await self._broadcast("MESSAGE_UPDATE", updated)

    async def send_guild_message(
        self,
        user_id: int,
        text: str,
        *,
        mention_bot: bool = True,
        reply_to_bot: bool = False,
        bot: bool = False,
        via_role: bool = False,
        mention_everyone: bool = False,
    ) -> int:
        """A member writes in the guild's text channel.

        `mention_bot` prefixes `<@bot>` as the client does (`<@&role>` with `via_role`, as
        clients sometimes do when the bot's role is picked); `reply_to_bot` makes it a
        reply to the bot's latest message in the channel.
        """
        author = self._user_of(user_id, bot=bot)
        token = f"<@&{self.bot_role_id}>" if via_role else f"<@{self.bot_id}>"
        content = f"{token} {text}" if mention_bot else text
        reference = None
        if reply_to_bot:
            reference = next(
                (
                    m
                    for m in reversed(self.messages.values())
                    if m["author"]["id"] == str(self.bot_id) and m["channel_id"] == str(self.guild_channel_id)
                ),
                None,
            )
            assert reference is not None, "the bot has not written in the guild channel yet"
        message = self._message(self.guild_channel_id, author, content, reference=reference)
        message["mention_everyone"] = mention_everyone
        return await self._deliver(message)

    def post_dm_while_offline(self, user_id: int, text: str, *, reply_to: int | None = None) -> int:
        """A user writes to the bot in their DM while no gateway session is there to tell: the
        message is stored (the channel's history has it), and nothing is dispatched, ever, as on
        Discord (a new session is not sent what happened before it). Returns its id.
        `reply_to`: an earlier message of the DM it replies to, as in `send_dm`."""

        def post() -> int:
            channel_id = self.dm_channel_id(user_id)
            reference = self.messages.get(reply_to) if reply_to is not None else None
            if reply_to is not None and (reference is None or reference["channel_id"] != str(channel_id)):
                raise ValueError(f"no message {reply_to} in this DM to reply to")
            message = self._message(channel_id, self._user_of(user_id), text, reference=reference)
            self.messages[int(message["id"])] = message
            return int(message["id"])

        if self._loop is None or self._loop.is_closed():
            return post()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            return post()

        async def posted() -> int:
            return post()

        return self.call(posted())

    async def send_message_create(self, message: dict[str, Any]) -> int:
        """Dispatch a hand-made MESSAGE_CREATE payload."""
        return await self._deliver(message)

    # --- media: attachments and stickers ------------------------------------------
    # An attachment is {id, filename, size, url, proxy_url, content_type} (a voice message adds
    # duration_secs and waveform, and its message the IS_VOICE_MESSAGE flag); its url is a signed
    # CDN link (ex, is, hm) served here on 127.0.0.1, 404 when the signature does not match.

    def attachment(
        self,
        channel_id: int,
        filename: str,
        data: bytes,
        content_type: str | None,
        *,
        voice_seconds: float | None = None,
    ) -> dict[str, Any]:
        """Keep `data` on the CDN and return the attachment object of a message in `channel_id`."""
        attachment_id = self.snowflake()
        expires = f"{int(time.time()) + 86400:x}"
        signature = hashlib.sha256(f"{attachment_id}{expires}".encode()).hexdigest()
        self.cdn[(channel_id, attachment_id)] = (filename, data, signature)
        url = (
            f"http://127.0.0.1:{self.port}/attachments/{channel_id}/{attachment_id}/{filename}"
            f"?ex={expires}&is={int(time.time()):x}&hm={signature}&"
        )
        payload: dict[str, Any] = {
            "id": str(attachment_id),
            "filename": filename,
            "size": len(data),
            "url": url,
            "proxy_url": url.replace("/attachments/", "/proxy/attachments/"),
        }
        if content_type is not None:
            payload["content_type"] = content_type
        if voice_seconds is not None:
            payload["duration_secs"] = voice_seconds
            payload["waveform"] = base64.b64encode(bytes(range(0, 256, 4))).decode()
        return payload

    async def send_dm_media(
        self,
        user_id: int,
        text: str = "",
        *,
        files: Sequence[tuple[str, bytes, str | None]] = (),
        voice: bytes | None = None,
        stickers: int = 0,
    ) -> int:
        """A user sends the bot files (filename, bytes, content type), a voice message, or stickers."""
        channel_id = self.dm_channel_id(user_id)
        message = self._message(channel_id, self._user_of(user_id), text)
        return await self._deliver(self._with_media(message, channel_id, files, voice, stickers))

    async def send_guild_media(
        self,
        user_id: int,
        text: str = "",
        *,
        files: Sequence[tuple[str, bytes, str | None]] = (),
    ) -> int:
        """A member sends files in the guild channel, mentioning the bot."""
        message = self._message(self.guild_channel_id, self._user_of(user_id), f"<@{self.bot_id}> {text}".strip())
        return await self._deliver(self._with_media(message, self.guild_channel_id, files, None, 0))

    def _with_media(
        self,
        message: dict[str, Any],
        channel_id: int,
        files: Sequence[tuple[str, bytes, str | None]],
        voice: bytes | None,
        stickers: int,
    ) -> dict[str, Any]:
        message["attachments"] = [self.attachment(channel_id, name, data, kind) for name, data, kind in files]
        if voice is not None:
            message["attachments"].append(
                self.attachment(channel_id, "voice-message.ogg", voice, "audio/ogg", voice_seconds=2.5)
            )
            message["flags"] = IS_VOICE_MESSAGE
        if stickers:
            message["sticker_items"] = [
                {"id": str(self.snowflake()), "name": f"sticker {n}", "format_type": 1} for n in range(stickers)
            ]
        return message

    async def _attachment_file(self, request: web.Request) -> web.Response:
        key = (int(request.match_info["channel_id"]), int(request.match_info["attachment_id"]))
        stored = self.cdn.get(key)
        if stored is None or stored[0] != request.match_info["filename"] or request.query.get("hm") != stored[2]:
            return web.Response(status=404, text="This content is no longer available.")
        self.cdn_downloads.append(key[1])
        return web.Response(body=stored[1], content_type="application/octet-stream")

    # --- reading what the bot shows ---------------------------------------------------

    def shown(self, channel_id: int) -> list[str]:
        """What the bot's messages in a channel say now (after every edit), oldest first; deleted
        ones are gone."""
        bot = str(self.bot_id)
        return [
            m["content"]
            for _, m in sorted(self.messages.items())
            if m["channel_id"] == str(channel_id) and m["author"]["id"] == bot
        ]

    def edits_of(self, message_id: int) -> list[MessageEdit]:
        return [edit for edit in self.edits if edit.message_id == message_id]

    # --- waiting -----------------------------------------------------------------

    async def wait_until(self, predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not predicate():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(
                    f"timed out after {timeout} s waiting for {what}; sent={len(self.sent)} "
                    f"requests={self.requests[-8:]}"
                )
            await asyncio.sleep(0.01)

    async def wait_for_sent(self, count: int, timeout: float = 10.0) -> list[SentMessage]:
        """Wait until the bot has sent at least `count` messages in all; returns them all."""
        await self.wait_until(lambda: len(self.sent) >= count, timeout, f"{count} sent messages")
        return list(self.sent)

    async def wait_for_ready(self, timeout: float = 10.0, *, since: int = 0) -> None:
        """Until a session opened after the first `since` ones is READY and still open (after a
        restart, pass `sessions_opened` from before it: a killed process's session may not have
        been seen closing yet)."""
        await self.wait_until(
            lambda: any(s.ready and not s.ws.closed and s.number > since for s in self.sessions),
            timeout,
            "READY to be sent",
        )

    async def settle(self, seconds: float = 0.3) -> None:
        """Give the client time to act on what it was sent (for asserting that nothing happens)."""
        await asyncio.sleep(seconds)

    # --- REST --------------------------------------------------------------------

    @web.middleware
    async def _record_and_authorize(self, request: web.Request, handler: Callable) -> web.StreamResponse:
        route = request.match_info.route.resource.canonical if request.match_info.route.resource else request.path
        if not route.startswith(API_PREFIX):
            return await handler(request)
        if (
            route not in (f"{API_PREFIX}/gateway",)
            and not FakeInteractions.needs_no_bot_token(route, API_PREFIX)
            and request.headers.get("Authorization") != f"Bot {self.token}"
        ):
            self.requests.append((request.method, route, 401))
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        if not request.content_type.startswith("multipart/"):  # a multipart body is recorded as it is parsed
            self.bodies.append(await request.read())  # read once; aiohttp keeps it for the handler
        faults = self._faults.get((request.method, route))
        fault = faults.popleft() if faults else None
        if fault is not None and not fault.store_then_disconnect:
            self.requests.append((request.method, route, fault.status))
            self.faults_served.append((request.method, route[len(API_PREFIX) :], fault.status, time.monotonic()))
            return _fault_response(fault)
        request[_FAULT] = fault
        try:
            response = await handler(request)
        except asyncio.CancelledError:
            self.requests.append((request.method, route, 0))  # hung up without an answer
            raise
        except web.HTTPNotFound:
            response = _json({"message": "404: Not Found", "code": 0}, status=404)
        self.requests.append((request.method, route, response.status))
        return response

    async def _get_me(self, request: web.Request) -> web.Response:
        return _json(self.bot_user)

    async def _get_application(self, request: web.Request) -> web.Response:
        return _json(
            {
                "id": str(self.app_id),
                "name": self.bot_user["username"],
                "description": "",
                "icon": None,
                "bot_public": False,
                "bot_require_code_grant": False,
                "verify_key": "0" * 64,
                "owner": self._user_of(self.owner_id),
                "team": None,
                # GATEWAY_MESSAGE_CONTENT_LIMITED while the portal's Message Content toggle is on.
                "flags": (1 << 19) if self.privileged_intents & MESSAGE_CONTENT else 0,
                "rpc_origins": [],
            }
        )

    async def _get_gateway(self, request: web.Request) -> web.Response:
        return _json({"url": self.gateway_url})

    async def _get_gateway_bot(self, request: web.Request) -> web.Response:
        return _json(
            {
                "url": self.gateway_url,
                "shards": 1,
                "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1},
            }
        )

    async def _create_dm(self, request: web.Request) -> web.Response:
        body = await request.json()
        return _json(self.channels[self.dm_channel_id(int(body["recipient_id"]))])

    async def _get_channel(self, request: web.Request) -> web.Response:
        channel = self.channels.get(int(request.match_info["channel_id"]))
        if channel is None:
            return _json({"message": "Unknown Channel", "code": 10003}, status=404)
        return _json(channel)

    async def _get_messages(self, request: web.Request) -> web.Response:
        """GET /channels/{id}/messages as documented: `limit` 1-100 (default 50); at most one of
        `before`, `after`, `around`; with `after`, the `limit` messages right after it, otherwise
        the newest ones (before `before`); always newest first. (`around` is not served.)"""
        channel_id = int(request.match_info["channel_id"])
        if channel_id not in self.channels:
            return _json({"message": "Unknown Channel", "code": 10003}, status=404)
        query = request.query
        anchors = [name for name in ("before", "after", "around") if name in query]
        try:
            limit = int(query.get("limit", "50"))
            anchor = int(query[anchors[0]]) if anchors else None
        except ValueError:
            return _json({"message": "Invalid Form Body", "code": 50035}, status=400)
        if not 1 <= limit <= 100 or len(anchors) > 1 or "around" in anchors:
            return _json({"message": "Invalid Form Body", "code": 50035}, status=400)
        ids = sorted(i for i, m in self.messages.items() if m["channel_id"] == str(channel_id))
        if anchors == ["after"]:
            chosen = [i for i in ids if i > anchor][:limit]
        else:
            chosen = [i for i in ids if anchor is None or i < anchor][-limit:]
        return _json([self.messages[i] for i in reversed(chosen)])

    async def _trigger_typing(self, request: web.Request) -> web.Response:
        channel_id = int(request.match_info["channel_id"])
        if channel_id not in self.channels:
            return _json({"message": "Unknown Channel", "code": 10003}, status=404)
        self.typing.append(channel_id)
        self.events.append(("typing", channel_id))
        return web.Response(status=204)

    async def _delete_message(self, request: web.Request) -> web.Response:
        channel_id = int(request.match_info["channel_id"])
        message_id = int(request.match_info["message_id"])
        message = self.messages.get(message_id)
        if message is None or message["channel_id"] != str(channel_id):
            return _json({"message": "Unknown Message", "code": 10008}, status=404)
        by_bot = message["author"]["id"] == str(self.bot_id)
        if self.channels[channel_id]["type"] == 1 and not by_bot:
            return _json({"message": "Cannot execute action on a DM channel", "code": 50003}, status=403)
        if self.forbid_deletes and not by_bot:
            return _json({"message": "Missing Permissions", "code": 50013}, status=403)
        del self.messages[message_id]
        self.deleted.append((channel_id, message_id))
        self.events.append(("delete", channel_id))
        return web.Response(status=204)

    async def _edit_bot_message(self, request: web.Request) -> web.Response:
        """PATCH /channels/{id}/messages/{id} (Edit Message), checked as Discord checks it."""
        channel_id = int(request.match_info["channel_id"])
        message_id = int(request.match_info["message_id"])
        if channel_id not in self.channels:
            return _json({"message": "Unknown Channel", "code": 10003}, status=404)
        message = self.messages.get(message_id)
        if message is None or message["channel_id"] != str(channel_id):
            return _json({"message": "Unknown Message", "code": 10008}, status=404)
        if message["author"]["id"] != str(self.bot_id):
            return _json({"message": "Cannot edit a message authored by another user", "code": 50005}, status=403)
        body, files = await _read_message_body(request)
        if request.content_type.startswith("multipart/"):
            self.bodies.append(json.dumps(body).encode() + b"".join(data for _, data in files))
        content = body["content"] if "content" in body else message["content"]
        content = content or ""
        if len(content) > 2000:
            return _json(
                {
                    "message": "Invalid Form Body",
                    "code": 50035,
                    "errors": {
                        "content": {
                            "_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]
                        }
                    },
                },
                status=400,
            )
        components = body["components"] if "components" in body else message.get("components")
        if problems := component_errors(components):
            return invalid_form({"components": problems})
        if not content and not message["attachments"] and not files and not components and not message["embeds"]:
            return _json({"message": "Cannot send an empty message", "code": 50006}, status=400)
        edited = {
            **message,
            "content": content,
            "components": components or [],
            "edited_timestamp": datetime.now(UTC).isoformat(),
            "mentions": [self._user_of(int(uid)) for uid in dict.fromkeys(_USER_MENTION.findall(content))],
        }
        self.messages[message_id] = edited
        self.edits.append(MessageEdit(message_id, channel_id, content, time.monotonic()))
        self.events.append(("edit", channel_id))
        if self.echo_own_messages:
            await self._broadcast("MESSAGE_UPDATE", edited)
        return _json(edited)

    async def _create_message(self, request: web.Request) -> web.StreamResponse:
        if self.hold_messages:
            self.held_messages += 1
        await self._while(lambda: self.hold_messages)
        channel_id = int(request.match_info["channel_id"])
        if channel_id not in self.channels:
            return _json({"message": "Unknown Channel", "code": 10003}, status=404)
        body, files = await _read_message_body(request)
        if request.content_type.startswith("multipart/"):
            self.bodies.append(json.dumps(body).encode() + b"".join(data for _, data in files))
        content = body.get("content") or ""
        if not content and not files and not body.get("components"):
            return _json({"message": "Cannot send an empty message", "code": 50006}, status=400)
        if len(content) > 2000:
            return _json(
                {
                    "message": "Invalid Form Body",
                    "code": 50035,
                    "errors": {"content": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH"}]}},
                },
                status=400,
            )
        if problems := component_errors(body.get("components")):
            return invalid_form({"components": problems})
        nonce = body.get("nonce")
        nonce = None if nonce is None else str(nonce)
        self.message_posts.append((channel_id, nonce))
        if nonce is not None and len(nonce) > MAX_NONCE_CHARS:
            return invalid_form({"nonce": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH"}]}})
        author = str(self.bot_id)
        if nonce is not None and body.get("enforce_nonce"):
            earlier = self._nonces.get((author, nonce))
            if earlier is not None and self.clock() - earlier[1] <= self.nonce_window and earlier[0] in self.messages:
                # Discord answers a repeated nonce with the message it already created.
                return _json(self.messages[earlier[0]])
        reference = body.get("message_reference")
        referenced = None
        if reference:
            referenced = self.messages.get(int(reference["message_id"]))
            if referenced is None and reference.get("fail_if_not_exists", True):
                return _json({"message": "Invalid Form Body", "code": 50035}, status=400)
        message = self._message(channel_id, self.bot_user, content, reference=referenced, nonce=nonce)
        message["components"] = body.get("components") or []
        message["attachments"] = [
            {
                "id": str(self.snowflake()),
                "filename": name,
                "size": len(data),
                "url": "http://127.0.0.1/x",
                "proxy_url": "http://127.0.0.1/x",
            }
            for name, data in files
        ]
        self.messages[int(message["id"])] = message
        if nonce is not None:
            self._nonces[(author, nonce)] = (int(message["id"]), self.clock())
        allowed = body.get("allowed_mentions")
        self.sent.append(
            SentMessage(
                id=int(message["id"]),
                channel_id=channel_id,
                content=content,
                allowed_mentions=allowed,
                message_reference=reference,
                nonce=nonce,
                enforce_nonce=bool(body.get("enforce_nonce")),
                files=tuple(files),
                pings=_pings(content, allowed, referenced),
                at=time.monotonic(),
            )
        )
        self.events.append(("message", channel_id))
        if self.echo_own_messages:
            await self._broadcast("MESSAGE_CREATE", message)
        if self.hold_answers:
            self.held_answers += 1
        await self._while(lambda: self.hold_answers)
        fault = request.get(_FAULT)
        if fault is not None and fault.store_then_disconnect:
            assert request.transport is not None
            request.transport.close()
            raise asyncio.CancelledError  # nothing may be written after the hang-up
        return _json(message)

    async def _while(self, held: Callable[[], bool]) -> None:
        """Wait while `held()`. The flags are set from the test's thread (an asyncio.Event would belong
        to this server's loop), so they are polled; the wait is cancelled when the client hangs up
        (handler_cancellation)."""
        if not held():
            return
        self.holding += 1
        try:
            while held():  # noqa: ASYNC110 - polled across threads, see above
                await asyncio.sleep(0.05)
        finally:
            self.holding -= 1

    # --- the gateway -------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        if self.refuse_gateway:
            self.refused += 1
            return web.Response(status=503, text="gateway unavailable")
        ws = web.WebSocketResponse(autoping=True, max_msg_size=0)
        await ws.prepare(request)
        session = _Session(ws, compress=request.query.get("compress") == "zlib-stream")
        self.sessions_opened += 1
        session.number = self.sessions_opened
        self.sessions.append(session)
        try:
            if self.silent_gateway:
                async for _ in ws:
                    pass
                return ws
            await session.send({"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms}})
            async for frame in ws:
                if frame.type is not WSMsgType.TEXT:
                    continue
                self.frames.append(frame.data)
                payload = json.loads(frame.data)
                op = payload.get("op")
                if op == 1:
                    await session.send({"op": 11})
                elif op == 2:
                    await self._identify(session, payload["d"])
                elif op == 6:
                    await self._resume(session, payload["d"])
        finally:
            self.sessions.remove(session)
        return ws

    async def _identify(self, session: _Session, data: dict[str, Any]) -> None:
        self.identifies.append(data)
        if data.get("token") != self.token:
            await session.ws.close(code=4004, message=b"Authentication failed.")
            return
        requested = int(data.get("intents", 0))
        if requested & PRIVILEGED_INTENTS & ~self.privileged_intents:
            await session.ws.close(code=4014, message=b"Disallowed intent(s).")
            return
        session.session_id = f"fake-session-{self.snowflake()}"
        await session.dispatch(
            "READY",
            {
                "v": 10,
                "user": self.bot_user,
                "guilds": [{"id": str(self.guild_id), "unavailable": True}],
                "session_id": session.session_id,
                "resume_gateway_url": self.gateway_url,
                "application": {"id": str(self.app_id), "flags": 1 << 19},
                "private_channels": [],
                "relationships": [],
            },
        )
        session.ready = True
        await session.dispatch("GUILD_CREATE", self._guild_payload())

    async def _resume(self, session: _Session, data: dict[str, Any]) -> None:
        self.resumes.append(data)
        if data.get("token") != self.token:
            await session.ws.close(code=4004, message=b"Authentication failed.")
            return
        session.session_id = data.get("session_id")
        session.sequence = int(data.get("seq") or 0)
        session.ready = True
        await session.dispatch("RESUMED", {})

    async def _broadcast(self, event: str, data: dict[str, Any]) -> None:
        for session in list(self.sessions):
            if session.ready and not session.ws.closed:
                await session.dispatch(event, data)

    async def _deliver(self, message: dict[str, Any]) -> int:
        assert any(s.ready and not s.ws.closed for s in self.sessions), "no gateway session is ready"
        message_id = int(message["id"])
        self.messages[message_id] = message
        await self._broadcast("MESSAGE_CREATE", message)
        return message_id

    # --- payloads ----------------------------------------------------------------

    def _user_of(self, user_id: int, *, bot: bool = False) -> dict[str, Any]:
        if user_id not in self.users:
            self.users[user_id] = _user(user_id, f"user{user_id}", bot=bot)
        elif bot:
            self.users[user_id]["bot"] = True
        return self.users[user_id]

    def _message(
        self,
        channel_id: int,
        author: dict[str, Any],
        content: str,
        *,
        reference: dict[str, Any] | None = None,
        nonce: str | None = None,
    ) -> dict[str, Any]:
        guild_id = self.channels[channel_id].get("guild_id")
        message: dict[str, Any] = {
            "id": str(self.snowflake()),
            "channel_id": str(channel_id),
            "author": author,
            "content": content,
            "timestamp": datetime.now(UTC).isoformat(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [self._user_of(int(uid)) for uid in dict.fromkeys(_USER_MENTION.findall(content))],
            "mention_roles": list(dict.fromkeys(_ROLE_MENTION.findall(content))),
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": DEFAULT,
            "flags": 0,
        }
        if nonce is not None:
            message["nonce"] = nonce
        if guild_id is not None:
            message["guild_id"] = guild_id
            message["member"] = {
                "roles": [],
                "joined_at": message["timestamp"],
                "deaf": False,
                "mute": False,
                "flags": 0,
            }
        if reference is not None:
            message["type"] = REPLY
            message["message_reference"] = {
                "type": 0,
                "message_id": reference["id"],
                "channel_id": reference["channel_id"],
            }
            if guild_id is not None:
                message["message_reference"]["guild_id"] = guild_id
            message["referenced_message"] = reference
            replied = reference["author"]
            if all(m["id"] != replied["id"] for m in message["mentions"]):
                message["mentions"].append(replied)  # a reply pings its author by default
        return message

    def _guild_payload(self) -> dict[str, Any]:
        now = datetime.now(UTC).isoformat()
        return {
            "id": str(self.guild_id),
            "name": "Fake Guild",
            "icon": None,
            "splash": None,
            "owner_id": str(self.owner_id),
            "afk_channel_id": None,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "premium_tier": 0,
            "features": [],
            "emojis": [],
            "stickers": [],
            "system_channel_id": None,
            "rules_channel_id": None,
            "nsfw_level": 0,
            "preferred_locale": "en-US",
            "unavailable": False,
            "large": False,
            "member_count": 3,
            "joined_at": now,
            "voice_states": [],
            "presences": [],
            "threads": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
            "roles": [
                {
                    "id": str(self.guild_id),
                    "name": "@everyone",
                    "permissions": str((1 << 11) | (1 << 10) | (1 << 16)),
                    "position": 0,
                    "color": 0,
                    "hoist": False,
                    "managed": False,
                    "mentionable": False,
                    "flags": 0,
                },
                {
                    "id": str(self.bot_role_id),
                    "name": self.bot_user["username"],
                    "permissions": str(1 << 13),
                    "position": 1,
                    "color": 0,
                    "hoist": False,
                    "managed": True,
                    "mentionable": False,
                    "flags": 0,
                    "tags": {"bot_id": str(self.bot_id)},
                },
            ],
            "channels": [self.channels[self.guild_channel_id]],
            "members": [
                {
                    "user": self.bot_user,
                    "roles": [str(self.bot_role_id)],
                    "joined_at": now,
                    "deaf": False,
                    "mute": False,
                    "flags": 0,
                }
            ],
        }


def _user(user_id: int, name: str, *, bot: bool = False) -> dict[str, Any]:
    user: dict[str, Any] = {
        "id": str(user_id),
        "username": name,
        "global_name": name.title(),
        "discriminator": "0",
        "avatar": None,
        "public_flags": 0,
        "flags": 0,
    }
    if bot:
        user["bot"] = True
    return user


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    merged = {"Content-Type": "application/json", **(headers or {})}
    return web.Response(status=status, body=json.dumps(data).encode(), headers=merged)


def _fault_response(fault: RestFault) -> web.Response:
    if fault.status == 429:
        headers = {
            "Via": "1.1 google",  # discord.py treats a 429 without it as a Cloudflare ban
            "Retry-After": str(max(1, round(fault.retry_after))),
            "X-RateLimit-Limit": "5",
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset-After": str(fault.retry_after),
            "X-RateLimit-Reset": str(time.time() + fault.retry_after),
            "X-RateLimit-Bucket": "fake-bucket",
            "X-RateLimit-Scope": "user",
            **fault.headers,
        }
        body = fault.body or {
            "message": "You are being rate limited.",
            "retry_after": fault.retry_after,
            "global": False,
        }
        return _json(body, status=429, headers=headers)
    body = fault.body or {"message": f"{fault.status}: fake failure", "code": 0}
    return _json(body, status=fault.status, headers=fault.headers)


async def _read_message_body(request: web.Request) -> tuple[dict[str, Any], list[tuple[str, bytes]]]:
    if not request.content_type.startswith("multipart/"):
        return await request.json(), []
    body: dict[str, Any] = {}
    files: list[tuple[str, bytes]] = []
    reader = await request.multipart()
    async for part in reader:
        if part.name == "payload_json":
            body = json.loads(await part.text())
        else:
            files.append((part.filename or "", bytes(await part.read())))
    return body, files


def _pings(content: str, allowed: dict[str, Any] | None, referenced: dict[str, Any] | None) -> frozenset[str]:
    """Who Discord would notify for `content` under `allowed_mentions` (absent: everything parsed)."""
    if allowed is None:
        parse, users, roles, replied_user = {"everyone", "users", "roles"}, set(), set(), True
    else:
        parse = set(allowed.get("parse", []))
        users = {str(u) for u in allowed.get("users", [])}
        roles = {str(r) for r in allowed.get("roles", [])}
        replied_user = bool(allowed.get("replied_user", False))
    pings: set[str] = set()
    if ("@everyone" in content or "@here" in content) and "everyone" in parse:
        pings.add("everyone")
    for uid in _USER_MENTION.findall(content):
        if "users" in parse or uid in users:
            pings.add(f"user:{uid}")
    for rid in _ROLE_MENTION.findall(content):
        if "roles" in parse or rid in roles:
            pings.add(f"role:{rid}")
    if referenced is not None and replied_user:
        pings.add(f"user:{referenced['author']['id']}")
    return frozenset(pings)
