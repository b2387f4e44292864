"""What the web chat's pages share: `WebCore`, what they need of the core (each call goes through
`app[BRIDGE]` to the core's event loop), the frame of a signed-in page, and the answers of page
actions waiting to be shown (`Flashes`)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from aiohttp import web

from adapters.web.auth import SESSION_KEY
from adapters.web.bridge import BRIDGE
from adapters.web.chat import KEY, WebIntake
from adapters.web.layout import Frame
from adapters.web.stream import Relay
from core.ports.clock import Clock
from core.turn.controls import OwnerControls
from core.turn.preview import NormalPreview
from core.turn.transcript import ChatMode, Transcripts

MAX_FLASHES = 256


@dataclass(frozen=True, slots=True)
class WebCore:
    """What the pages need of the core (bot/bootstrap.py `web_core`), all of it on the core's loop.

    Attributes:
        chat: the owner's web chat, its intake (adapters/web/chat/intake.py).
        transcripts: its history and mode as the mode reads them (core/turn/transcript.py).
        preview: the next normal-mode request of each conversation (core/turn/preview.py).
        controls: the memory, settings and privacy pages' reads and commands (core/turn/controls.py).
        clock: the one clock.
    """

    chat: WebIntake
    transcripts: Transcripts
    preview: NormalPreview
    controls: OwnerControls
    clock: Clock


class Flashes:
    """The answer of the last action a session took, shown once on the page it returns to. In
    memory only and bounded; an answer of a page command names ids and settings, never a message."""

    def __init__(self) -> None:
        self._by_session: OrderedDict[int, str] = OrderedDict()

    def keep(self, session_id: int, text: str) -> None:
        self._by_session.pop(session_id, None)
        self._by_session[session_id] = text
        while len(self._by_session) > MAX_FLASHES:
            self._by_session.popitem(last=False)

    def take(self, session_id: int) -> str | None:
        return self._by_session.pop(session_id, None)


class Site:
    """The pages' shared state (adapters/web/pages.py installs it with the pages)."""

    def __init__(self, core: WebCore) -> None:
        self.core = core
        self.flashes = Flashes()
        self.streams: set[Relay] = set()  # the open GET /events

    async def end_streams(self, app: web.Application) -> None:
        """At the service's shutdown (aiohttp's on_shutdown, before it waits for open requests):
        every event stream ends now."""
        for relay in list(self.streams):
            relay.end()

    async def frame(self, request: web.Request, mode: ChatMode | None = None) -> Frame:
        """The frame of a signed-in request's page (after `signed_in` found its session); `mode`: the
        web chat's, when the page read it already (with its history)."""
        session = request[SESSION_KEY]
        bridge = request.app[BRIDGE]
        if mode is None:
            mode = await bridge.call(self.core.transcripts.mode, KEY)
        timezone = await bridge.call(self.core.controls.timezone)
        return Frame(session.csrf if session is not None else "", mode, timezone, self.core.clock.now())

    def session_id(self, request: web.Request) -> int:
        session = request[SESSION_KEY]
        return session.id if session is not None else 0


# app[SITE]: the pages' shared state, for every page handler.
SITE: web.AppKey[Site] = web.AppKey("companion_site", Site)
