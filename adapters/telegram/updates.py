"""The Bot API connections: no answer body in the log, an update python-telegram-bot cannot parse set aside, no cookie jar."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import httpx
from telegram import Bot, Update
from telegram.error import TelegramError
from telegram.request import HTTPXRequest

from adapters.http_client import LeanClient

# A top-level key a log may name (Bot API field names); any other is shown as "?".
_FIELD = re.compile(r"[a-z_]{1,40}")


@dataclasses.dataclass(frozen=True, slots=True)
class UnparsableUpdate:
    """An update set aside, as a log may show it: never its content."""

    update_id: int | None
    size: int  # bytes of its JSON
    kind: str  # its top-level keys but update_id, e.g. "message"


class BotAPIRequest(HTTPXRequest):
    """python-telegram-bot's HTTPX connection, except that an answer that is not JSON is refused
    without logging it: the base class logs it whole at ERROR, and an answer holds message text
    (every update fetched; a sent message comes back in its answer)."""

    __slots__ = ()

    @staticmethod
    def parse_json_payload(payload: bytes) -> dict[str, Any]:
        try:
            return json.loads(payload.decode("utf-8", "replace"))
        except ValueError:
            raise TelegramError("Invalid server response") from None

    def _build_client(self) -> httpx.AsyncClient:
        return _BotAPIClient(**self._client_kwargs)


class _NoCookies(httpx.Cookies):
    """A cookie jar that keeps none."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


class _BotAPIClient(LeanClient):
    """httpx's client as python-telegram-bot builds it, without what the Bot API has no use for: a cookie jar
    (the Bot API sets no cookie; reading each answer's headers into the jar took ~15 us), and, through
    `LeanClient` (adapters/http_client.py), each method's URL parsed again and the layers of httpx's path
    that a request without authentication, hooks or redirects passes through doing nothing."""

    def __init__(self, **kwargs: Any) -> None:
        self._no_cookies = _NoCookies()
        super().__init__(**kwargs)

    @property
    def cookies(self) -> httpx.Cookies:
        return self._no_cookies

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        return None  # none kept: see the class


class UpdatesRequest(BotAPIRequest):
    """The getUpdates connection. Each update python-telegram-bot cannot parse is taken out of the
    answer before `Bot.get_updates` parses it; otherwise that one update fails the whole batch,
    python-telegram-bot logs the batch, message text and all, at CRITICAL, and the same offset
    fetches it again for ever. `take_unparsable()` returns what was taken out since its last call.
    Once `bind(bot)` is called, each update is parsed here only, with that bot, as
    `Bot.get_updates` would: the answer is then handed to it with no updates, and
    `take_parsed()` returns them (parsing every update twice cost a turn 0.1-0.2 ms)."""

    __slots__ = ("_bot", "_checked", "_parsed", "_unparsable")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._unparsable: list[UnparsableUpdate] = []
        self._parsed: list[Update] = []
        self._bot: Bot | None = None
        # The answer `do_request` last returned and its JSON with no updates, for `parse_json_payload`.
        self._checked: tuple[bytes, dict[str, Any]] | None = None

    def bind(self, bot: Bot) -> None:
        self._bot = bot

    def take_unparsable(self) -> list[UnparsableUpdate]:
        taken, self._unparsable = self._unparsable, []
        return taken

    def take_parsed(self) -> list[Update]:
        """The updates parsed from the answers since the last call, in their order."""
        taken, self._parsed = self._parsed, []
        return taken

    async def do_request(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        # An earlier answer's updates not taken (its call failed after all) are fetched again.
        self._checked, self._parsed = None, []
        code, payload = await super().do_request(*args, **kwargs)
        return code, self._parsable(payload) if 200 <= code <= 299 else payload

    def parse_json_payload(self, payload: bytes) -> dict[str, Any]:  # type: ignore[override]
        checked = self._checked
        if checked is not None and checked[0] is payload:
            self._checked = None
            return checked[1]
        return BotAPIRequest.parse_json_payload(payload)

    def _parsable(self, payload: bytes) -> bytes:
        """`payload` without the updates python-telegram-bot cannot parse (kept in `_unparsable`)."""
        try:
            data = json.loads(payload.decode("utf-8", "replace"))
        except ValueError:
            return payload  # refused by parse_json_payload
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, list):
            return payload
        kept = []
        parsed: list[Update] = []
        for update in result:
            unparsable = parse_one(update, self._bot, parsed)
            if unparsable is None:
                kept.append(update)
            else:
                self._unparsable.append(unparsable)
        if self._bot is not None:
            self._parsed.extend(parsed)
            self._checked = (payload, {**data, "result": []})
            return payload
        if len(kept) == len(result):
            return payload
        return json.dumps({**data, "result": kept}, ensure_ascii=False).encode()


def parse_one(update: Any, bot: Bot | None, parsed: list[Update]) -> UnparsableUpdate | None:
    """None when python-telegram-bot parses `update` (with `bot`, appended to `parsed`); else what a log may say of it."""
    try:
        parsed.append(Update.de_json(update, bot))
        return None
    except Exception:  # noqa: BLE001 - whatever python-telegram-bot raises, the update is set aside
        fields = update if isinstance(update, dict) else {}
    update_id = fields.get("update_id")
    keys = sorted(key if isinstance(key, str) and _FIELD.fullmatch(key) else "?" for key in fields)
    return UnparsableUpdate(
        update_id=update_id if isinstance(update_id, int) and not isinstance(update_id, bool) else None,
        size=len(json.dumps(update, ensure_ascii=False, separators=(",", ":")).encode()),
        kind="+".join(key for key in keys if key != "update_id") or "none",
    )
