"""The app's JSON API: one handler per route, each calling the service the chat command uses.

The user is `request[USER]` (set by the server's auth middleware from verified init data only). Another
user's id, or an unknown one, answers 404 the same way: nothing tells them apart. Blocking service calls
run in a worker thread; the memory store already runs its queries there.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, TypeVar

from aiohttp import web

from bot.config.args import parse_int
from bot.runtime.memory_check import self_check
from bot.runtime.services import Services
from bot.texts.memory import LAYER_TITLES
from bot.webapp import views
from bot.webapp.auth import InitData
from core_tools.checkin.rules import CheckinInputError
from core_tools.checkin.rules import parse as parse_checkin
from core_tools.errors import ToolError
from core_tools.memory.selfcheck import findable_line
from core_tools.schedule.rules import ScheduleInputError
from core_tools.usage.daily import MAX_DAYS, daily_usage

T = TypeVar("T")
USER = web.RequestKey("user", InitData)  # the verified user of a request (the server's auth middleware)
MEMORY_PAGE = 50  # the store's own bound on one listing
MAX_ID = 64  # longer path ids are not ids: 404 without a query
SCHEDULE_ACTIONS = ("pause", "resume", "cancel")
# What the page can use: later features (approvals, the spend of each task, "why this answer") turn theirs on.
FEATURES = {"task_spend": False, "approvals": False, "answer_info": False}


def ok(data: dict[str, Any], status: int = 200) -> web.Response:
    """A JSON answer (never cached: it is one user's data)."""
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, ensure_ascii=False))


_ERRORS: dict[int, type[web.HTTPException]] = {
    400: web.HTTPBadRequest,
    404: web.HTTPNotFound,
    409: web.HTTPConflict,
}


def problem(status: int, message: str) -> web.HTTPException:
    """A JSON error answer to raise: {"error": message} (400, 404 or 409)."""
    return _ERRORS[status](text=json.dumps({"error": message}), content_type="application/json")


def _int_query(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query.get(name, "")
    if not raw:
        return default
    value = parse_int(raw, low, high)  # ASCII digits only: "³" is a digit to str.isdigit, not to int()
    if value is None:
        raise problem(400, f"{name} must be a whole number from {low} to {high}")
    return value


def _path_id(request: web.Request) -> str:
    value = request.match_info["id"]
    if not value or len(value) > MAX_ID:
        raise problem(404, "not found")
    return value


MAX_DEPTH = 32  # the API's bodies are flat objects; deeper nesting is refused, not parsed further


def parse_body(raw: bytes) -> dict[str, Any]:
    """A request body as a JSON object of valid text; ValueError with a short reason for anything else:
    not UTF-8, not JSON (NaN and Infinity included), nested deeper than MAX_DEPTH (5,000 levels would
    exhaust the parser's recursion), a lone surrogate (`"\\ud800"` parses, but is no text the database can
    store), or no object at the top."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("the body is not UTF-8 text") from None
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError(f"the body is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:
        raise ValueError("the body is not JSON") from None
    if not isinstance(data, dict):
        raise ValueError("the body must be a JSON object")
    _check_values(data)
    return data


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _check_values(data: dict[str, Any]) -> None:
    """Every string (keys too) is valid Unicode, and nothing is nested deeper than MAX_DEPTH (iterative)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"the body is nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            stack.extend((k, depth) for k in value)
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("the body has a lone surrogate (\\ud800 to \\udfff): not text") from None


async def _body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object (the server bounds its size and has read it before this)."""
    try:
        return parse_body(await request.read())
    except ValueError as exc:
        raise problem(400, str(exc)) from None


class Api:
    """The route handlers over the bot's services."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.settings = services.settings
        self.allowed = list(services.settings.allowed_user_ids or [])

    @staticmethod
    def user(request: web.Request) -> InitData:
        """The verified user of a request."""
        return request[USER]

    async def _thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(fn, *args)

    def routes(self, prefix: str = "") -> list[web.RouteDef]:
        """The API's routes under `prefix` ("" or the path the app is served at, e.g. "/app")."""
        api = f"{prefix}/api"
        return [
            web.get(f"{api}/me", self.me),
            web.get(f"{api}/memories", self.memories),
            web.patch(f"{api}/memories/{{id}}", self.edit_memory),
            web.delete(f"{api}/memories/{{id}}", self.forget_memory),
            web.get(f"{api}/memories/{{id}}/history", self.memory_history),
            web.post(f"{api}/memories/{{id}}/undo", self.undo_memory),
            web.get(f"{api}/schedules", self.schedules),
            web.post(f"{api}/schedules/{{id}}/{{action}}", self.schedule_action),
            web.get(f"{api}/checkin", self.checkin),
            web.post(f"{api}/checkin", self.set_checkin),
            web.get(f"{api}/usage", self.usage),
            web.get(f"{api}/code_runs", self.code_runs),
            web.get(f"{api}/code_runs/{{id}}", self.code_run),
            web.get(f"{api}/files", self.files),
        ]

    # ------------------------------------------------------------------ who

    async def me(self, request: web.Request) -> web.Response:
        """GET /api/me: who the user is, their zone, whether they are the owner, what the page can show."""
        user = self.user(request)
        zone = self.services.conversations.user_timezone(user.user_id) or self.settings.default_timezone
        return ok(
            {
                "user": {"id": user.user_id, "first_name": user.first_name, "username": user.username},
                "owner": user.user_id == self.settings.owner_id,
                "timezone": zone,
                "layers": LAYER_TITLES,
                "features": FEATURES,
            }
        )

    # ------------------------------------------------------------------ memories

    async def memories(self, request: web.Request) -> web.Response:
        """GET /api/memories?layer=&q=&offset=: the user's current memories (a search with q), by layer."""
        user = self.user(request).user_id
        store = self.services.memory
        layer = request.query.get("layer") or None
        if layer is not None and layer not in LAYER_TITLES:
            raise problem(400, f"layer must be one of {', '.join(LAYER_TITLES)}")
        query = (request.query.get("q") or "").strip()[:500] or None
        offset = _int_query(request, "offset", 0, 0, 1_000_000)
        # The session layer is that of the user's private chat, as /memory there shows it (a small indexed
        # read, made on the event loop like the chat's own session look-up).
        session = self.services.conversations.current_session(user, user).id
        if query is not None:
            found = await store.recall(user, query, layer=layer, limit=MEMORY_PAGE)
            counts = (await store.page(user, session_id=session, limit=1))[1]  # the layers' counts only
            more = False
        else:
            found, counts = await store.page(
                user, layer=layer, session_id=session, offset=offset, limit=MEMORY_PAGE
            )
            more = len(found) == MEMORY_PAGE
        return ok(
            {
                "memories": [views.memory(m) for m in found],
                "counts": counts,
                "layer": layer,
                "q": query,
                "offset": offset,
                "more": more,
                "checked": findable_line(await self_check(self.services).last(user)),
            }
        )

    async def edit_memory(self, request: web.Request) -> web.Response:
        """PATCH /api/memories/{id} {"content": text}: rewrite a memory's text (undo brings the old back)."""
        user = self.user(request).user_id
        memory_id = _path_id(request)
        content = (await _body(request)).get("content")
        if not isinstance(content, str):
            raise problem(400, 'give {"content": "the new text"}')
        try:
            changed = await self.services.memory.edit(user, memory_id, content)
        except ToolError as exc:
            raise problem(400, str(exc)) from None
        if changed is None:
            raise problem(404, "no current memory with this id")
        return ok({"memory": views.memory(changed)})

    async def forget_memory(self, request: web.Request) -> web.Response:
        """DELETE /api/memories/{id}: forget a memory (undo brings it back)."""
        gone = await self.services.memory.forget(self.user(request).user_id, _path_id(request))
        if gone is None:
            raise problem(404, "no memory with this id")
        return ok({"forgotten": views.memory(gone)})

    async def memory_history(self, request: web.Request) -> web.Response:
        """GET /api/memories/{id}/history: the memory's changes, newest first."""
        memory_id = _path_id(request)
        changes = await self.services.memory.history(self.user(request).user_id, memory_id)
        if not changes:
            raise problem(404, "no history for this id")
        return ok({"id": memory_id, "changes": [views.change(c) for c in changes]})

    async def undo_memory(self, request: web.Request) -> web.Response:
        """POST /api/memories/{id}/undo: undo the memory's last change."""
        memory_id = _path_id(request)
        done = await self.services.memory.undo(self.user(request).user_id, memory_id)
        if done is None:
            raise problem(404, "nothing to undo for this id")
        return ok({"undone": done})

    # ------------------------------------------------------------------ schedules

    async def schedules(self, request: web.Request) -> web.Response:
        """GET /api/schedules: the user's reminders and tasks with their next times in their zone."""
        user = self.user(request).user_id
        service = self.services.schedules.service
        items = await self._thread(service.list_for, user)
        zone = await self._thread(service.zone_of_user, user)
        return ok({"timezone": zone, "schedules": [views.schedule(i) for i in items]})

    async def schedule_action(self, request: web.Request) -> web.Response:
        """POST /api/schedules/{id}/pause|resume|cancel."""
        user = self.user(request).user_id
        schedule_id = parse_int(request.match_info["id"], 1, 2**62)
        action = request.match_info["action"]
        if action not in SCHEDULE_ACTIONS or schedule_id is None:
            raise problem(404, "not found")
        service = self.services.schedules.service

        def act() -> dict[str, Any] | None:
            if service.get_for(user, schedule_id) is None:
                return None
            if action == "pause":
                service.pause(user, schedule_id)
            elif action == "resume":
                service.resume(user, schedule_id)
            else:
                service.cancel(user, schedule_id)
            return service.get_for(user, schedule_id)

        try:
            changed = await self._thread(act)
        except ScheduleInputError as exc:
            raise problem(409, str(exc)) from None
        if changed is None:
            raise problem(404, "no schedule with this id")
        self.services.schedules.wake()  # a resumed one may be due before the time the runner waits for
        return ok({"schedule": views.schedule(changed)})

    # ------------------------------------------------------------------ check-ins

    async def checkin(self, request: web.Request) -> web.Response:
        """GET /api/checkin: the user's check-in (when, the next look, its back-off) and what the last one
        sent contained."""
        service = self.services.checkins
        if service is None:
            raise problem(404, "check-ins are not available")
        state = await self._thread(service.state, self.user(request).user_id)
        return ok({"checkin": state})

    async def set_checkin(self, request: web.Request) -> web.Response:
        """POST /api/checkin {"cadence": "daily"|"weekly"|"off", "weekday": "mon", "at": "09:00",
        "digest": false}: what /checkin sets, checked the same way."""
        service = self.services.checkins
        if service is None:
            raise problem(404, "check-ins are not available")
        user = self.user(request).user_id
        body = await _body(request)

        def text(key: str) -> str:
            value = body.get(key)
            return value.replace(" ", "") if isinstance(value, str) else ""

        cadence = text("cadence")
        words = [cadence if cadence in ("daily", "weekly", "off") else "?"]
        if cadence == "weekly":
            words.append(text("weekday") or "?")
        if cadence in ("daily", "weekly"):
            words.append(text("at") or "?")
            if body.get("digest") is True:
                words.append("digest")
        try:
            req = parse_checkin(words)
        except CheckinInputError as exc:
            raise problem(400, str(exc)) from None
        if req.action == "off":
            await self._thread(service.off, user)
        else:
            await self._thread(service.set, user, req)
            self.services.schedules.wake()
        return ok({"checkin": await self._thread(service.state, user)})

    # ------------------------------------------------------------------ usage

    async def usage(self, request: web.Request) -> web.Response:
        """GET /api/usage?days=30: tokens and cost per day by purpose and model, caps and what is left;
        the owner also gets everyone's month and caps."""
        user = self.user(request).user_id
        days = _int_query(request, "days", 30, 1, MAX_DAYS)
        service = self.services.usage_service

        def gather() -> dict[str, Any]:
            out = views.usage(daily_usage(service, user, days), service.cap_status(user))
            if service.is_owner(user):
                out["everyone"] = views.everyone(service, service.usage_of_all("month"), self.allowed)
            return out

        return ok(await self._thread(gather))

    # ------------------------------------------------------------------ code runs and files

    async def code_runs(self, request: web.Request) -> web.Response:
        """GET /api/code_runs?limit=: the user's latest code runs."""
        limit = _int_query(request, "limit", 30, 1, 200)
        rows = await self._thread(self.services.code.executions.recent, self.user(request).user_id, limit)
        return ok({"runs": [views.run(r) for r in rows]})

    async def code_run(self, request: web.Request) -> web.Response:
        """GET /api/code_runs/{id}: one run's code, output and files."""
        found = await self._thread(
            self.services.code.executions.detail, self.user(request).user_id, _path_id(request)
        )
        if found is None:
            raise problem(404, "no code run with this id")
        return ok({"run": views.run_detail(found)})

    async def files(self, request: web.Request) -> web.Response:
        """GET /api/files?limit=: the files the user sent, newest first."""
        limit = _int_query(request, "limit", 100, 1, 500)
        media = self.services.media
        rows = (
            [] if media is None else await self._thread(media.rows.of_user, self.user(request).user_id, limit)
        )
        return ok({"files": [views.media_file(m) for m in rows]})
