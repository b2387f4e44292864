"""Sign-in for the web: one-time codes, sessions, CSRF tokens and the rate limit of sign-in attempts.

`companion web-login` stores a code's hash and prints `http://HOST:PORT/login#CODE`. The code
rides in the fragment, which a browser never sends: it reaches no server log, no proxy and no
Referer. The login page's script POSTs it (with the page's CSRF token) and clears it from the
address bar; the answer sets the session cookie (HttpOnly, SameSite=Strict, Secure over HTTPS,
expiring), from then on the only credential. Codes (10 minutes, single use) and sessions are
stored as SHA-256 hashes of 256 random bits. A session's CSRF token is derived from its cookie
(a different hash of it), so the page may carry the token while the cookie stays unreadable.
Wrong codes are rate-limited per client address with the lockout policy of private mode
(core/privacy/lockout.py). The one signed-in user is the owner (COMPANION_OWNER).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import logging
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from adapters.web.bridge import BRIDGE
from core.ports.clock import Clock
from core.privacy.lockout import ATTEMPTS, DURATION, WINDOW, locked_until
from core.values.durations import describe_seconds

log = logging.getLogger(__name__)

CODE_SECONDS = 10 * 60.0
SESSION_SECONDS = 7 * 86400.0
SESSION_COOKIE = "companion_session"
LOGIN_COOKIE = "companion_login"  # the login page's own CSRF secret, until a session exists
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf_token"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
MAX_CODE_CHARS = 128
# A session the store confirmed is taken from memory for up to this long (never past its expiry):
# every request of a page asks, and the store is on the core's loop. Signing out forgets it at once.
SESSION_RECHECK_SECONDS = 60.0
KNOWN_SESSIONS = 256

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# A handler marked so (`by_secret`) is called by a machine that proves itself with a shared secret of
# its own, checked by the handler in constant time (a webhook): it carries no session, so no CSRF token.
_BY_SECRET = "_companion_by_secret"  # noqa: S105 - an attribute name, not a secret


def by_secret(handler: Handler) -> Handler:
    """Mark a handler that checks a secret header itself: the CSRF check passes it by."""
    setattr(handler, _BY_SECRET, True)
    return handler


class SessionStore(Protocol):
    """Where codes and sessions are kept, as hashes only (adapters/storage/web.py)."""

    async def save_login_code(self, code_hash: str, now: float, expires_at: float) -> None: ...

    async def exchange_login_code(
        self, code_hash: str, token_hash: str, now: float, expires_at: float
    ) -> StoredSessionLike | None:
        """Use up the code and open a session, in one transaction; None: no such unexpired code."""
        ...

    async def session(self, token_hash: str, now: float) -> StoredSessionLike | None: ...

    async def end_session(self, session_id: int) -> None: ...


class StoredSessionLike(Protocol):
    @property
    def id(self) -> int: ...

    @property
    def expires_at(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Session:
    """A signed-in browser: the owner. `csrf` is the token every state-changing request carries."""

    id: int
    csrf: str


# request[SESSION_KEY]: the request's Session, or None (set by `WebAuth.session_of`).
SESSION_KEY: web.RequestKey[Session | None] = web.RequestKey("companion_session", Session | None)  # type: ignore[arg-type]


def new_secret() -> str:
    """256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)


def secret_hash(secret: str, purpose: str) -> str:
    """What is stored of a code or a session cookie."""
    return hashlib.sha256(f"{purpose}:{secret}".encode()).hexdigest()


def csrf_token(secret: str) -> str:
    """The CSRF token bound to a cookie: it cannot be turned back into the cookie, nor into its stored hash."""
    digest = hashlib.sha256(f"csrf:{secret}".encode()).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


async def issue_login_code(store: SessionStore, now: float) -> str:
    """A new one-time sign-in code (`companion web-login`); only its hash is kept."""
    code = new_secret()
    await store.save_login_code(secret_hash(code, "login"), now, now + CODE_SECONDS)
    return code


class SignInAttempts:
    """Wrong sign-in codes per client address, in memory: five within 15 minutes lock that address
    out of sign-in for 15 minutes (the lockout policy of core/privacy/lockout.py). A code is 256
    random bits, so this guards the service's time rather than the code; a restart forgets it.
    Behind a reverse proxy every client is the proxy's address: one limit for all."""

    def __init__(self, *, max_addresses: int = 4096) -> None:
        self._wrong: OrderedDict[str, list[float]] = OrderedDict()
        self._max = max_addresses

    def locked_for(self, address: str, now: float) -> float | None:
        """Seconds this address stays locked out, or None."""
        until = locked_until(self._wrong.get(address, []))
        return until - now if until is not None and now < until else None

    def failed(self, address: str, now: float) -> None:
        recent = [t for t in self._wrong.pop(address, []) if t > now - WINDOW - DURATION] + [now]
        self._wrong[address] = recent[-ATTEMPTS * 4 :]
        while len(self._wrong) > self._max:
            self._wrong.popitem(last=False)

    def succeeded(self, address: str) -> None:
        self._wrong.pop(address, None)


class WebAuth:
    """Sessions and CSRF for every route of the service, and the sign-in routes themselves.

    Args:
        store: codes and sessions (hashes only).
        clock: the one clock of expiries.
        attempts: the rate limit of wrong codes.
    """

    def __init__(self, store: SessionStore, clock: Clock, attempts: SignInAttempts | None = None) -> None:
        self._store = store
        self._clock = clock
        self._attempts = attempts or SignInAttempts()
        # A cookie's hash -> (its session, until when it is taken without asking the store again).
        self._known: OrderedDict[str, tuple[int, float]] = OrderedDict()

    # --- what every request gets --------------------------------------------------------------

    async def session_of(self, request: web.Request) -> Session | None:
        """The request's session (its cookie names one that is stored and unexpired), once per request."""
        if SESSION_KEY in request:
            return request[SESSION_KEY]
        token = request.cookies.get(SESSION_COOKIE)
        session = None
        if token and len(token) <= MAX_CODE_CHARS:
            key, now = secret_hash(token, "session"), self._clock.now()
            known = self._known.get(key)
            if known is not None and now < known[1]:
                session = Session(known[0], csrf_token(token))
            else:
                self._known.pop(key, None)
                stored = await request.app[BRIDGE].call(self._store.session, key, now)
                if stored is not None:
                    self._known[key] = (stored.id, min(now + SESSION_RECHECK_SECONDS, stored.expires_at))
                    while len(self._known) > KNOWN_SESSIONS:
                        self._known.popitem(last=False)
                    session = Session(stored.id, csrf_token(token))
        request[SESSION_KEY] = session
        return session

    @web.middleware
    async def csrf_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Every state-changing request carries the CSRF token of its session (or, before there is
        one, of the login page it came from), in the X-CSRF-Token header or a csrf_token form field."""
        if request.method not in UNSAFE_METHODS or getattr(request.match_info.handler, _BY_SECRET, False):
            return await handler(request)
        expected = []
        session = await self.session_of(request)
        if session is not None:
            expected.append(session.csrf)
        nonce = request.cookies.get(LOGIN_COOKIE)
        if nonce and len(nonce) <= MAX_CODE_CHARS and request.path == "/login":
            expected.append(csrf_token(nonce))
        given = request.headers.get(CSRF_HEADER)
        if given is None and request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            form = await request.post()
            field = form.get(CSRF_FIELD)
            given = field if isinstance(field, str) else None
        if not given or not any(hmac.compare_digest(given.encode(), token.encode()) for token in expected):
            log.info("refused %s %s: no valid CSRF token", request.method, request.path)
            return web.json_response({"error": "missing or wrong CSRF token; reload the page"}, status=403)
        return await handler(request)

    # --- the sign-in routes -----------------------------------------------------------------------

    def install(self, app: web.Application) -> None:
        app.router.add_get("/login", self._login_page)
        app.router.add_get("/login.js", _login_script)
        app.router.add_post("/login", self._exchange)
        app.router.add_post("/logout", self._logout)

    async def _login_page(self, request: web.Request) -> web.StreamResponse:
        nonce = new_secret()
        response = web.Response(text=LOGIN_PAGE.format(csrf=csrf_token(nonce)), content_type="text/html")
        response.set_cookie(
            LOGIN_COOKIE,
            nonce,
            max_age=int(CODE_SECONDS),
            path="/login",
            httponly=True,
            samesite="Strict",
            secure=is_https(request),
        )
        return response

    async def _exchange(self, request: web.Request) -> web.StreamResponse:
        now = self._clock.now()
        address = request.remote or "unknown"
        locked = self._attempts.locked_for(address, now)
        if locked is not None:
            log.warning("sign-in refused: too many wrong codes from one address (locked %.0f s more)", locked)
            return web.json_response(
                {"error": f"Too many wrong sign-in links; try again in {describe_seconds(locked)}."},
                status=429,
                headers={"Retry-After": str(int(locked) + 1)},
            )
        code = await _code_of(request)
        token = new_secret()
        stored = None
        if code is not None:
            stored = await request.app[BRIDGE].call(
                self._store.exchange_login_code,
                secret_hash(code, "login"),
                secret_hash(token, "session"),
                now,
                now + SESSION_SECONDS,
            )
        if stored is None:
            self._attempts.failed(address, now)
            log.info("sign-in refused: the code is wrong, expired or used")
            return web.json_response(
                {"error": "This sign-in link is wrong, expired or used. Run `companion web-login` for a new one."},
                status=401,
            )
        self._attempts.succeeded(address)
        log.info("signed in: session %s", stored.id)
        response = web.json_response({"next": "/"})
        response.set_cookie(
            SESSION_COOKIE,
            token,
            max_age=int(SESSION_SECONDS),
            path="/",
            httponly=True,
            samesite="Strict",
            secure=is_https(request),
        )
        response.del_cookie(LOGIN_COOKIE, path="/login")
        return response

    async def _logout(self, request: web.Request) -> web.StreamResponse:
        session = await self.session_of(request)
        if session is not None:
            self._known = OrderedDict((k, v) for k, v in self._known.items() if v[0] != session.id)
            await request.app[BRIDGE].call(self._store.end_session, session.id)
            log.info("signed out: session %s", session.id)
        response = web.Response(status=303, headers={"Location": "/login"})
        response.del_cookie(SESSION_COOKIE, path="/")
        return response


def signed_in(auth_of: Callable[[web.Request], WebAuth]) -> Callable[[Handler], Handler]:
    """Decorate a page handler so that it runs only for a signed-in browser: a GET without a
    session is sent to /login, anything else answered 401. The session is `request[SESSION_KEY]`.
    (CSRF needs no decorator: the service's middleware checks every state-changing request.)"""

    def decorate(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def guarded(request: web.Request) -> web.StreamResponse:
            if await auth_of(request).session_of(request) is None:
                if request.method in ("GET", "HEAD"):
                    raise web.HTTPSeeOther("/login")
                return web.json_response({"error": "not signed in"}, status=401)
            return await handler(request)

        return guarded

    return decorate


def is_https(request: web.Request) -> bool:
    """Whether the browser reached the service over HTTPS: directly, or through a proxy that says so.
    A client that claims it falsely only gets a Secure cookie its own browser will not send back."""
    forwarded = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
    return request.secure or forwarded == "https"


async def _code_of(request: web.Request) -> str | None:
    try:
        body = await request.json(loads=json.loads)
    except (ValueError, UnicodeDecodeError):
        return None
    code = body.get("code") if isinstance(body, dict) else None
    if not isinstance(code, str) or not 0 < len(code) <= MAX_CODE_CHARS:
        return None
    return code


async def _login_script(request: web.Request) -> web.StreamResponse:
    return web.Response(text=LOGIN_SCRIPT, content_type="text/javascript")


LOGIN_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<meta name="csrf-token" content="{csrf}">
<title>companion: sign in</title>
<script src="/login.js" defer></script>
</head>
<body>
<main>
<h1>companion</h1>
<p id="status">To sign in, run <code>companion web-login</code> where the companion runs, and open the link it prints.</p>
</main>
</body>
</html>
"""

# The code is in the fragment, which the browser never sends: it is read here, removed from the
# address bar (and so from history) before anything else happens, and sent once, by POST.
LOGIN_SCRIPT = """"use strict";
(function () {
  var code = window.location.hash.slice(1);
  var status = document.getElementById("status");
  if (!code) { return; }
  window.history.replaceState(null, "", window.location.pathname);
  status.textContent = "Signing in\u2026";
  var token = document.querySelector('meta[name="csrf-token"]').getAttribute("content");
  window.fetch("/login", {
    method: "POST",
    credentials: "same-origin",
    headers: {"Content-Type": "application/json", "X-CSRF-Token": token},
    body: JSON.stringify({code: code})
  }).then(function (response) {
    return response.json().then(function (body) { return {ok: response.ok, body: body}; });
  }).then(function (answer) {
    if (answer.ok) { window.location.replace(answer.body.next || "/"); }
    else { status.textContent = answer.body.error || "Sign-in failed."; }
  }).catch(function () {
    status.textContent = "Sign-in failed: the companion did not answer.";
  });
})();
"""
