"""The Bot API connections: no answer body in the log, and an update python-telegram-bot cannot parse set aside."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from telegram import Update
from telegram.error import TelegramError
from telegram.request import HTTPXRequest

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


class UpdatesRequest(BotAPIRequest):
    """The getUpdates connection. Each update python-telegram-bot cannot parse is taken out of the
    answer before `Bot.get_updates` parses it; otherwise that one update fails the whole batch,
    python-telegram-bot logs the batch, message text and all, at CRITICAL, and the same offset
    fetches it again for ever. `take_unparsable()` returns what was taken out since its last call.
    The answer is parsed once more only to check it: a small price for a poll."""

    __slots__ = ("_unparsable",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._unparsable: list[UnparsableUpdate] = []

    def take_unparsable(self) -> list[UnparsableUpdate]:
        taken, self._unparsable = self._unparsable, []
        return taken

    async def do_request(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        code, payload = await super().do_request(*args, **kwargs)
        return code, self._parsable(payload) if 200 <= code <= 299 else payload

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
        for update in result:
            unparsable = _unparsable(update)
            if unparsable is None:
                kept.append(update)
            else:
                self._unparsable.append(unparsable)
        if len(kept) == len(result):
            return payload
        return json.dumps({**data, "result": kept}, ensure_ascii=False).encode()


def _unparsable(update: Any) -> UnparsableUpdate | None:
    """None when python-telegram-bot parses `update`; else what a log may say of it."""
    try:
        Update.de_json(update)
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
