"""What normal mode sees (GET /context): for each of the owner's conversations, the next normal-mode
model request, exactly as it would be sent now.

The page draws what core/turn/preview.py builds with the turn's own code (`Responder.prepare`, the
provider's `request_body`): each message (persona, pad, summary, window, each private interval as
its one placeholder line), the tools that would be offered, and the request's exact bytes and size.
It stands a placeholder in for the message not typed yet; POST /context draws it with the message
the owner is about to send instead (in the request body, never the address), and is then byte for
byte the body the model receives when that message is sent next. It is normal mode's view whatever
mode a conversation is in: nothing of a private interval is on it.
"""

from __future__ import annotations

from aiohttp import web

from adapters.web.auth import signed_in
from adapters.web.bridge import BRIDGE
from adapters.web.layout import Frame, esc, render
from adapters.web.service import SERVICE
from adapters.web.site import SITE
from core.turn.preview import UPCOMING, RequestPreview
from core.values.model import ChatMessage

MAX_NEXT = 4000
PLATFORMS = {"web": "Web chat", "telegram": "Telegram", "discord": "Discord", "terminal": "Terminal"}

guarded = signed_in(lambda request: request.app[SERVICE].auth)


def install(app: web.Application) -> None:
    app.router.add_get("/context", _context)
    app.router.add_post("/context", _context)


@guarded
async def _context(request: web.Request) -> web.StreamResponse:
    upcoming = UPCOMING
    if request.method == "POST":
        form = await request.post()
        typed = form.get("next")
        if isinstance(typed, str) and typed.strip() and len(typed) <= MAX_NEXT:
            upcoming = typed
    site = request.app[SITE]
    previews = await request.app[BRIDGE].call(site.core.preview.of_owner, upcoming)
    page = await site.frame(request)
    return render(page, title="What normal mode sees", current="context", body=_body(page, previews, upcoming))


def _body(page: Frame, previews: list[RequestPreview], upcoming: str) -> str:
    sections = "\n".join(_section(preview) for preview in previews) or (
        "<p>No conversation yet: write in the chat, then come back.</p>"
    )
    typed = "" if upcoming == UPCOMING else esc(upcoming)
    return f"""<h1>What normal mode sees</h1>
<p class="lead">For each of your conversations, exactly what the next normal-mode request to the model would
carry, built by the code that builds it: the persona, what it keeps about you, the rolling summary, the newest
messages (each private interval as its one placeholder line), the tools it would be offered, and the request's
size. <code>{esc(UPCOMING)}</code> stands in for the message you have not written yet.</p>
<form method="post" action="/context" class="preview-form">{page.csrf_field()}
<label for="next">Show it with the message you will send next</label>
<input type="text" name="next" id="next" maxlength="{MAX_NEXT}" value="{typed}" autocomplete="off">
<button type="submit">Show</button>
</form>
{sections}"""


def _section(preview: RequestPreview) -> str:
    conversation = preview.conversation
    where = PLATFORMS.get(conversation.platform, conversation.platform)
    request = preview.request
    size = (
        f"<strong>{preview.body_size:,} bytes</strong> on the wire"
        if preview.body_size is not None
        else "nothing leaves this process (the embedded offline responder reads it in memory)"
    )
    notes = [
        f"{len(request.messages)} messages",
        f"{len(request.tools)} tools",
        f"{preview.prompt_bytes:,} prompt bytes",
    ]
    if preview.fold_follows:
        notes.append("the next turn folds older messages into the summary after its answer")
    private = (
        '<p class="note">This conversation is in private mode now: what is shown is all normal mode would be given, '
        "the open interval as its placeholder; leaving with /normal adds its line first.</p>"
        if preview.private_now
        else ""
    )
    messages = "\n".join(_message(m) for m in request.messages)
    served = dict(preview.served_by)
    tools = "\n".join(
        f"<li><code>{esc(t.name)}</code>: {esc(t.description)}"
        + (f' <span class="muted">(served by {esc(served[t.name])})</span>' if t.name in served else "")
        + "</li>"
        for t in request.tools
    )
    if preview.servers_down:
        down = ", ".join(preview.servers_down)
        tools += f'\n<li class="muted">not reachable now, so none of their tools: {esc(down)}</li>'
    body = (
        f"""<details class="body"><summary>The exact request body</summary>
<pre class="request-body" id="body-{conversation.id}">{esc(preview.body.decode("utf-8"))}</pre></details>"""
        if preview.body is not None
        else ""
    )
    return f"""<section class="request" id="conversation-{conversation.id}" data-platform="{esc(conversation.platform)}">
<h2>{esc(where)} <span class="muted">(conversation {conversation.id})</span></h2>
<p>{size}; {esc(", ".join(notes))}.</p>
{private}<ol class="request-messages">
{messages}
</ol>
<h3>Tools offered</h3>
<ul class="tools">{tools or "<li>none</li>"}</ul>
{body}
</section>"""


def _message(message: ChatMessage) -> str:
    images = f" (+{len(message.images)} images)" if message.images else ""
    content = message.content if message.content is not None else ""
    calls = "".join(f"\n[calls {esc(call.name)}]" for call in message.tool_calls)
    return (
        f'<li class="role-{esc(message.role)}"><span class="role">{esc(message.role)}{images}</span>'
        f"<pre>{esc(content)}{calls}</pre></li>"
    )
