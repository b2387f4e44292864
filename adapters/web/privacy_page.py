"""The privacy page (GET /privacy): each private interval that still exists, with when it ends, and a
button that ends it now; nothing of what it holds.

An interval is shown by its times alone (core/turn/controls.py `OwnerControls.intervals`, which
reads the segments and never a row of their messages, summaries or pads, and never settles a mode:
looking must not end private mode). The button runs `/forget private` in that interval's
conversation (POST /privacy), which leaves private mode there and deletes every interval of that
conversation with everything derived from it, as typing it would; the web chat's open pages then
read their mode again.
"""

from __future__ import annotations

from aiohttp import web

from adapters.web.auth import signed_in
from adapters.web.bridge import BRIDGE
from adapters.web.context_page import PLATFORMS
from adapters.web.layout import Frame, esc, render
from adapters.web.memory_page import flash_html, run_action
from adapters.web.service import SERVICE
from adapters.web.site import SITE
from core.turn.controls import ConversationIntervals, Interval

guarded = signed_in(lambda request: request.app[SERVICE].auth)


def install(app: web.Application) -> None:
    app.router.add_get("/privacy", _privacy)
    app.router.add_post("/privacy", _forget)


@guarded
async def _privacy(request: web.Request) -> web.StreamResponse:
    site = request.app[SITE]
    found = await request.app[BRIDGE].call(site.core.controls.intervals)
    page = await site.frame(request)
    flash = site.flashes.take(site.session_id(request))
    return render(page, title="Privacy", current="privacy", body=_body(page, found, flash))


@guarded
async def _forget(request: web.Request) -> web.StreamResponse:
    site = request.app[SITE]
    form = await request.post()
    conversation = form.get("conversation")
    answer = await run_action(request, site, {"do": "forget-private", "conversation": conversation})
    await request.app[BRIDGE].call(site.core.chat.mode_changed)
    if "application/json" in request.headers.get("Accept", ""):
        return web.json_response({"answer": answer})
    raise web.HTTPSeeOther("/privacy")


def _body(page: Frame, found: list[ConversationIntervals], flash: str | None) -> str:
    sections = "\n".join(_conversation(page, c) for c in found) or (
        '<p class="muted" id="no-intervals">No private interval exists now.</p>'
    )
    return f"""<h1>Privacy</h1>
{flash_html(flash)}
<p class="lead">Each private interval that still exists, in every conversation of yours, with when it ends.
Nothing of what was said in one is on this page, or on any page but the chat while it is private. Ending one
now deletes every interval of that conversation with everything derived from it, as <code>/forget private</code>
does there.</p>
{sections}"""


def _conversation(page: Frame, found: ConversationIntervals) -> str:
    conversation = found.conversation
    where = PLATFORMS.get(conversation.platform, conversation.platform)
    rows = "".join(_interval(page, interval) for interval in found.intervals)
    count = len(found.intervals)
    button = page.button(
        "/privacy",
        f"End {'it' if count == 1 else f'all {count}'} now (/forget private)",
        {"conversation": conversation.id},
        kind="danger",
    )
    return f"""<section class="intervals" id="intervals-{conversation.id}">
<h2>{esc(where)} <span class="muted">(conversation {conversation.id})</span></h2>
<ul class="items">{rows}</ul>
{button}
</section>"""


def _interval(page: Frame, interval: Interval) -> str:
    began = page.moment(interval.started_at)
    deleted = (
        "kept until you delete it" if interval.deleted_at is None else f"deleted at {page.moment(interval.deleted_at)}"
    )
    if interval.is_open:
        until = (
            ""
            if interval.private_until is None
            else f", private mode ends at {page.moment(interval.private_until)} at the latest"
        )
        state = f"<strong>open now</strong>{esc(until)}"
    else:
        state = "ended"
    return f"<li><span>Began {esc(began)}: {state}; {esc(deleted)}.</span></li>"
