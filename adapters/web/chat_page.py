"""The chat page: the owner's web conversation, its answers live (server-sent events), private mode
entered through a form with a password field and left with one button.

GET / draws the history as the current mode reads it; GET /events streams what comes next
(adapters/web/stream.py); POST /send hands a message to the core (the same commands as everywhere);
POST /private sends `/private PASSPHRASE [EXPIRY]` from the form's password field, POST /normal
sends `/normal`. The passphrase is only ever in that one POST body: the page never draws it back (the
field is emptied before the request leaves), the store keeps `/private [redacted]`, and no log line
holds it (the access log names method, path, status, size and time). A page whose chat changes mode
draws itself again, so private text leaves the page when private mode ends: at once, from the
`history` frame of normal mode's transcript the event stream sends then (a private answer still being
written becomes the constant line), and then from the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re

from aiohttp import web

from adapters.web.auth import signed_in
from adapters.web.bridge import BRIDGE
from adapters.web.chat import HISTORY, KEY, PARTIAL, Transcript, WebChatElsewhere, WebChatError, WebEvent
from adapters.web.formatting import formatted_html
from adapters.web.layout import Frame, esc, render
from adapters.web.service import SERVICE
from adapters.web.site import SITE
from adapters.web.stream import (
    HEARTBEAT_SECONDS,
    LEFT_SECONDS,
    RETRY_MS,
    Refused,
    Relay,
    event_data,
    frame,
    history_data,
    partial_data,
    pump,
)
from core.values.copy import INTERVAL_ENDED_SHOWN
from core.values.transcript import ChatMode

MAX_TEXT = 4000
EXPIRIES = ("30m", "1h", "2h", "24h", "7d", "never")
_MESSAGE_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
PLACEHOLDER_SHOWN = "A private interval was here: normal mode sees only one placeholder line in its place."

guarded = signed_in(lambda request: request.app[SERVICE].auth)


def install(app: web.Application) -> None:
    app.router.add_get("/", _chat)
    app.router.add_get("/events", _events)
    app.router.add_post("/send", _send)
    app.router.add_post("/private", _private)
    app.router.add_post("/normal", _normal)


@guarded
async def _chat(request: web.Request) -> web.StreamResponse:
    site = request.app[SITE]
    transcript = await request.app[BRIDGE].call(site.core.chat.history)
    page = await site.frame(request, transcript.state)
    return render(page, title="Chat", current="chat", body=_body(page, transcript))


def _body(page: Frame, transcript: Transcript) -> str:
    items = "\n".join(_item(item.role, item.text, item.is_placeholder) for item in transcript.items)
    composer = f"""<form id="send-form" method="post" action="/send" class="composer">{page.csrf_field()}
<label class="hidden" for="text">Message</label>
<textarea name="text" id="text" rows="2" maxlength="{MAX_TEXT}" required placeholder="Write a message, or a command such as /help"></textarea>
<button type="submit">Send</button>
</form>"""
    return f"""<h1 class="hidden">Chat</h1>
<ol id="messages" class="messages" aria-live="polite" data-placeholder="{esc(PLACEHOLDER_SHOWN)}" data-ended="{esc(INTERVAL_ENDED_SHOWN)}">
{items}
</ol>
<p id="chat-status" class="status" role="status"></p>
{composer}
{_entry(page)}"""


def _item(role: str | None, text: str | None, placeholder: bool) -> str:
    if placeholder:
        return f'<li class="msg placeholder">{esc(PLACEHOLDER_SHOWN)}</li>'
    role = role or "assistant"
    shown = formatted_html(text or "") if role == "assistant" else esc(text or "")  # as the script draws it
    return f'<li class="msg {esc(role)}">{shown}</li>'


def _entry(page: Frame) -> str:
    # Drawn in private mode too, hidden there: a page told that private mode ended shows it without
    # loading again.
    options = "".join(f'<option value="{e}">{e}</option>' for e in EXPIRIES)
    hidden = " hidden" if page.mode.is_private else ""
    return f"""<section class="enter-private" id="enter-private"{hidden}>
<h2>Private mode</h2>
<p>Incognito, not a blank slate: I still read what I already know about you, but nothing said there is kept in
memory, notes or recall, and normal mode sees one placeholder line in its place. It is deleted when its time
comes.</p>
<form id="private-form" method="post" action="/private" autocomplete="off">{page.csrf_field()}
<label>Passphrase <input type="password" name="passphrase" id="passphrase" required autocomplete="off" spellcheck="false"></label>
<label>Deleted after <select name="expiry"><option value="">the default</option>{options}</select></label>
<button type="submit" class="private-button">Enter private mode</button>
</form>
</section>"""


# --- what the page sends -------------------------------------------------------------------


@guarded
async def _send(request: web.Request) -> web.StreamResponse:
    if request.content_type == "application/json":
        try:
            body = await request.json(loads=json.loads)
        except (ValueError, UnicodeDecodeError):
            body = None
        text = body.get("text") if isinstance(body, dict) else None
        message_id = body.get("id") if isinstance(body, dict) else None
    else:
        form = await request.post()
        text, message_id = form.get("text"), None
    if not isinstance(text, str) or not text.strip():
        return _refused(request, "Write something first.", 400)
    if len(text) > MAX_TEXT:
        return _refused(request, f"A message holds at most {MAX_TEXT} characters.", 413)
    if not isinstance(message_id, str) or not _MESSAGE_ID.match(message_id):
        message_id = None
    return await _hand_over(request, text, message_id)


@guarded
async def _private(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    passphrase, expiry = form.get("passphrase"), form.get("expiry")
    if not isinstance(passphrase, str) or not passphrase:
        return _refused(request, "Type the passphrase first.", 400)
    if any(ch.isspace() for ch in passphrase) or len(passphrase) > 1024:
        return _refused(request, "The passphrase is one word. Nothing changed.", 400)
    words = ["/private", passphrase]
    if isinstance(expiry, str) and expiry in EXPIRIES:
        words.append(expiry)
    return await _hand_over(request, " ".join(words), None)


@guarded
async def _normal(request: web.Request) -> web.StreamResponse:
    return await _hand_over(request, "/normal", None)


# A shared database (issue 33): another companion process answers this chat now (nothing was stored here).
ELSEWHERE = "Another companion process is answering this chat right now; try again in a moment."


async def _hand_over(request: web.Request, text: str, message_id: str | None) -> web.StreamResponse:
    """Hand the message to the core and wait for its turn; the answer reaches the open pages as an
    event. A page that asked for JSON learns whether to keep what was typed; a plain form is sent
    back to the chat."""
    site = request.app[SITE]
    try:
        sent = await request.app[BRIDGE].call(site.core.chat.send, text, message_id=message_id)
    except WebChatElsewhere:
        return _refused(request, ELSEWHERE, 503)
    except WebChatError:
        return _refused(request, "The companion is stopping; try again in a moment.", 503)
    if _wants_json(request):
        return web.json_response({"hide_input": sent.hide_input})
    raise web.HTTPSeeOther("/")


def _refused(request: web.Request, error: str, status: int) -> web.StreamResponse:
    if _wants_json(request):
        return web.json_response({"error": error}, status=status)
    return web.Response(text=error + "\n", status=status)


def _wants_json(request: web.Request) -> bool:
    return request.content_type == "application/json" or "application/json" in request.headers.get("Accept", "")


# --- what the page receives ----------------------------------------------------------------


@guarded
async def _events(request: web.Request) -> web.StreamResponse:
    """The page's live events, as server-sent events: its history first (drawn again on every
    reconnect), then each answer, reminder or nudge, the text so far of a reply being written
    (`partial`, its bubble's id), and the chat's mode when it changes."""
    site, bridge = request.app[SITE], request.app[BRIDGE]
    timezone = await bridge.call(site.core.controls.timezone)
    relay = Relay(bridge)
    modes = functools.partial(site.core.transcripts.mode, KEY)
    at_end = functools.partial(site.core.transcripts.at_end, KEY, HISTORY)
    pumping = asyncio.ensure_future(
        bridge.call(pump, site.core.chat, modes, relay, at_end=at_end, now=site.core.clock.now)
    )
    site.streams.add(relay)
    try:
        item = await relay.get()
        if item is None or isinstance(item, Refused):
            return web.json_response({"error": "the chat cannot open a page now"}, status=503)
        response = web.StreamResponse()
        response.content_type = "text/event-stream"
        response.headers["X-Accel-Buffering"] = "no"  # a proxy must not hold events back
        await response.prepare(request)
        with contextlib.suppress(ConnectionError):  # the browser left
            await response.write(f"retry: {RETRY_MS}\n\n".encode())
            while item is not None:
                if not isinstance(item, Refused):
                    await response.write(_frame(item, timezone, site.core.clock.now()))
                item = await _next(relay, request, response)
        return response
    finally:
        site.streams.discard(relay)
        pumping.cancel()
        await asyncio.gather(pumping, return_exceptions=True)


async def _next(
    relay: Relay, request: web.Request, response: web.StreamResponse
) -> Transcript | WebEvent | ChatMode | Refused | None:
    """The relay's next item, or None once it ended or the browser left (looked at every
    LEFT_SECONDS: the service does not cancel a handler whose browser left); a comment line every
    HEARTBEAT_SECONDS meanwhile."""
    waited = 0.0
    while True:
        try:
            return await asyncio.wait_for(relay.get(), LEFT_SECONDS)
        except TimeoutError:
            if request.transport is None or request.transport.is_closing():
                return None
            waited += LEFT_SECONDS
            if waited >= HEARTBEAT_SECONDS:
                waited = 0.0
                await response.write(b": still here\n\n")


def _frame(item: Transcript | WebEvent | ChatMode, timezone: str, now: float) -> bytes:
    if isinstance(item, Transcript):
        return frame("history", history_data(item))
    if isinstance(item, WebEvent):
        if item.kind == PARTIAL:
            return frame("partial", partial_data(item))
        return frame("live", event_data(item))
    page = Frame("", item, timezone, now)
    ends = None if item.ends_at is None else page.moment(item.ends_at)
    remaining = None if item.ends_at is None else max(0, int((item.ends_at - now) * 1000))
    return frame("mode", {"mode": item.mode.value, "segment": item.segment_id, "ends": ends, "remaining": remaining})
