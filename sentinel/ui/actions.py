"""The web view's actions, and what guards them (``sentinel ui --allow-actions``).

Without ``--allow-actions`` none of this is mounted: no route takes ``POST``
and the pages show no buttons. With it, :func:`action_routes` adds

``POST /unlock``
    the token ``sentinel ui`` printed at its start (or took from
    ``SENTINEL_UI_TOKEN``), typed into the page once: sets an ``HttpOnly``,
    ``SameSite=Strict`` cookie proving it for the rest of the browser session;
``POST /outbox/{id}/retry``
    a ``failed`` (exhausted) outbox entry back to ``pending``, due now, its
    attempts reset: what ``sentinel worker --retry-failed`` does to every
    failed entry (:meth:`~sentinel.log.outbox.OutboxStore.requeue`), for one.

Every ``POST`` passes three checks (:meth:`Guard.check`), each answered
``403`` with what was missing, before anything is read from the database:

1. **the request comes from the view's own pages**: its ``Origin`` (or, when
   a browser sends none, its ``Referer``) names the scheme, host and port the
   request was addressed to; a request naming neither is refused;
2. **CSRF**: the form's ``csrf`` field equals the ``sentinel_ui_csrf`` cookie
   (a random value per browser session, set with the pages; a page on another
   site can make the browser send the cookie, but cannot read it to fill the
   field: a double-submit token);
3. **the token**: the unlock cookie (an HMAC of the token, so the cookie
   does not hold the token itself), or the token in the form's ``token``
   field or an ``Authorization: Bearer`` header (for a script).

``POST /rules/switch``
    a request to enable or disable a rule of a running global detector
    (form fields ``rule``, ``enabled`` = ``1`` or ``0``, ``detector``,
    default ``global``): written to the log's ``rule_switches`` table with
    :func:`~sentinel.log.switches.request_switch`, as ``sentinel rules
    enable|disable`` writes it; the service (``sentinel global``) applies it
    before its next read and records the commit position where it did
    (:mod:`sentinel.global_detector.switches`). With ``--rules``, a rule the
    rule set does not define is refused (``404``), and so is enabling one
    that is not detached (``400``: the service would refuse it). Only a global detector
    reads these switches: the application's own processes run their rules
    as their code enables them.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import sqlalchemy as sa
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from sentinel.errors import LogTablesMissingError, RuleSwitchError
from sentinel.log.outbox import OutboxStore
from sentinel.log.switches import request_switch
from sentinel.log.tables import LogTables, OutboxStatus
from sentinel.ui.queries import ID_MAX, ID_MIN

__all__ = ["AUTH_COOKIE", "CSRF_COOKIE", "MIN_TOKEN", "Guard", "action_routes", "new_token"]

AUTH_COOKIE = "sentinel_ui_auth"
CSRF_COOKIE = "sentinel_ui_csrf"
#: Shortest token accepted (a guessable token would make the guard a formality).
MIN_TOKEN = 16
#: Largest form body read (the forms hold a few short fields).
MAX_FORM = 4096


def new_token() -> str:
    """A fresh random token (32 URL-safe characters)."""
    return secrets.token_urlsafe(24)


class Guard:
    """The checks every ``POST`` passes (see the module docs). ``check_origin``,
    ``check_csrf`` and ``check_token`` are there for the tests, which switch
    one off to show that the test refusing a request without it then fails."""

    def __init__(self, token: str) -> None:
        if len(token) < MIN_TOKEN:
            raise ValueError(
                f"the actions token must be at least {MIN_TOKEN} characters "
                f"(this one has {len(token)}); leave SENTINEL_UI_TOKEN unset for a random one"
            )
        self._token = token.encode()
        self._proof = hmac.new(self._token, b"sentinel ui unlocked", hashlib.sha256).hexdigest()
        self.check_origin = True
        self.check_csrf = True
        self.check_token = True

    def csrf(self, request: Request) -> tuple[str, bool]:
        """This browser session's CSRF token, and whether it is new (then the
        response sets the cookie)."""
        known = request.cookies.get(CSRF_COOKIE, "")
        if len(known) >= MIN_TOKEN:
            return known, False
        return secrets.token_urlsafe(24), True

    def unlocked(self, request: Request) -> bool:
        """Whether the browser proved the token (its unlock cookie)."""
        return hmac.compare_digest(request.cookies.get(AUTH_COOKIE, ""), self._proof)

    def remember(self, response: Response, request: Request, csrf: str) -> None:
        """Set the CSRF cookie on ``response`` (``HttpOnly``: the pages carry
        the value in their forms; ``SameSite=Strict``)."""
        response.set_cookie(
            CSRF_COOKIE,
            csrf,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )

    async def check(self, request: Request, *, token_needed: bool = True) -> dict[str, str]:
        """The posted form, once the request passed the checks; else a 403
        saying which failed."""
        if self.check_origin:
            _same_origin(request)
        form = await _form(request)
        if self.check_csrf:
            cookie = request.cookies.get(CSRF_COOKIE, "")
            field = form.get("csrf", "")
            if not cookie or not field or not hmac.compare_digest(cookie, field):
                raise HTTPException(
                    403,
                    "refused: the form's CSRF token does not match this browser's "
                    "(reload the page and try again)",
                )
        if token_needed and self.check_token and not self.token_given(request, form):
            raise HTTPException(
                403, "refused: actions need the token sentinel ui printed at its start (unlock)"
            )
        return form

    def token_given(self, request: Request, form: dict[str, str]) -> bool:
        if self.unlocked(request):
            return True
        given = form.get("token", "")
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            given = given or auth[7:].strip()
        return bool(given) and hmac.compare_digest(given.encode(), self._token)

    def unlock(self, response: Response, request: Request) -> None:
        response.set_cookie(
            AUTH_COOKIE,
            self._proof,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )


def _same_origin(request: Request) -> None:
    """Refuse (403) a request whose ``Origin`` (else ``Referer``) is not the
    address it was sent to."""
    host = request.headers.get("host", "")
    expected = f"{request.url.scheme}://{host}".lower()
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        referer = request.headers.get("referer")
        if referer is None:
            raise HTTPException(403, "refused: the request names no Origin or Referer")
        parts = urlsplit(referer)
        origin = f"{parts.scheme}://{parts.netloc}"
    if origin.lower() != expected:
        raise HTTPException(403, f"refused: a request from another origin ({origin[:80]})")


async def _form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body (what the pages' forms
    send), first value of each field; anything else, or over
    :data:`MAX_FORM` bytes, is refused."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise HTTPException(415, "actions take a form (application/x-www-form-urlencoded)")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            raise HTTPException(413, f"a form of more than {MAX_FORM} bytes")
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20)
    except (UnicodeDecodeError, ValueError):
        raise HTTPException(400, "not a form") from None
    return {k: v[0] for k, v in fields.items()}


def action_routes(
    guard: Guard, engine: sa.Engine, tables: LogTables, rules: Mapping[str, Any] | None = None
) -> list[Route]:
    """The ``POST`` routes (see the module docs); ``rules``: the rules the view
    knows (``--rules``), by name, else ``None``."""
    store = OutboxStore(tables)
    o = tables.outbox

    async def unlock(request: Request) -> Response:
        form = await guard.check(request, token_needed=False)
        if not guard.check_token or guard.token_given(request, form):
            response = RedirectResponse(_local(form.get("next", "/")), status_code=303)
            guard.unlock(response, request)
            return response
        raise HTTPException(403, "refused: that is not the token sentinel ui printed")

    async def retry(request: Request) -> Response:
        await guard.check(request)
        try:
            oid = int(request.path_params["oid"])
        except ValueError:
            raise HTTPException(400, "an outbox entry id is a whole number") from None
        if not ID_MIN <= oid <= ID_MAX:  # no row has it (nor can the database take it)
            raise HTTPException(404, f"no outbox entry #{oid}")
        done = await run_in_threadpool(_retry, oid)
        return RedirectResponse(f"/outbox?retried={done}", status_code=303)

    def _retry(oid: int) -> int:
        with engine.begin() as conn:
            row = conn.execute(
                sa.select(o.c.idempotency_key, o.c.status).where(o.c.id == oid)
            ).one_or_none()
            if row is None:
                raise HTTPException(404, f"no outbox entry #{oid}")
            if row.status != OutboxStatus.FAILED.value:
                raise HTTPException(
                    409, f"outbox entry #{oid} is {row.status}, not failed: nothing to retry"
                )
            n = store.requeue(conn, keys=[row.idempotency_key])
        if n != 1:  # a worker or another retry changed it in the meantime
            raise HTTPException(409, f"outbox entry #{oid} changed meanwhile: nothing retried")
        return oid

    async def switch(request: Request) -> Response:
        form = await guard.check(request)
        rule = form.get("rule", "")
        if form.get("enabled") not in ("0", "1"):
            raise HTTPException(400, "enabled is 1 (enable) or 0 (disable)")
        detector = form.get("detector") or "global"
        if "\x00" in rule or "\x00" in detector:  # PostgreSQL cannot store one in a text
            raise HTTPException(400, "a rule or detector name cannot contain a NUL character")
        sid = await run_in_threadpool(_switch, rule, form["enabled"] == "1", detector)
        return RedirectResponse(
            f"/rules?detector={quote(detector)}&switched={sid}", status_code=303
        )

    def _switch(rule: str, enabled: bool, detector: str) -> int:
        known = rules.get(rule) if rules is not None else None
        if enabled and known is not None and str(known.coupling) != "detached":
            # the service would refuse it: it runs detached rules only
            raise HTTPException(
                400, f"rule {rule!r} is not detached: a global detector does not run it"
            )
        try:
            asked = request_switch(
                engine, tables, rule, enabled, detector=detector, by="sentinel ui", rules=rules
            )
        except RuleSwitchError as err:
            raise HTTPException(404 if rules and rule not in rules else 400, str(err)) from None
        except LogTablesMissingError as err:
            raise HTTPException(409, str(err)) from None
        return asked.id

    return [
        Route("/unlock", unlock, methods=["POST"]),
        Route("/outbox/{oid}/retry", retry, methods=["POST"]),
        Route("/rules/switch", switch, methods=["POST"]),
    ]


def _local(path: Any) -> str:
    """``path`` if it is a path of this site, else ``/`` (no open redirect)."""
    text = str(path)
    if not text.startswith("/") or text.startswith("//") or "\\" in text:
        return "/"
    return text
