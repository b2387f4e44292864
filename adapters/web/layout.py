"""The frame every signed-in page shares: head, navigation, the private-mode banner, and the static files.

Pages are rendered on the server, every value through `html.escape`; the one script and the one
style sheet are files of this package (`adapters/web/static/`), served by the service itself, so
the strict Content-Security-Policy (scripts and styles from this origin only, nothing inline)
holds: no build step, nothing from another site. The banner is on every page while the web chat is
in private mode, in its own colour, with the time it ends and the button that leaves it.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from adapters.web.auth import CSRF_FIELD
from core.values.durations import format_moment
from core.values.transcript import ChatMode

STATIC = Path(__file__).with_name("static")
ASSETS = {"app.js": "text/javascript", "style.css": "text/css"}
NAV = (
    ("/", "chat", "Chat"),
    ("/context", "context", "What normal mode sees"),
    ("/memory", "memory", "Memory and settings"),
    ("/privacy", "privacy", "Privacy"),
)


CURRENT = ' aria-current="page"'


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


@dataclass(frozen=True, slots=True)
class Frame:
    """What every page needs around its body: the session's CSRF token, the web chat's mode, the
    owner's time zone and the time now (for the banner's count-down)."""

    csrf: str
    mode: ChatMode
    timezone: str
    now: float

    def moment(self, timestamp: float) -> str:
        return format_moment(timestamp, self.timezone)

    def csrf_field(self) -> str:
        return f'<input type="hidden" name="{CSRF_FIELD}" value="{esc(self.csrf)}">'

    def button(self, action: str, label: str, fields: dict[str, object] | None = None, *, kind: str = "") -> str:
        """A one-click form: POST `action` with `fields` (and the CSRF token)."""
        hidden = "".join(
            f'<input type="hidden" name="{esc(name)}" value="{esc(value)}">' for name, value in (fields or {}).items()
        )
        css = f' class="{esc(kind)}"' if kind else ""
        return (
            f'<form method="post" action="{esc(action)}" class="inline">{self.csrf_field()}{hidden}'
            f'<button type="submit"{css}>{esc(label)}</button></form>'
        )


def render(frame: Frame, *, title: str, current: str, body: str) -> web.Response:
    """A whole page: `body` is HTML already escaped."""
    private = frame.mode.is_private
    nav = "".join(f'<a href="{href}"{CURRENT if name == current else ""}>{esc(label)}</a>' for href, name, label in NAV)
    page = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="csrf-token" content="{esc(frame.csrf)}">
<title>{esc(title)} · companion</title>
<link rel="stylesheet" href="/static/style.css">
<script src="/static/app.js" defer></script>
</head>
<body class="{"private" if private else "normal"}" data-mode="{frame.mode.mode.value}" data-segment="{esc(frame.mode.segment_id or "")}">
{banner(frame)}<header class="top">
<span class="brand">companion</span>
<nav>{nav}</nav>
<form method="post" action="/logout" class="inline">{frame.csrf_field()}<button type="submit" class="quiet">Sign out</button></form>
</header>
<main>
{body}
</main>
</body>
</html>
"""
    # A form's POST carries the Origin the service checks only when the page's referrer policy lets
    # it: under the service's `no-referrer` a browser sends `Origin: null` (refused). `same-origin`
    # still sends no Referer to another site, and these pages link to none.
    return web.Response(text=page, content_type="text/html", headers={"Referrer-Policy": "same-origin"})


def banner(frame: Frame) -> str:
    """The private-mode banner (nothing in normal mode): its colour, when it ends, the way out."""
    mode = frame.mode
    if not mode.is_private:
        return ""
    if mode.ends_at is None:
        when = "It lasts until you leave it."
        remaining = -1
    else:
        when = f'It ends at <time id="private-ends">{esc(frame.moment(mode.ends_at))}</time> at the latest.'
        remaining = max(0, int((mode.ends_at - frame.now) * 1000))
    return f"""<div class="private-banner" id="private-banner" role="status" data-remaining="{remaining}">
<div><strong>Private mode.</strong> Nothing said here is kept in memory or shown to normal mode, which sees one
placeholder line in its place. {when}</div>
<form method="post" action="/normal" id="normal-form" class="inline">{frame.csrf_field()}<button type="submit">Back to normal mode (/normal)</button></form>
</div>
"""


def install_static(app: web.Application) -> None:
    """GET /static/app.js and /static/style.css: read once, served from memory."""
    files = {name: (STATIC / name).read_bytes() for name in ASSETS}

    async def serve(request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in files:
            raise web.HTTPNotFound()
        return web.Response(body=files[name], content_type=ASSETS[name], charset="utf-8")

    app.router.add_get("/static/{name}", serve)
