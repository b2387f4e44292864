"""The application-command and interaction half of FakeDiscordServer (tests/helpers/fake_discord.py).

Discord's documented behaviour, as strict as a test depends on it:
- `PUT /applications/{id}/commands` overwrites the global commands: at most 100, names
  `^[-_a-z0-9]{1,32}$`, descriptions 1-100 characters, at most 25 options each (same name and
  description rules, required ones first, unique names); else 400 Invalid Form Body (50035).
- An INTERACTION_CREATE (a slash command, type 2, or a button press, type 3) must be answered
  once within 3 seconds through `POST /interactions/{id}/{token}/callback`; a second answer is
  400 (40060, already acknowledged) and a late one 404 (10062, unknown interaction), as is one
  with a wrong token. Callback types 6 and 7 are for components only.
- Followups (`POST /webhooks/{application_id}/{token}`) and the original response
  (`PATCH`/`DELETE .../messages/@original`) exist only once the interaction was answered
  (else 404 Unknown Webhook, 10015). The first followup after a deferred answer (type 5)
  takes that answer's visibility, as on Discord.
- Message components: at most 5 action rows of at most 5 buttons; a button's custom_id is
  1-100 characters and unique in its message; a press names a button the message has.
Interaction callbacks and followups need no bot token (they are webhooks).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import re
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from tests.helpers.fake_discord import FakeDiscordServer

EPHEMERAL = 1 << 6
SUPPRESS_EMBEDS = 1 << 2
SUPPRESS_NOTIFICATIONS = 1 << 12
APPLICATION_COMMAND = 2
MESSAGE_COMPONENT = 3
STRING = 3
_NAME = re.compile(r"^[-_a-z0-9]{1,32}$")
_COMPONENT_ONLY = {6, 7}
_ALLOWED_CALLBACKS = {APPLICATION_COMMAND: {4, 5, 9}, MESSAGE_COMPONENT: {4, 5, 6, 7, 9}}


@dataclasses.dataclass(frozen=True)
class InteractionResponse:
    """One answer the bot gave to an interaction: its callback, a followup, or an edit/delete of the original."""

    interaction_id: int
    kind: str  # callback | followup | edit | delete
    type: int | None  # the callback type (4, 5, 6, 7, 9); None for the others
    content: str
    flags: int  # as the bot sent them
    ephemeral: bool  # what Discord shows: only the person sees it
    components: tuple[dict[str, Any], ...]
    files: tuple[tuple[str, bytes], ...]
    message_id: int | None


@dataclasses.dataclass
class _Interaction:
    id: int
    token: str
    type: int
    payload: dict[str, Any]
    channel_id: int
    created: float
    answered: int | None = None  # the callback type
    deferred_flags: int | None = None  # the flags of a type-5 answer, until the first followup
    original_id: int | None = None


def invalid_form(errors: dict[str, Any]) -> web.Response:
    return _json({"message": "Invalid Form Body", "code": 50035, "errors": errors}, status=400)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=json.dumps(data).encode(), headers={"Content-Type": "application/json"})


def _error(code: str, message: str = "invalid") -> dict[str, Any]:
    return {"_errors": [{"code": code, "message": message}]}


def command_errors(commands: Any) -> dict[str, Any] | None:
    """What Discord refuses in a bulk overwrite of application commands, or None."""
    if not isinstance(commands, list):
        return {"_errors": [{"code": "LIST_TYPE_CONVERT", "message": "Must be a list."}]}
    if len(commands) > 100:
        return _error("BASE_TYPE_MAX_LENGTH", "Must be 100 or fewer in length.")
    errors: dict[str, Any] = {}
    seen: set[str] = set()
    for index, command in enumerate(commands):
        problem = _one_command_errors(command)
        if problem is None and command["name"] in seen:
            problem = {
                "name": _error("APPLICATION_COMMANDS_DUPLICATE_NAME", "Application command names must be unique")
            }
        if problem:
            errors[str(index)] = problem
        elif isinstance(command, dict):
            seen.add(command["name"])
    return errors or None


def _one_command_errors(command: Any) -> dict[str, Any] | None:
    if not isinstance(command, dict):
        return _error("DICT_TYPE_CONVERT")
    errors: dict[str, Any] = {}
    if command.get("type", 1) != 1:
        errors["type"] = _error("UNSUPPORTED", "only CHAT_INPUT commands in this fake")
    if not isinstance(command.get("name"), str) or not _NAME.fullmatch(command["name"]):
        errors["name"] = _error("APPLICATION_COMMAND_INVALID_NAME", "Command name is invalid")
    description = command.get("description")
    if not isinstance(description, str) or not 1 <= len(description) <= 100:
        errors["description"] = _error("BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length.")
    options = command.get("options") or []
    if not isinstance(options, list) or len(options) > 25:
        errors["options"] = _error("BASE_TYPE_MAX_LENGTH", "Must be 25 or fewer in length.")
        return errors
    names: set[str] = set()
    optional_seen = False
    for index, option in enumerate(options):
        problem: dict[str, Any] = {}
        if not isinstance(option, dict):
            errors.setdefault("options", {})[str(index)] = _error("DICT_TYPE_CONVERT")
            continue
        if option.get("type") not in range(1, 12):
            problem["type"] = _error("BASE_TYPE_CHOICES")
        name = option.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            problem["name"] = _error("APPLICATION_COMMAND_INVALID_NAME")
        elif name in names:
            problem["name"] = _error("APPLICATION_COMMAND_OPTIONS_NAME_ALREADY_EXISTS")
        else:
            names.add(name)
        text = option.get("description")
        if not isinstance(text, str) or not 1 <= len(text) <= 100:
            problem["description"] = _error("BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length.")
        if option.get("required"):
            if optional_seen:
                problem["required"] = _error(
                    "APPLICATION_COMMAND_OPTIONS_REQUIRED_INVALID",
                    "Required options must be placed before non-required options",
                )
        else:
            optional_seen = True
        if problem:
            errors.setdefault("options", {})[str(index)] = problem
    return errors or None


def component_errors(components: Any) -> dict[str, Any] | None:
    """What Discord refuses in a message's `components` (action rows of buttons), or None."""
    if components in (None, []):
        return None
    if not isinstance(components, list) or len(components) > 5:
        return _error("BASE_TYPE_MAX_LENGTH", "Must be 5 or fewer in length.")
    errors: dict[str, Any] = {}
    custom_ids: set[str] = set()
    for r, row in enumerate(components):
        if not isinstance(row, dict) or row.get("type") != 1:
            errors[str(r)] = _error("COMPONENT_LAYOUT_WIDTH_EXCEEDED", "top level must be action rows")
            continue
        children = row.get("components")
        if not isinstance(children, list) or not 1 <= len(children) <= 5:
            errors[str(r)] = {"components": _error("BASE_TYPE_BAD_LENGTH", "Must be between 1 and 5 in length.")}
            continue
        for c, button in enumerate(children):
            problem = _button_errors(button, custom_ids)
            if problem:
                errors.setdefault(str(r), {}).setdefault("components", {})[str(c)] = problem
    return errors or None


def _button_errors(button: Any, custom_ids: set[str]) -> dict[str, Any] | None:
    if not isinstance(button, dict) or button.get("type") != 2:
        return _error("UNSUPPORTED", "only buttons in this fake")
    style = button.get("style")
    if style not in (1, 2, 3, 4, 5, 6):
        return {"style": _error("BASE_TYPE_CHOICES")}
    label = button.get("label")
    if label is not None and (not isinstance(label, str) or len(label) > 80):
        return {"label": _error("BASE_TYPE_MAX_LENGTH", "Must be 80 or fewer in length.")}
    custom_id = button.get("custom_id")
    if style == 5:
        return None if button.get("url") and custom_id is None else {"url": _error("BUTTON_COMPONENT_INVALID")}
    if not isinstance(custom_id, str) or not 1 <= len(custom_id) <= 100:
        return {"custom_id": _error("BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length.")}
    if custom_id in custom_ids:
        return {"custom_id": _error("COMPONENT_CUSTOM_ID_DUPLICATED", "Component custom id cannot be duplicated")}
    custom_ids.add(custom_id)
    return None


def has_button(message: dict[str, Any], custom_id: str) -> bool:
    return any(
        c.get("custom_id") == custom_id for row in message.get("components") or [] for c in row.get("components", [])
    )


class FakeInteractions:
    """Application commands and interactions for one FakeDiscordServer (its `interactions`).

    Records: `commands` (the global commands as stored), `command_puts` (each bulk overwrite's
    body), `payloads` (every INTERACTION_CREATE this fake dispatched, token included) and
    `responses` (InteractionResponse, in order).
    """

    def __init__(self, server: FakeDiscordServer) -> None:
        self._server = server
        self.response_deadline = 3.0  # seconds Discord waits for the first answer
        self.commands: list[dict[str, Any]] = []
        self.command_puts: list[Any] = []
        self.payloads: list[dict[str, Any]] = []
        self.responses: list[InteractionResponse] = []
        self._pending: dict[int, _Interaction] = {}
        self._tokens = itertools.count(1)
        self._command_ids: dict[str, int] = {}

    def add_routes(self, app: web.Application, api: str) -> None:
        app.router.add_put(f"{api}/applications/{{application_id}}/commands", self._put_commands)
        app.router.add_get(f"{api}/applications/{{application_id}}/commands", self._get_commands)
        app.router.add_post(f"{api}/interactions/{{interaction_id}}/{{token}}/callback", self._callback)
        app.router.add_post(f"{api}/webhooks/{{application_id}}/{{token}}", self._followup)
        app.router.add_patch(f"{api}/webhooks/{{application_id}}/{{token}}/messages/@original", self._edit_original)
        app.router.add_delete(f"{api}/webhooks/{{application_id}}/{{token}}/messages/@original", self._delete_original)

    @staticmethod
    def needs_no_bot_token(route: str, api: str) -> bool:
        return route.startswith((f"{api}/interactions/", f"{api}/webhooks/"))

    # --- what people do ----------------------------------------------------------------

    async def slash_command(
        self, user_id: int, name: str, options: dict[str, str] | None = None, *, in_guild: bool = False
    ) -> int:
        """A person runs `/name` with `options` in their DM (or the guild channel); returns the interaction id.
        Discord's client offers only registered commands and makes required options mandatory."""
        command = next((c for c in self.commands if c["name"] == name), None)
        assert command is not None, f"/{name} is not a registered application command"
        declared = {o["name"]: o for o in command.get("options") or []}
        options = options or {}
        assert set(options) <= set(declared), f"/{name} has no option {set(options) - set(declared)}"
        missing = [o for o, spec in declared.items() if spec.get("required") and o not in options]
        assert not missing, f"/{name} needs {missing}"
        data: dict[str, Any] = {"id": command["id"], "name": name, "type": 1}
        if options:
            data["options"] = [{"name": k, "type": STRING, "value": v} for k, v in options.items()]
        return await self._dispatch(user_id, APPLICATION_COMMAND, data, in_guild=in_guild)

    async def press_button(self, user_id: int, message_id: int, custom_id: str) -> int:
        """A person presses the button `custom_id` of a message; returns the interaction id."""
        server = self._server
        message = server.messages.get(message_id)
        assert message is not None and has_button(message, custom_id), "no such button on that message"
        channel_id = int(message["channel_id"])
        data = {"custom_id": custom_id, "component_type": 2}
        in_guild = "guild_id" in server.channels[channel_id]
        return await self._dispatch(user_id, MESSAGE_COMPONENT, data, in_guild=in_guild, message=message)

    async def _dispatch(
        self, user_id: int, kind: int, data: dict[str, Any], *, in_guild: bool, message: dict[str, Any] | None = None
    ) -> int:
        server = self._server
        user = server._user_of(user_id)
        channel_id = server.guild_channel_id if in_guild else server.dm_channel_id(user_id)
        channel = server.channels[channel_id]
        interaction_id = server.snowflake()
        token = f"fake-interaction-token-{next(self._tokens)}"
        payload: dict[str, Any] = {
            "id": str(interaction_id),
            "application_id": str(server.app_id),
            "type": kind,
            "data": data,
            "channel_id": str(channel_id),
            "channel": {k: v for k, v in channel.items() if k in ("id", "type", "guild_id", "name", "recipients")},
            "token": token,
            "version": 1,
            "locale": "en-US",
            "app_permissions": str((1 << 11) | (1 << 10)),
            "entitlements": [],
            "attachment_size_limit": 10 * 1024 * 1024,
            "authorizing_integration_owners": {"0": str(server.guild_id) if in_guild else "0"},
            "context": 0 if in_guild else 1,
        }
        if in_guild:
            payload["guild_id"] = str(server.guild_id)
            payload["guild"] = {"id": str(server.guild_id), "locale": "en-US", "features": []}
            payload["guild_locale"] = "en-US"
            payload["member"] = {
                "user": user,
                "roles": [],
                "joined_at": "2025-01-01T00:00:00+00:00",
                "deaf": False,
                "mute": False,
                "flags": 0,
                "permissions": str((1 << 11) | (1 << 10)),
            }
        else:
            payload["user"] = user
        if message is not None:
            payload["message"] = message
        assert any(s.ready and not s.ws.closed for s in server.sessions), "no gateway session is ready"
        self._pending[interaction_id] = _Interaction(
            interaction_id, token, kind, payload, channel_id, asyncio.get_running_loop().time()
        )
        self.payloads.append(payload)
        await server._broadcast("INTERACTION_CREATE", payload)
        return interaction_id

    # --- waiting -----------------------------------------------------------------------

    def responses_to(self, interaction_id: int) -> list[InteractionResponse]:
        return [r for r in self.responses if r.interaction_id == interaction_id]

    async def wait_for_responses(
        self, interaction_id: int, count: int, timeout: float = 10.0
    ) -> list[InteractionResponse]:
        await self._server.wait_until(
            lambda: len(self.responses_to(interaction_id)) >= count, timeout, f"{count} responses to {interaction_id}"
        )
        return self.responses_to(interaction_id)

    # --- REST ----------------------------------------------------------------------------

    def _app_id_ok(self, request: web.Request) -> bool:
        return request.match_info["application_id"] == str(self._server.app_id)

    async def _put_commands(self, request: web.Request) -> web.Response:
        if not self._app_id_ok(request):
            return _json({"message": "Missing Access", "code": 50001}, status=403)
        body = await request.json()
        self.command_puts.append(body)
        errors = command_errors(body)
        if errors:
            return invalid_form(errors)
        stored = []
        for command in body:
            command_id = self._command_ids.setdefault(command["name"], self._server.snowflake())
            stored.append(
                {
                    "id": str(command_id),
                    "application_id": str(self._server.app_id),
                    "version": str(self._server.snowflake()),
                    "type": 1,
                    "name": command["name"],
                    "description": command["description"],
                    "options": command.get("options") or [],
                    "default_member_permissions": command.get("default_member_permissions"),
                    "dm_permission": command.get("dm_permission", True),
                    "nsfw": command.get("nsfw", False),
                    "integration_types": [0],
                    "contexts": command.get("contexts"),
                }
            )
        self.commands = stored
        return _json(stored)

    async def _get_commands(self, request: web.Request) -> web.Response:
        if not self._app_id_ok(request):
            return _json({"message": "Missing Access", "code": 50001}, status=403)
        return _json(self.commands)

    def _live(self, interaction_id: int, token: str) -> _Interaction | None:
        pending = self._pending.get(interaction_id)
        return pending if pending is not None and pending.token == token else None

    async def _callback(self, request: web.Request) -> web.Response:
        pending = self._live(int(request.match_info["interaction_id"]), request.match_info["token"])
        unknown = _json({"message": "Unknown interaction", "code": 10062}, status=404)
        if pending is None:
            return unknown
        if pending.answered is not None:
            return _json({"message": "Interaction has already been acknowledged.", "code": 40060}, status=400)
        if asyncio.get_running_loop().time() - pending.created > self.response_deadline:
            return unknown  # the token was invalidated at the deadline
        body, files = await self._body(request)
        kind = body.get("type")
        if kind not in _ALLOWED_CALLBACKS[pending.type]:
            return invalid_form(
                {"type": _error("INTERACTION_RESPONSE_TYPE_INVALID", "Interaction response type is invalid")}
            )
        data = body.get("data") or {}
        flags = int(data.get("flags") or 0)
        if flags & ~(EPHEMERAL | SUPPRESS_EMBEDS | SUPPRESS_NOTIFICATIONS):
            return invalid_form({"data": {"flags": _error("MESSAGE_FLAGS_INVALID", "Invalid flags")}})
        problem = self._message_errors(data, files, need_content=kind == 4)
        if problem is not None:
            return problem
        pending.answered = kind
        message: dict[str, Any] | None = None
        if kind in (4, 5):
            message = self._store_message(pending, data, files, flags, loading=kind == 5)
            pending.original_id = int(message["id"])
            if kind == 5:
                pending.deferred_flags = flags
        elif kind == 7 and pending.payload.get("message") is not None:
            message = self._server.messages.get(int(pending.payload["message"]["id"]))
            if message is not None:
                if "content" in data:
                    message["content"] = data["content"]
                if "components" in data:
                    message["components"] = data["components"]
        self._record(pending, "callback", kind, data, files, flags, bool(flags & EPHEMERAL), message)
        if request.query.get("with_response") not in ("1", "true", "True"):
            return web.Response(status=204)
        answer: dict[str, Any] = {
            "interaction": {
                "id": str(pending.id),
                "type": pending.type,
                "response_message_loading": kind == 5,
                "response_message_ephemeral": bool(flags & EPHEMERAL),
            }
        }
        if message is not None:
            answer["interaction"]["response_message_id"] = message["id"]
            answer["resource"] = {"type": kind, "message": message}
        return _json(answer)

    def _answered(self, request: web.Request) -> _Interaction | web.Response:
        if not self._app_id_ok(request):
            return _json({"message": "Unknown Webhook", "code": 10015}, status=404)
        token = request.match_info["token"]
        pending = next((p for p in self._pending.values() if p.token == token), None)
        if pending is None or pending.answered is None:
            return _json({"message": "Unknown Webhook", "code": 10015}, status=404)
        return pending

    async def _followup(self, request: web.Request) -> web.Response:
        pending = self._answered(request)
        if isinstance(pending, web.Response):
            return pending
        body, files = await self._body(request)
        flags = int(body.get("flags") or 0)
        if flags & ~(EPHEMERAL | SUPPRESS_EMBEDS | SUPPRESS_NOTIFICATIONS):
            return invalid_form({"flags": _error("MESSAGE_FLAGS_INVALID", "Invalid flags")})
        problem = self._message_errors(body, files, need_content=True)
        if problem is not None:
            return problem
        # The first followup after a deferred answer replaces its loading message, and keeps its visibility.
        if pending.deferred_flags is not None:
            ephemeral = bool(pending.deferred_flags & EPHEMERAL)
            pending.deferred_flags = None
        else:
            ephemeral = bool(flags & EPHEMERAL)
        message = self._store_message(pending, body, files, EPHEMERAL if ephemeral else 0)
        self._record(pending, "followup", None, body, files, flags, ephemeral, message)
        if not ephemeral and self._server.echo_own_messages:
            await self._server._broadcast("MESSAGE_CREATE", message)
        if request.query.get("wait") in ("1", "true", "True"):
            return _json(message)
        return web.Response(status=204)

    async def _edit_original(self, request: web.Request) -> web.Response:
        pending = self._answered(request)
        if isinstance(pending, web.Response):
            return pending
        body, files = await self._body(request)
        problem = self._message_errors(body, files, need_content=False)
        if problem is not None:
            return problem
        message = self._server.messages.get(pending.original_id or 0)
        if message is None:
            return _json({"message": "Unknown Message", "code": 10008}, status=404)
        if "content" in body:
            message["content"] = body["content"] or ""
        if "components" in body:
            message["components"] = body["components"]
        pending.deferred_flags = None
        ephemeral = bool(message.get("flags", 0) & EPHEMERAL)
        self._record(pending, "edit", None, body, files, int(body.get("flags") or 0), ephemeral, message)
        return _json(message)

    async def _delete_original(self, request: web.Request) -> web.Response:
        pending = self._answered(request)
        if isinstance(pending, web.Response):
            return pending
        message = self._server.messages.pop(pending.original_id or 0, None)
        if message is None:
            return _json({"message": "Unknown Message", "code": 10008}, status=404)
        self._record(pending, "delete", None, {}, [], 0, bool(message.get("flags", 0) & EPHEMERAL), None)
        return web.Response(status=204)

    # --- helpers ---------------------------------------------------------------------------

    async def _body(self, request: web.Request) -> tuple[dict[str, Any], list[tuple[str, bytes]]]:
        from tests.helpers.fake_discord import _read_message_body

        body, files = await _read_message_body(request)
        if request.content_type.startswith("multipart/"):
            self._server.bodies.append(json.dumps(body).encode() + b"".join(data for _, data in files))
        return body, files

    def _message_errors(
        self, data: dict[str, Any], files: list[tuple[str, bytes]], *, need_content: bool
    ) -> web.Response | None:
        content = data.get("content") or ""
        if len(content) > 2000:
            return invalid_form({"content": _error("BASE_TYPE_MAX_LENGTH", "Must be 2000 or fewer in length.")})
        errors = component_errors(data.get("components"))
        if errors:
            return invalid_form({"components": errors})
        if need_content and not content and not files and not data.get("components") and not data.get("embeds"):
            return _json({"message": "Cannot send an empty message", "code": 50006}, status=400)
        return None

    def _store_message(
        self,
        pending: _Interaction,
        data: dict[str, Any],
        files: list[tuple[str, bytes]],
        flags: int,
        *,
        loading: bool = False,
    ) -> dict[str, Any]:
        server = self._server
        message = server._message(pending.channel_id, server.bot_user, data.get("content") or "")
        message["webhook_id"] = str(server.app_id)
        message["application_id"] = str(server.app_id)
        message["flags"] = flags | ((1 << 7) if loading else 0)  # LOADING while deferred
        message["components"] = data.get("components") or []
        message["attachments"] = [
            {
                "id": str(server.snowflake()),
                "filename": name,
                "size": len(blob),
                "url": "http://127.0.0.1/x",
                "proxy_url": "http://127.0.0.1/x",
            }
            for name, blob in files
        ]
        server.messages[int(message["id"])] = message
        return message

    def _record(
        self,
        pending: _Interaction,
        kind: str,
        callback_type: int | None,
        data: dict[str, Any],
        files: list[tuple[str, bytes]],
        flags: int,
        ephemeral: bool,
        message: dict[str, Any] | None,
    ) -> None:
        self.responses.append(
            InteractionResponse(
                interaction_id=pending.id,
                kind=kind,
                type=callback_type,
                content=data.get("content") or "",
                flags=flags,
                ephemeral=ephemeral,
                components=tuple(data.get("components") or ()),
                files=tuple(files),
                message_id=int(message["id"]) if message is not None else None,
            )
        )
