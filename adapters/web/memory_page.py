"""Memory and settings (GET /memory): what normal memory keeps about the owner, their mirrors, nudge
settings and the latest nudge decisions; each thing removable or changeable with one click.

Every button runs the chat command that does the same (POST /memory: `/forget 3`, `/forget note 2`,
`/goal done 4`, `/followup cancel 1`, `/unmirror 2`, `/nudges off`, `/quiet 22:00-07:00` ...) through
core/turn/controls.py: in the conversation's lane, refused in private mode like the typed command,
then by the store's guard. Its answer is shown once at the top of the page. Nothing private is read
for this page: the normal pad only, and decisions without private mode's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from aiohttp import web

from adapters.web.auth import signed_in
from adapters.web.bridge import BRIDGE
from adapters.web.context_page import PLATFORMS
from adapters.web.layout import Frame, esc, render
from adapters.web.service import SERVICE
from adapters.web.site import SITE, Site
from core.turn.controls import NotTheOwners, OwnerMemory
from core.values.durations import describe_seconds

# A button's action: the command it runs and its arguments (`{id}` a number, `{value}` a setting).
ACTIONS = {
    "forget-memory": ("forget", "{id}"),
    "forget-note": ("forget", "note {id}"),
    "goal-done": ("goal", "done {id}"),
    "goal-drop": ("goal", "drop {id}"),
    "followup-pause": ("followup", "pause {id}"),
    "followup-cancel": ("followup", "cancel {id}"),
    "unmirror": ("unmirror", "{id}"),
    "nudges": ("nudges", "{value}"),
    "quiet": ("quiet", "{value}"),
    "cooldown": ("cooldown", "{value}"),
    "timezone": ("timezone", "{value}"),
    "forget-private": ("forget", "private"),  # the privacy page's button, in its interval's conversation
}
_ID = re.compile(r"^[0-9]{1,12}$")
_VALUE = re.compile(r"^[A-Za-z0-9_:/+.\-]{1,64}$")  # 3, off, 22:00-07:00, 4h, Europe/Berlin
REASONS = {
    "due": "it was due",
    "late": "sent late",
    "model": "the model chose silence",
    "budget": "the day's budget was used",
    "quiet": "quiet hours",
    "cooldown": "too soon after the last nudge",
    "active": "you were writing",
    "backoff": "earlier nudges went unanswered",
    "disabled": "nudges are off",
    "missed": "more than 12 hours late",
    "restart": "a restart came between",
}

guarded = signed_in(lambda request: request.app[SERVICE].auth)


def install(app: web.Application) -> None:
    app.router.add_get("/memory", _memory)
    app.router.add_post("/memory", _change)


@guarded
async def _memory(request: web.Request) -> web.StreamResponse:
    site = request.app[SITE]
    memory = await request.app[BRIDGE].call(site.core.controls.memory)
    page = await site.frame(request)
    flash = site.flashes.take(site.session_id(request))
    return render(page, title="Memory and settings", current="memory", body=_body(page, memory, flash))


@guarded
async def _change(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    answer = await run_action(request, request.app[SITE], form)
    if "application/json" in request.headers.get("Accept", ""):
        return web.json_response({"answer": answer})
    raise web.HTTPSeeOther("/memory")


async def run_action(request: web.Request, site: Site, form: Mapping[str, object]) -> str:
    """Run the command of the form's `do` (with its `id`, `value`, `conversation`); its answer is
    kept to be shown once, and returned."""
    do, ident, value, conversation = (form.get(name) for name in ("do", "id", "value", "conversation"))
    action = ACTIONS.get(do) if isinstance(do, str) else None
    if action is None:
        answer = "That is not something this page can do. Nothing changed."
    elif "{id}" in action[1] and not (isinstance(ident, str) and _ID.match(ident)):
        answer = "That needs the number of what to change. Nothing changed."
    elif "{value}" in action[1] and not (isinstance(value, str) and _VALUE.match(value.strip())):
        answer = "That value is not one I understand. Nothing changed."
    else:
        name, template = action
        args = template.format(id=ident, value=value.strip() if isinstance(value, str) else "")
        target = int(conversation) if isinstance(conversation, str) and _ID.match(conversation) else None
        try:
            answer = await request.app[BRIDGE].call(site.core.controls.run, name, args, target)
        except NotTheOwners:
            answer = "That conversation is not yours, or no longer exists. Nothing changed."
    site.flashes.keep(site.session_id(request), answer)
    return answer


def flash_html(flash: str | None) -> str:
    return f'<p class="flash" role="status">{esc(flash)}</p>' if flash else ""


def _body(page: Frame, memory: OwnerMemory, flash: str | None) -> str:
    return f"""<h1>Memory and settings</h1>
{flash_html(flash)}
<p class="lead">What normal mode keeps about you, and uses later. Each button does what the chat command
beside it does, with the same rules: in private mode nothing here can be changed.</p>
{_pad(page, memory)}
{_notes(page, memory)}
{_goals(page, memory)}
{_followups(page, memory)}
{_mirrors(page, memory)}
{_nudges(page, memory)}
{_decisions(page, memory)}"""


def _listing(items: list[str], empty: str) -> str:
    return f'<ul class="items">{"".join(items)}</ul>' if items else f'<p class="muted">{esc(empty)}</p>'


def _pad(page: Frame, memory: OwnerMemory) -> str:
    items = [
        f"<li><span>#{e.id} {esc(e.text)}</span>{page.button('/memory', 'Forget', {'do': 'forget-memory', 'id': e.id})}</li>"
        for e in memory.pad
    ]
    return f'<section id="memories"><h2>Memories <code>/forget N</code></h2>{_listing(items, "Nothing yet.")}</section>'


def _notes(page: Frame, memory: OwnerMemory) -> str:
    items = [
        f'<li><span><span class="muted">{esc(n.day)}</span> {esc(n.text)}</span>'
        f"{page.button('/memory', 'Forget', {'do': 'forget-note', 'id': n.id})}</li>"
        for n in memory.notes
    ]
    return (
        f'<section id="notes"><h2>Daily notes <code>/forget note N</code></h2>'
        f"{_listing(items, 'No notes yet: normal messages are noted every few minutes.')}</section>"
    )


def _goals(page: Frame, memory: OwnerMemory) -> str:
    items = []
    for g in memory.goals:
        due = f' <span class="muted">by {esc(page.moment(g.due_at))}</span>' if g.due_at else ""
        done = page.button("/memory", "Done", {"do": "goal-done", "id": g.id})
        drop = page.button("/memory", "Drop", {"do": "goal-drop", "id": g.id})
        items.append(f"<li><span>#{g.id} {esc(g.title)}{due}</span>{done}{drop}</li>")
    return (
        f'<section id="goals"><h2>Goals <code>/goal done N</code></h2>{_listing(items, "No active goals.")}</section>'
    )


def _followups(page: Frame, memory: OwnerMemory) -> str:
    items = []
    for f in memory.followups:
        when = page.moment(f.due_at) if f.due_at else "when it happens"
        state = {"paused": " (paused)", "missed": " (missed: more than 12 hours late)"}.get(f.status, "")
        buttons = (
            "" if f.status != "scheduled" else page.button("/memory", "Pause", {"do": "followup-pause", "id": f.id})
        )
        if f.status != "missed":
            buttons += page.button("/memory", "Cancel", {"do": "followup-cancel", "id": f.id})
        kind = "Reminder" if f.kind == "reminder" else "Event watch"
        items.append(
            f'<li><span>#{f.id} {kind} <span class="muted">{esc(when)}{state}</span>: {esc(f.text)}</span>{buttons}</li>'
        )
    return (
        f'<section id="followups"><h2>Follow-ups and reminders <code>/followup cancel N</code></h2>'
        f"{_listing(items, 'No follow-ups.')}</section>"
    )


def _mirrors(page: Frame, memory: OwnerMemory) -> str:
    items = []
    for mirrors in memory.mirrors:
        source = PLATFORMS.get(mirrors.conversation.platform, mirrors.conversation.platform)
        for b in mirrors.bindings:
            state = "active" if b.state == "active" else f"stopped ({b.reason or 'refused'})"
            remove = page.button(
                "/memory", "Remove", {"do": "unmirror", "id": b.id, "conversation": mirrors.conversation.id}
            )
            items.append(
                f"<li><span>#{b.id} from {esc(source)} to <code>{esc(b.target)}</code>: {state}</span>{remove}</li>"
            )
    return (
        f'<section id="mirrors"><h2>Mirrors <code>/unmirror N</code></h2>'
        f"{_listing(items, 'Nothing is mirrored. /mirror PLATFORM:CHAT_ID in a chat adds one.')}</section>"
    )


def _setting(page: Frame, action: str, label: str, value: str, placeholder: str) -> str:
    return (
        f'<form method="post" action="/memory" class="setting">{page.csrf_field()}'
        f'<input type="hidden" name="do" value="{action}">'
        f'<label>{esc(label)} <input type="text" name="value" value="{esc(value)}" placeholder="{esc(placeholder)}" '
        f'maxlength="64" autocomplete="off"></label><button type="submit">Set</button></form>'
    )


def _nudges(page: Frame, memory: OwnerMemory) -> str:
    n = memory.nudges
    budget = "off" if n.budget == 0 else f"at most {n.budget} a day"
    cooldown = f"at least {describe_seconds(n.cooldown)} between two" if n.cooldown > 0 else "none"
    where = "one chat you pinned" if n.pinned else "the chat you last wrote in"
    return f"""<section id="nudges"><h2>Nudges <code>/nudges</code></h2>
<p>Nudges: <strong>{esc(budget)}</strong>, to {where}. Quiet hours: <strong>{esc(n.quiet)}</strong>.
Time zone: <strong>{esc(n.timezone)}</strong>. Cooldown: <strong>{esc(cooldown)}</strong>. Reminders you set
always come, at their time.</p>
<div class="settings">
{_setting(page, "nudges", "Nudges a day (0-24)", str(n.budget), "2")}
<div class="buttons">{page.button("/memory", "No nudges", {"do": "nudges", "value": "off"})}{page.button("/memory", "Back to the default", {"do": "nudges", "value": "on"})}{page.button("/memory", "Send them to this web chat", {"do": "nudges", "value": "here"})}</div>
{_setting(page, "quiet", "Quiet hours", n.quiet, "22:00-08:00 or off")}
{_setting(page, "cooldown", "Cooldown", "", "4h, off or default")}
{_setting(page, "timezone", "Time zone", n.timezone, "Europe/Berlin")}
</div>
</section>"""


def _decisions(page: Frame, memory: OwnerMemory) -> str:
    if not memory.decisions:
        return '<section id="decisions"><h2>Latest nudge decisions</h2><p class="muted">None yet.</p></section>'
    rows = "".join(
        f"<tr><td>{esc(page.moment(d.decided_at))}</td><td>{esc(d.kind)}</td><td>{esc(d.outcome)}</td>"
        f"<td>{esc(REASONS.get(d.reason, d.reason))}</td></tr>"
        for d in memory.decisions
    )
    return f"""<section id="decisions"><h2>Latest nudge decisions</h2>
<p class="muted">Kinds and reasons only: what was decided, never what a message said.</p>
<table><thead><tr><th>when</th><th>kind</th><th>outcome</th><th>why</th></tr></thead><tbody>{rows}</tbody></table>
</section>"""
