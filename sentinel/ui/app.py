"""The web view's Starlette application: pages over a log, read-only by default.

:func:`create_app` builds it; ``sentinel ui`` serves it with uvicorn. Pages
(HTML from the Jinja2 templates in ``templates/``, autoescaped) and their JSON:

``/`` (``/rules``)
    the rules (with ``--rules``) and their event graph as SVG;
``/firings``, ``/firings/{id}``
    the rule-firing log, filtered and paged by id; one firing and why it fired;
``/outbox``
    pending, running and failed outbox entries; the global detectors' cursors;
``/log``
    the event log by transaction, filtered by scope, event and time;
``/api/live``
    what the pages poll every 2 seconds: the newest firing's id, the outbox's
    counts, the cursors (:mod:`sentinel.ui.live`: read once for all viewers).

By default only ``GET`` (and ``HEAD``) routes exist: nothing here writes to the
database. With ``actions_token`` (``sentinel ui --allow-actions``), the routes
of :mod:`sentinel.ui.actions` are added (retrying a failed outbox entry,
switching a rule of a running global detector),
behind its token, CSRF and origin checks, and the pages show their buttons.
Responses carry a Content-Security-Policy that allows the page's own script
and style files only, so a value that escaped escaping still could not run.

A request the view cannot answer as asked gets an error page naming why, never
a traceback: a malformed or out-of-range number, time or page key, or a text
filter holding a NUL character, ``400``; an id no row can have, ``404``; a log
row that does not hold what the writer writes (changed by hand, a damaged
database), ``422`` with the message of the :class:`~sentinel.errors.LogRowError`
naming it (the error ``sentinel log`` reports for such a row).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sentinel.errors import LogRowError
from sentinel.log import LogReader
from sentinel.log.switches import applied_switches, latest_switches, pending_switches
from sentinel.log.tables import DEFAULT_PREFIX, FiringStatus, OutboxStatus
from sentinel.rules.rule import abridged, expression_text
from sentinel.ui.actions import Guard, action_routes
from sentinel.ui.graph import graph_of, svg
from sentinel.ui.live import POLL_MS, LiveSnapshot
from sentinel.ui.queries import ID_MAX, ID_MIN, MAX_PAGE, LogView

__all__ = ["create_app"]

_HERE = Path(__file__).parent
_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    # same-origin, not no-referrer: under no-referrer a browser posts a form
    # with "Origin: null", and the actions' origin check needs the real one
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
]


class _SecurityHeaders:
    """Adds :data:`_HEADERS` to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


def templates_environment() -> Environment:
    """The pages' Jinja2 environment: every ``.html`` template autoescaped."""
    return Environment(
        loader=FileSystemLoader(_HERE / "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )


def create_app(
    source: str | sa.URL | sa.Engine,
    *,
    detector: Any = None,
    schema: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    allowed_hosts: list[str] | None = None,
    actions_token: str | None = None,
) -> Starlette:
    """The web view of the log at ``source`` (a URL or an engine), with the
    rules of ``detector`` (a :class:`~sentinel.rules.LocalEventDetector`, or
    ``None``). The schema revision is checked first (as :class:`LogReader`
    does: a log at another revision raises its error here). ``allowed_hosts``
    (``None``: any) are the ``Host`` headers answered, against DNS rebinding
    when serving on the loopback interface. ``actions_token`` (at least 16
    characters; ``None``: read-only) adds the actions of
    :mod:`sentinel.ui.actions`, allowed to a browser that gives that token."""
    # the arguments first: nothing is opened for an application refused
    guard = Guard(actions_token) if actions_token is not None else None
    rules_svg = svg(graph_of(detector)) if detector is not None else None
    reader = LogReader(source, schema=schema, prefix=prefix)
    try:
        reader.check()
    except BaseException:
        reader.close()  # its engine, if it made one, and the connection check took
        raise
    view = LogView(reader.engine, reader.tables)
    env = templates_environment()
    snapshot = LiveSnapshot(view)

    def page(request: Request, name: str, **context: Any) -> HTMLResponse:
        csrf, new = guard.csrf(request) if guard is not None else ("", False)
        html = env.get_template(name).render(
            request=request,
            nav=name.removesuffix(".html"),
            location=reader.location,
            poll_ms=POLL_MS,
            actions=guard is not None,
            acting=guard is not None,
            unlocked=guard is not None and guard.unlocked(request),
            csrf=csrf,
            **context,
        )
        response = HTMLResponse(html)
        if guard is not None and new:
            guard.remember(response, request, csrf)
        return response

    def rules(request: Request) -> Response:
        listed = []
        chosen = _text(request.query_params, "detector") or "global"
        switched = switches(chosen) if detector is not None else None
        if detector is not None:
            assert switched is not None
            for rule in detector.rules.values():
                listed.append(
                    {
                        "name": rule.name,
                        # abridged: printed whole, a sub-expression used twice
                        # at each of n levels is printed 2**n times
                        "expression": abridged(rule.event),
                        "detected": expression_text(rule),
                        "context": str(rule.context),
                        "coupling": str(rule.coupling),
                        "priority": rule.priority,
                        "enabled": rule.enabled,
                        "flush": rule.flush,
                        # as the global detector ``chosen`` runs it: the last
                        # switch it applied, else as the rule set defines it
                        "running": switched["applied"].get(rule.name, rule.enabled),
                        "asked": switched["pending"].get(rule.name),
                        "detached": str(rule.coupling) == "detached",
                    }
                )
        return page(
            request,
            "rules.html",
            rules=listed,
            graph=rules_svg,
            loaded=detector,
            detector=chosen,
            switches=switched["latest"] if switched else [],
            switched=_int(request.query_params.get("switched"), "switched"),
        )

    def switches(name: str) -> dict[str, Any]:
        """The rule switches of global detector ``name``: the state its applied
        switches leave each rule in, the pending requests, and the newest
        requests of every detector (a few rows: people make them)."""
        cursors = reader.tables.global_cursors
        with reader.engine.connect() as conn:
            # in effect: those applied at or before the cursor's position (a
            # switch beyond it, the cursor set back, is applied again as the
            # detector's reads pass it); none before its cursor exists
            at = conn.execute(sa.select(cursors.c.position).where(cursors.c.name == name)).scalar()
            applied = applied_switches(conn, reader.tables, name, upto=at if at is not None else 0)
            pending = pending_switches(conn, reader.tables, name)
            latest = latest_switches(conn, reader.tables, limit=20)
        return {
            "applied": {s.rule: s.enabled for s in applied},
            "pending": {s.rule: s.enabled for s in pending},
            "latest": latest,
        }

    def firings(request: Request) -> Response:
        q = request.query_params
        limit = _limit(q.get("limit"), 50)
        statuses = [s for s in q.getlist("status") if s]
        for s in statuses:
            if s not in {str(v) for v in FiringStatus}:
                raise HTTPException(400, f"no firing status {s!r}")
        # read first: a firing committed while the page is read is then
        # signalled (at worst, one the page already shows)
        signal = view.firing_signal()
        scope = _text(q, "scope")
        # a scope's firings go by (t_occ, id): their page keys are pairs
        keyed = _pair if scope else _int
        got = view.firings(
            rule=_text(q, "rule"),
            scope=scope,
            key=_text(q, "key"),
            statuses=statuses or None,
            since=_time(q.get("since"), "since"),
            until=_time(q.get("until"), "until"),
            before=keyed(q.get("before"), "before"),
            after=keyed(q.get("after"), "after"),
            limit=limit,
        )
        return page(
            request,
            "firings.html",
            page=got,
            query=q,
            statuses=[str(v) for v in FiringStatus],
            chosen=statuses,
            limit=limit,
            rule_names=sorted(detector.rules) if detector is not None else [],
            signal=signal,
        )

    def firing(request: Request) -> Response:
        fid = _whole(request.path_params["fid"], "firing id")
        assert fid is not None
        got = view.firing(fid)  # None too for an id out of any id's range
        if got is None:
            raise HTTPException(404, f"no rule firing #{fid}")
        rule = detector.rules.get(got["rule"]) if detector is not None else None
        return page(request, "firing.html", f=got, rule=rule)

    def outbox(request: Request) -> Response:
        limit = _limit(request.query_params.get("limit"), 50)
        shown = [str(s) for s in OutboxStatus if s != OutboxStatus.DONE]
        counts = view.outbox_counts()
        cursors = view.cursors()
        lists = {s: view.outbox(s, limit=limit) for s in shown}
        # what the page's script compares the polled figures with, and when
        # they were read: a poll's figures read before that are older than
        # the page's, and are left aside
        figures = {
            "outbox": counts,
            "cursors": [[c["name"], c["position"], c["holder"]] for c in cursors],
        }
        return page(
            request,
            "outbox.html",
            lists=lists,
            counts=counts,
            cursors=cursors,
            figures=json.dumps(figures, separators=(",", ":")),
            read_at=repr(time.time()),
            limit=limit,
            retried=_int(request.query_params.get("retried"), "retried"),
        )

    def log(request: Request) -> Response:
        q = request.query_params
        limit = _limit(q.get("limit"), 20)
        events = [e for e in (_text(q, "event") or "").replace(",", " ").split() if e]
        since = _time(q.get("since"), "since")
        until = _time(q.get("until"), "until")
        before = q.get("before") or None
        if before is not None:
            before = _check_key(before, since is not None or until is not None)
        got = view.transactions(
            scope=_text(q, "scope"),
            events=events or None,
            since=since,
            until=until,
            before=before,
            limit=limit,
        )
        return page(request, "log.html", page=got, query=q, limit=limit)

    def live(request: Request) -> Response:
        return JSONResponse(snapshot.get(), headers={"cache-control": "no-store"})

    async def error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        html = env.get_template("error.html").render(
            request=request,
            nav="",
            location=reader.location,
            poll_ms=POLL_MS,
            actions=False,
            acting=guard is not None,
            status=exc.status_code,
            detail=exc.detail,
        )
        return HTMLResponse(html, status_code=exc.status_code)

    async def damaged(request: Request, exc: Exception) -> Response:
        """A log row that is not what the writer writes: the page says which
        row and what is wrong with it, as ``sentinel log`` does (not a 500:
        nothing failed in the view, the row is wrong)."""
        assert isinstance(exc, LogRowError)
        return await error(request, HTTPException(422, f"a damaged log row: {exc}"))

    routes = [
        Route("/", rules, methods=["GET"]),
        Route("/rules", rules, methods=["GET"]),
        Route("/firings", firings, methods=["GET"]),
        Route("/firings/{fid}", firing, methods=["GET"]),
        Route("/outbox", outbox, methods=["GET"]),
        Route("/log", log, methods=["GET"]),
        Route("/api/live", live, methods=["GET"]),
        Mount("/static", StaticFiles(directory=_HERE / "static"), name="static"),
    ]
    if guard is not None:
        known = detector.rules if detector is not None else None
        routes[-1:-1] = action_routes(guard, reader.engine, reader.tables, known)
    middleware = [Middleware(_SecurityHeaders)]
    if allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts))
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={HTTPException: error, LogRowError: damaged},
        lifespan=_closing(reader),
    )
    app.state.view = view
    app.state.guard = guard
    app.state.live = snapshot
    app.state.templates = env
    return app


def _closing(reader: LogReader) -> Any:
    """The app's lifespan: the reader's engine is disposed of when it stops."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            reader.close()

    return lifespan


def _whole(text: str | None, what: str) -> int | None:
    """A whole number from a query string (``None`` when empty), of any size."""
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise HTTPException(400, f"{what} must be a whole number, not {text[:40]!r}") from None


def _int(text: str | None, what: str) -> int | None:
    """A whole number from a query string that the database can take: an id
    or a page key, within :data:`ID_MIN` and :data:`ID_MAX` (a signed 64-bit
    integer); ``None`` when empty."""
    n = _whole(text, what)
    if n is not None and not ID_MIN <= n <= ID_MAX:
        raise HTTPException(
            400,
            f"{what} must be a whole number from {ID_MIN} to {ID_MAX}, not {str(text)[:40]!r}",
        )
    return n


def _pair(text: str | None, what: str) -> tuple[int, int] | None:
    """A page key of one scope's firings, ``T|ID`` (two whole numbers the
    database can take); ``None`` when empty."""
    if text is None or text == "":
        return None
    t_text, sep, id_text = text.partition("|")
    if not sep:
        raise HTTPException(400, f"{what} must be a page key T|ID, not {text[:40]!r}")
    t, rid = _int(t_text, what), _int(id_text, what)
    if t is None or rid is None:
        raise HTTPException(400, f"{what} must be a page key T|ID, not {text[:40]!r}")
    return t, rid


def _limit(text: str | None, default: int) -> int:
    """The page size asked for, within 1 and :data:`MAX_PAGE` (any larger
    number is the largest page)."""
    n = _whole(text, "limit")
    return default if n is None else max(1, min(MAX_PAGE, n))


def _text(query: Any, name: str) -> str | None:
    """The text filter ``name`` of ``query`` (``None`` when empty). A NUL
    character is refused on every backend (PostgreSQL cannot take one in a
    text, so no name, scope or key the log holds has one)."""
    value = query.get(name) or None
    if value is not None and "\x00" in value:
        raise HTTPException(400, f"the {name} filter cannot contain a NUL character (\\x00)")
    return value


def _time(text: str | None, what: str) -> datetime | None:
    """A time from a form (``YYYY-MM-DDTHH:MM[:SS]``; UTC unless it names an
    offset), in UTC: a time whose UTC falls outside the years 1 to 9999 is
    refused as a malformed one is (400)."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise HTTPException(
            400, f"{what} must be a time like 2026-01-31T12:00 (UTC), not {text[:40]!r}"
        ) from None
    try:
        return _utc(value)
    except OverflowError:
        raise HTTPException(
            400, f"{what} {text[:40]!r} is outside the years 1 to 9999 once taken to UTC"
        ) from None


def _utc(value: datetime) -> datetime:
    """``value`` in UTC (naive: taken as UTC); OverflowError past year 1 or 9999."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _check_key(before: str, timed: bool) -> str:
    """A log page key as :meth:`LogView.transactions` takes it (its time in
    UTC), refusing one that is not one a page gave (400, not a 500): not
    ``ID`` (or, with a time range, ``TIME|ID``), an id out of range, or a time
    whose UTC falls outside the years 1 to 9999."""
    bad = HTTPException(400, f"not a page key: {before[:60]!r}")
    try:
        if timed:
            at_text, sep, rid_text = before.rpartition("|")
            if not sep:
                raise bad
            at = _utc(datetime.fromisoformat(at_text))
            rid = int(rid_text)
        else:
            rid = int(before)
    except ValueError:
        raise bad from None
    except OverflowError:
        raise HTTPException(
            400, f"not a page key: {before[:60]!r} (its time is outside the years 1 to 9999 in UTC)"
        ) from None
    if not ID_MIN <= rid <= ID_MAX:
        raise HTTPException(
            400, f"not a page key: {before[:60]!r} (its id is not from {ID_MIN} to {ID_MAX})"
        )
    return f"{at.isoformat()}|{rid}" if timed else str(rid)
