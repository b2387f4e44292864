"""The route installers of the signed-in pages: the web chat's pages (`install_site`), or, where no
web chat is wired (the service's own tests), a landing page that only says who is signed in."""

from __future__ import annotations

import html

from aiohttp import web

from adapters.web import chat_page, context_page, memory_page, privacy_page
from adapters.web.auth import CSRF_FIELD, SESSION_KEY, signed_in
from adapters.web.layout import install_static
from adapters.web.service import SERVICE, RouteInstaller
from adapters.web.site import SITE, Site, WebCore

LANDING_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="csrf-token" content="{csrf}">
<title>companion</title>
</head>
<body>
<main>
<h1>companion</h1>
<p>You are signed in as the owner.</p>
<form method="post" action="/logout">
<input type="hidden" name="{field}" value="{csrf}">
<button type="submit">Sign out</button>
</form>
</main>
</body>
</html>
"""


def install_site(core: WebCore) -> RouteInstaller:
    """The installer of the web chat's pages: chat (/, /events, /send, /private, /normal), what normal
    mode sees (/context), memory and settings (/memory), privacy (/privacy), and /static/."""

    def install(app: web.Application) -> None:
        site = app[SITE] = Site(core)
        app.on_shutdown.append(site.end_streams)
        install_static(app)
        chat_page.install(app)
        context_page.install(app)
        memory_page.install(app)
        privacy_page.install(app)

    return install


def install_landing(app: web.Application) -> None:
    """GET /: the landing page, for a signed-in browser only."""
    app.router.add_get("/", _landing)


@signed_in(lambda request: request.app[SERVICE].auth)
async def _landing(request: web.Request) -> web.StreamResponse:
    session = request[SESSION_KEY]
    csrf = html.escape(session.csrf if session is not None else "")
    return web.Response(text=LANDING_PAGE.format(csrf=csrf, field=CSRF_FIELD), content_type="text/html")
