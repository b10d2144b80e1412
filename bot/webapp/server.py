"""The app's web server (aiohttp) inside the bot process: the page, its assets and the JSON API.

Everything is served at `/` and again under `/app/` (the path a reverse proxy may give it next to the bot's
webhook); the page uses relative addresses, so it works under either. Requests to the API must carry
`Authorization: tma <initData>`: Telegram's signed launch data, checked on every request (HMAC, microseconds).
What every answer gets: a Content-Security-Policy that allows only this origin's script and style (no inline
script) and lets Telegram's web clients frame the page, nosniff, no referrer, no CORS headers at all (same
origin only). Bodies are bounded (a larger Content-Length is refused before anything is read) and must
arrive within WEBAPP_CLIENT_TIMEOUT_S, which also closes a connection idle that long (or that never
completes its request's head); open connections are capped in all and per address (bot/webapp/connections.py);
each user has a request limit per minute (bot/webapp/limits.py). What clients can make the log say
(refused connections, refused launch data) is one line, then one count per minute.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import mimetypes
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from bot.runtime.services import Services
from bot.webapp.api import USER, Api
from bot.webapp.auth import AuthError, secret_key, verify
from bot.webapp.connections import Listener
from bot.webapp.limits import LogThrottle, RateLimiter

log = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
PREFIXES = ("", "/app")
MAX_BODY = 16 * 1024
RATE_LIMIT = 60  # requests per minute per user, per process
# Telegram's web clients show a Mini App in a frame of theirs; the phone and desktop apps use a web view.
TELEGRAM_WEB = "https://web.telegram.org https://webk.telegram.org https://webz.telegram.org"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
    f"frame-ancestors 'self' {TELEGRAM_WEB}"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Resource-Policy": "same-origin",
}
# What the page says for each refusal (its `reason`); the detail goes to the log only.
REFUSALS = {
    "missing": "No Telegram launch data: open the app from the chat with the bot.",
    "invalid": "The launch data is not signed by Telegram for this bot.",
    "expired": "The launch data has expired: close the app and open it again from the chat.",
    "not_allowed": "You are not on this bot's list of allowed users.",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Asset:
    """A file of the page, held in memory (a few small files)."""

    body: bytes
    content_type: str
    etag: str


def load_assets(root: Path = STATIC) -> dict[str, Asset]:
    """Every file under `root` by its relative path; only these names are ever served."""
    found: dict[str, Asset] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            body = path.read_bytes()
            kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            if path.suffix == ".js":
                kind = "text/javascript"  # ES modules need a JavaScript type
            found[path.relative_to(root).as_posix()] = Asset(
                body, kind, '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
            )
    return found


def _json_error(
    status: int, payload: dict[str, object], headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        status=status, text=json.dumps(payload), content_type="application/json", headers=headers
    )


class WebAppServer:
    """The aiohttp application and its listening socket, started in the bot's event loop."""

    def __init__(
        self,
        services: Services,
        *,
        host: str,
        port: int,
        bot_token: str,
        max_age_s: float,
        limiter: RateLimiter | None = None,
    ) -> None:
        self.services = services
        self.host, self.port = host, port
        self.key = secret_key(bot_token)
        self.max_age_s = max_age_s
        self.allowed = frozenset(services.settings.allowed_user_ids or ())
        self.limiter = limiter or RateLimiter(RATE_LIMIT, 60.0)
        settings = services.settings
        self.client_timeout_s = settings.webapp_client_timeout_s
        self.max_connections = settings.webapp_max_connections
        self.max_per_address = settings.webapp_max_connections_per_address
        self.refusals = LogThrottle(log)  # refused connections and launch data: bounded log lines
        self.api = Api(services)
        self.assets = load_assets()
        self._runner: web.AppRunner | None = None
        self._listener: Listener | None = None

    # ------------------------------------------------------------------ the application

    def application(self) -> web.Application:
        """The aiohttp application: middlewares, the page, the assets and the API."""
        app = web.Application(
            middlewares=[self._headers, self._bounded, self._auth], client_max_size=MAX_BODY
        )
        for prefix in PREFIXES:
            app.router.add_get(f"{prefix}/", self._index)
            app.router.add_get(f"{prefix}/assets/{{name:.+}}", self._asset)
            app.router.add_routes(self.api.routes(prefix))
        app.router.add_get("/app", self._to_app)
        return app

    @staticmethod
    def _is_api(request: web.Request) -> bool:
        return request.path.startswith(tuple(f"{p}/api/" for p in PREFIXES))

    @web.middleware
    async def _headers(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Security headers on every answer; API errors as JSON; an unexpected error logged, not shown."""
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            headers = {k: v for k, v in exc.headers.items() if k.lower() != "content-type"}
            if exc.content_type == "application/json":
                response = web.Response(
                    status=exc.status, body=exc.body, content_type="application/json", headers=headers
                )
            elif self._is_api(request):
                response = _json_error(exc.status, {"error": exc.reason}, headers)
            else:
                response = web.Response(status=exc.status, text=exc.text or exc.reason, headers=headers)
        except Exception:
            log.exception("the app's %s %s failed", request.method, request.rel_url.path)
            response = _json_error(500, {"error": "internal error (it is logged)"})
        response.headers.update(SECURITY_HEADERS)
        if self._is_api(request):
            response.headers["Cache-Control"] = "no-store"
        return response

    @web.middleware
    async def _bounded(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """A body announced larger than MAX_BODY is refused before it is read, and the connection closed
        (nothing more of it is read); a chunked one is cut at MAX_BODY while reading (client_max_size).
        A body is read here, whole, within the client timeout (the handlers then get it from memory): a
        client sending it slowly gets 408 and the connection is closed."""
        if request.content_length is not None and request.content_length > MAX_BODY:
            response = _json_error(413, {"error": f"the body is larger than {MAX_BODY} bytes"})
            response.force_close()
            return response
        if request.body_exists:
            try:
                async with asyncio.timeout(self.client_timeout_s):
                    await request.read()
            except TimeoutError:
                response = _json_error(
                    408, {"error": f"the body did not arrive within {self.client_timeout_s:g} s"}
                )
                response.force_close()
                return response
        return await handler(request)

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """API requests: the user from `Authorization: tma <initData>`, allowed, within their rate."""
        if not self._is_api(request):
            return await handler(request)
        scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
        reason = "missing" if scheme.lower() != "tma" or not raw.strip() else None
        detail = "no Authorization: tma header"
        if reason is None:
            try:
                user = verify(raw.strip(), self.key, max_age_s=self.max_age_s)
            except AuthError as exc:
                reason, detail = ("expired" if str(exc).startswith("expired") else "invalid"), str(exc)
            else:
                if user.user_id not in self.allowed:
                    reason, detail = "not_allowed", f"user {user.user_id} is not in ALLOWED_USER_IDS"
        if reason is not None:
            self.refusals.note(
                "requests", "app requests refused", "app request refused (%s): %s", reason, detail
            )
            return _json_error(
                401, {"error": REFUSALS[reason], "reason": reason}, {"WWW-Authenticate": "tma"}
            )
        wait = self.limiter.take(user.user_id)
        if wait is not None:
            return _json_error(
                429,
                {"error": f"too many requests: wait {wait} s", "retry_after": wait},
                {"Retry-After": str(wait)},
            )
        request[USER] = user
        return await handler(request)

    async def _index(self, request: web.Request) -> web.StreamResponse:
        return self._send(request, self.assets["index.html"])

    async def _asset(self, request: web.Request) -> web.StreamResponse:
        # Only names found at start: a path with ../ or anything else is simply not among them.
        found = self.assets.get(f"assets/{request.match_info['name']}")
        if found is None:
            raise web.HTTPNotFound()
        return self._send(request, found)

    @staticmethod
    def _send(request: web.Request, asset: Asset) -> web.StreamResponse:
        # Revalidated every time (an upgrade is seen at once); an unchanged file costs a 304.
        headers = {"ETag": asset.etag, "Cache-Control": "no-cache"}
        if request.headers.get("If-None-Match") == asset.etag:
            return web.Response(status=304, headers=headers)
        charset = "utf-8" if asset.content_type.startswith("text/") else None
        return web.Response(
            body=asset.body, content_type=asset.content_type, charset=charset, headers=headers
        )

    async def _to_app(self, request: web.Request) -> web.StreamResponse:
        # The fragment (Telegram's launch data) stays with the browser across the redirect.
        raise web.HTTPMovedPermanently("/app/")

    # ------------------------------------------------------------------ running

    async def start(self) -> None:
        """Listen on host:port (port 0: a free one, then in `self.port`)."""
        # No access log: the launch data is in a header, not the URL, but one line per request is noise.
        # lingering_time=0: the unread rest of a refused body is not read, the connection is closed.
        # keepalive_timeout: aiohttp closes a connection that has no complete request within it, counted
        # from its start or its last answer (a trickle of header bytes does not move it on).
        runner = web.AppRunner(
            self.application(),
            access_log=None,
            handle_signals=False,
            lingering_time=0,
            keepalive_timeout=self.client_timeout_s,
        )
        await runner.setup()
        server = runner.server
        assert server is not None  # set up
        self._runner = runner
        self._listener = Listener(
            server,
            lambda: server.connections,
            max_total=self.max_connections,
            max_per_address=self.max_per_address,
            retry_after_s=self.client_timeout_s,
            refusals=self.refusals,
        )
        self.port = await self._listener.start(self.host, self.port)
        log.info("the app's web server listens on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        """Stop listening and finish the requests being answered."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def local_url(self) -> str:
        """The page's address on this machine (for tests and `python -m bot webapp-link`)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "", "::") else self.host  # noqa: S104
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/"
