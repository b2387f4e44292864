"""The signed-in landing page: the least a signed-in browser sees until the web chat's pages replace it."""

from __future__ import annotations

import html

from aiohttp import web

from adapters.web.auth import CSRF_FIELD, SESSION_KEY, signed_in
from adapters.web.service import SERVICE

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


def install_landing(app: web.Application) -> None:
    """GET /: the landing page, for a signed-in browser only."""
    app.router.add_get("/", _landing)


@signed_in(lambda request: request.app[SERVICE].auth)
async def _landing(request: web.Request) -> web.StreamResponse:
    session = request[SESSION_KEY]
    csrf = html.escape(session.csrf if session is not None else "")
    return web.Response(text=LANDING_PAGE.format(csrf=csrf, field=CSRF_FIELD), content_type="text/html")
