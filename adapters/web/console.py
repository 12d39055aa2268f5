"""The operator web console: server-rendered pages over the runtime, behind a token.

Sign-in exchanges a configured token for a signed, HttpOnly session cookie (see
`adapters.web.auth`), or, with single sign-on (`adapters.web.sso`), sends the browser to
the OpenID Connect provider and signs in the user its ID token names. Every POST form
carries the session's CSRF token; a POST without it, or with another one, gets 403 and
changes nothing. Decisions go through
`Runtime.decide` like every other channel; refusals are shown on the page.

Pages::

    GET  /login   POST /login   POST /logout
    POST /login/sso             leave for the identity provider (single sign-on)
    GET  /login/sso/callback    come back from it signed in, or refused
    GET  /                      -> /runs
    GET  /runs?status=...       runs with status filters
    GET  /runs/{run_id}         status, answer, pending tickets with forms, timeline
    POST /runs/{run_id}/cancel|pause|resume
    GET  /tickets               every open ticket with its forms
    POST /tickets/{ticket_id}/decide    (an allow may carry grant=run|thread, hours, same_args)
    GET  /grants?state=all      standing grants the signed-in user may see
    POST /grants/{grant_id}/revoke
                                (action=edit: allow with the changed arguments)
    POST /tickets/batch         decide the ticked tickets at once, each on its own
    GET  /start   POST /start   start a run of any loaded agent
    GET  /link    POST /link    a one-time code linking a chat account to the person
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from aiohttp import web
from markupsafe import Markup

from adapters.web._refusals import explain
from adapters.web.api import BadRequest, may_control, parse_grant_state, parse_statuses
from adapters.web.auth import (
    CSRF_FIELD,
    FLASH_COOKIE,
    Session,
    SessionCodec,
    TokenAuth,
    csrf_matches,
    session_payload,
)
from adapters.web.forms import (
    FormField,
    FormState,
    apply_errors,
    edit_form_fields,
    form_fields,
    read_fields,
)
from adapters.web.live import state_of
from adapters.web.sso import PendingSignIn, SsoClient, SsoRefused
from adapters.web.timeline import calls, pretty, timeline
from runtime import (
    MAX_GRANT_HOURS,
    Abort,
    Actor,
    Allow,
    Answer,
    BatchItem,
    BatchOutcome,
    ConfigurationError,
    Deny,
    EditRefused,
    ExternalAgent,
    Grant,
    GrantError,
    GrantRequest,
    GrantScope,
    InputData,
    InvalidAnswer,
    PendingEntry,
    RemoteInput,
    Resolve,
    ResumeTicket,
    Retry,
    RunNotFound,
    RunStatus,
    Runtime,
    SignoffError,
    UnknownTicket,
)
from runtime.edges import MAX_BATCH, NonFiniteNumber, loads_strict

TEMPLATES = Path(__file__).parent / "templates"
SSO_COOKIE = "signoff_sso"
SSO_COOKIE_PATH = "/login/sso"
MAX_SESSION_COOKIE = 3800
"""Bytes a session cookie's value may take (browsers keep cookies up to about 4 KB)."""
SSO_STATE_PREFIX = "sso-state:"
"""Spent sign-in attempts are recorded with the revoked sessions under this prefix."""
ACTIVE = (RunStatus.QUEUED, RunStatus.RUNNING)
REFRESH_SECONDS = 2
TOOL_DESCRIPTION_SHOWN = 300
STATUS_FILTERS = [s.value for s in RunStatus]
_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
}
_DONE_WORDS = {
    "allow": "Allowed",
    "edit": "Allowed with changes",
    "deny": "Denied",
    "input": "Answered",
    "resolve": "Recorded the verified result of",
    "retry": "Accepted a retry of",
    "abort": "Aborted",
}

Flash = tuple[str, str]
PageHandler = Callable[[web.Request, Session, Actor], Awaitable[web.StreamResponse]]


@dataclass(slots=True)
class TicketCard:
    """A pending ticket as the page shows it, with its forms' state."""

    entry: PendingEntry
    arguments: str
    fields: list[FormField]
    state: FormState
    may_decide: bool
    why_not: str | None = None
    grants: tuple[str, ...] = ()
    edit_fields: list[FormField] = field(default_factory=list)
    """For an approval: the arguments that may change, pre-filled (none: not editable)."""
    tool_description: str = ""
    """What the tool says it does, cut to `TOOL_DESCRIPTION_SHOWN` characters."""
    tool_server: str | None = None
    """The MCP server the tool comes from (None: not an MCP tool)."""
    external: bool = False
    """The call of an agent running elsewhere (`runtime.ExternalAgent`)."""
    sso_sign_in: bool = False
    """Step-up: the reader may decide it only after signing in with single sign-on,
    which this console offers (the card shows that button instead of Allow and Deny)."""


@dataclass(frozen=True, slots=True)
class BatchForm:
    """The "decide selected" form of a page: the approvals the reader may decide."""

    ticket_ids: frozenset[str]
    checked: bool


def batch_form(cards: list[TicketCard], *, checked: bool) -> BatchForm | None:
    """The form when two or more of `cards` are approvals the reader may decide."""
    ids = frozenset(
        c.entry.ticket_id for c in cards if c.may_decide and c.entry.status == "approval"
    )
    return BatchForm(ids, checked) if len(ids) >= 2 else None


@dataclass(slots=True)
class _Rendered:
    states: dict[str, FormState] = field(default_factory=dict)
    flash: Flash | None = None
    status: int = 200


def safe_next(value: Any, default: str = "/runs") -> str:
    """A path on this site to return to; anything else becomes `default`.

    Only a same-origin relative path is accepted: it starts with one ``/``, holds no
    backslash and no control character (browsers drop tabs and line breaks from URLs,
    so ``/\t/evil.example`` would become ``//evil.example``, another host) and no ``//``.
    """
    text = value if isinstance(value, str) else ""
    if (
        not text.startswith("/")
        or "\\" in text
        or "//" in text
        or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text)
    ):
        return default
    return text


def when(value: datetime | str | None) -> Markup:
    """A time people read: ``1 Dec 2026, 08:12:03 UTC`` (the page's script shows it in
    the reader's own time zone), with the exact ISO time kept in ``datetime``."""
    if value is None or value == "":
        return Markup("—")
    try:
        moment = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    except ValueError:
        return Markup.escape(str(value))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    shown = moment.astimezone(UTC)
    text = f"{shown.day} {shown:%b %Y, %H:%M:%S} UTC"
    return Markup('<time datetime="{}" data-local>{}</time>').format(moment.isoformat(), text)


def why_not(ticket: ResumeTicket, actor: Actor) -> str:
    """Why `actor` may not decide `ticket`, and who can (shown instead of the buttons)."""
    who = ticket.who_may_decide()
    if ticket.four_eyes and actor.id == ticket.requester:
        return (
            "Four-eyes: you asked for this call, so someone else must decide it "
            f"(operators included). Who may: {who}."
        )
    return f"You are not among those who may decide this. Who may: {who}."


def step_up_why(ticket: ResumeTicket, actor: Actor, sso_name: str | None) -> str:
    """Why `actor`, who may decide `ticket`, may not from this console session, and how
    they can (shown instead of the buttons)."""
    if ticket.decide_in and "console" not in ticket.decide_in:
        where = " or ".join(ticket.decide_in)
        return f"This call may only be decided in {where}, not in the console."
    if sso_name is None:
        return (
            "This call may only be decided after signing in with single sign-on, which this "
            "console does not offer: ask an operator."
        )
    return (
        "This call may only be decided after signing in with single sign-on; you signed in "
        f"with a token. Sign in with {sso_name} to decide it."
    )


def redirect(location: str) -> web.Response:
    """A 303 See Other (a POST answered with a page to GET)."""
    return web.Response(status=303, headers={"Location": location})


def add_console_routes(
    app: web.Application,
    runtime: Runtime,
    auth: TokenAuth,
    on_change: Callable[[], None],
    *,
    cookie_secret: bytes,
    secure_cookies: bool = False,
    sso: SsoClient | None = None,
    token_sign_in: bool = True,
) -> _Console:
    """Add the console's pages to `app`; the console, for pages added elsewhere.

    Args:
        app: The application to extend.
        runtime: The runtime whose runs and tickets are shown.
        auth: The configured tokens (sign-in exchanges one for a session).
        on_change: Called after a run became ready (wakes the worker).
        cookie_secret: Key signing session cookies (32 bytes or more).
        secure_cookies: Mark cookies ``Secure`` (when served over HTTPS).
        sso: Signs people in through an OpenID Connect provider (None: tokens only).
        token_sign_in: Whether a configured token signs in to the console (off: single
            sign-on only; the API still takes tokens).
    """
    console = _Console(
        runtime,
        auth,
        on_change,
        SessionCodec(cookie_secret, secure=secure_cookies),
        sso=sso,
        token_sign_in=token_sign_in,
    )
    app.router.add_get("/login", console.login_page)
    app.router.add_post("/login", console.login)
    if sso is not None:
        app.router.add_post("/login/sso", console.sso_begin)
        app.router.add_get("/login/sso/callback", console.sso_callback)
    app.router.add_post("/logout", console.logout)
    app.router.add_get("/", console.signed_in(console.home))
    app.router.add_get("/runs", console.signed_in(console.runs))
    app.router.add_get("/runs/{run_id}", console.signed_in(console.run))
    app.router.add_post(
        "/runs/{run_id}/{action:cancel|pause|resume}", console.form(console.control)
    )
    app.router.add_get("/tickets", console.signed_in(console.tickets))
    app.router.add_post("/tickets/batch", console.form(console.decide_batch))
    app.router.add_post("/tickets/{ticket_id}/decide", console.form(console.decide))
    app.router.add_get("/grants", console.signed_in(console.grants))
    app.router.add_post("/grants/{grant_id}/revoke", console.form(console.revoke))
    app.router.add_get("/start", console.signed_in(console.start_page))
    app.router.add_post("/start", console.form(console.start))
    app.router.add_get("/link", console.signed_in(console.link_page))
    app.router.add_post("/link", console.form(console.link_page))
    return console


class _Console:
    def __init__(
        self,
        runtime: Runtime,
        auth: TokenAuth,
        on_change: Callable[[], None],
        codec: SessionCodec,
        *,
        sso: SsoClient | None = None,
        token_sign_in: bool = True,
    ) -> None:
        self.runtime = runtime
        self.auth = auth
        self.on_change = on_change
        self.codec = codec
        self.sso = sso
        self.token_sign_in = token_sign_in
        self.live_text = False
        """Whether run pages follow ``/runs/{run_id}/stream`` (`adapters.web.live`)."""
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(TEMPLATES),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.globals["when"] = when

    # -- sessions and rendering ----------------------------------------------------------
    def who(self, session: Session | None) -> Actor | None:
        """The signed-in actor; None if signed out or the token was removed.

        Does not look at revocations; `current` does.
        """
        if session is None or not session.signed_in or session.token_fp is None:
            return None
        if session.sso:
            if self.sso is None or session.token_fp != self.sso.config.fingerprint:
                return None  # single sign-on was turned off or moved to another client
            assert session.actor_id is not None
            return Actor(
                id=session.actor_id,
                groups=frozenset(session.groups),
                operator=session.operator,
                platform="console",
                name=session.name,
                sso=True,
            )
        if not self.token_sign_in:
            return None
        token = self.auth.by_fingerprint(session.token_fp)
        if token is None or token.actor_id != session.actor_id:
            return None
        return token.actor("console")

    async def current(self, request: web.Request) -> tuple[Session | None, Actor | None]:
        """The request's session and its actor (None unless signed in and not revoked)."""
        session = self.codec.read(request)
        actor = self.who(session)
        if (
            actor is not None
            and session is not None
            and session.session_id is not None
            and await self.runtime.session_revoked(session.session_id)
        ):
            actor = None
        if actor is not None:
            # Every id of the person: what they may see and decide under any of them.
            actor = await self.runtime.identities.as_person(actor)
        return session, actor

    def render(
        self,
        request: web.Request,
        template: str,
        *,
        session: Session | None,
        actor: Actor | None,
        status: int = 200,
        flash: Flash | None = None,
        **context: Any,
    ) -> web.Response:
        flashes = []
        stored = self.codec.take_flash(request)
        if stored is not None:
            flashes.append(stored)
        if flash is not None:
            flashes.append(flash)
        context.setdefault("refresh", None)
        context.setdefault("live", None)  # a run page following its live text
        nonce = secrets.token_urlsafe(16)
        html = self.env.get_template(template).render(
            actor=actor,
            csrf=session.csrf if session is not None else "",
            csrf_field=CSRF_FIELD,
            flashes=flashes,
            path=request.path_qs,
            nonce=nonce,
            **context,
        )
        response = web.Response(text=html, content_type="text/html", status=status)
        response.headers.update(_HEADERS)
        # One small script may run: the one that shows times in the reader's time zone.
        response.headers["Content-Security-Policy"] = (
            _HEADERS["Content-Security-Policy"] + f"; script-src 'nonce-{nonce}'"
        )
        if context.get("live"):
            # The run page's live text follows its own stream (`adapters.web.live`).
            response.headers["Content-Security-Policy"] += "; connect-src 'self'"
        cards = context.get("cards") or ()
        if self.sso is not None and any(getattr(c, "sso_sign_in", False) for c in cards):
            # A step-up card's single sign-on form redirects to the provider, which
            # browsers check against form-action too.
            policy = response.headers["Content-Security-Policy"]
            response.headers["Content-Security-Policy"] = policy.replace(
                "form-action 'self'", f"form-action 'self' {self.sso.authorize_origin}", 1
            )
        if FLASH_COOKIE in request.cookies:
            response.del_cookie(FLASH_COOKIE, path="/")
        return response

    async def refused(
        self, request: web.Request, status: int, title: str, message: str
    ) -> web.Response:
        session, actor = await self.current(request)
        return self.render(
            request,
            "error.html",
            session=session,
            actor=actor,
            status=status,
            title=title,
            message=message,
        )

    def signed_in(
        self, handler: PageHandler
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """Wrap a GET page: signed-out visitors go to the login page."""

        async def page(request: web.Request) -> web.StreamResponse:
            session, actor = await self.current(request)
            if session is None or actor is None:
                return redirect("/login?next=" + quote(request.path_qs, safe=""))
            return await handler(request, session, actor)

        return page

    def form(self, handler: PageHandler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """Wrap a POST: the CSRF token must match the session's, then sign-in is needed."""

        async def post(request: web.Request) -> web.StreamResponse:
            session, actor = await self.current(request)
            posted = await request.post()
            if session is None or not csrf_matches(session.csrf, _text(posted.get(CSRF_FIELD))):
                return await self.csrf_refused(request)
            if actor is None:
                return redirect("/login")
            return await handler(request, session, actor)

        return post

    async def csrf_refused(self, request: web.Request) -> web.Response:
        return await self.refused(
            request,
            403,
            "Form refused",
            "The form's security token is missing or wrong, so nothing was changed. "
            "Reload the page and try again.",
        )

    def done(self, location: str, text: str, kind: str = "ok") -> web.Response:
        response = redirect(location)
        self.codec.set_flash(response, kind, text)
        return response

    # -- sign-in ---------------------------------------------------------------------
    async def login_page(self, request: web.Request) -> web.StreamResponse:
        session, actor = await self.current(request)
        target = safe_next(request.query.get("next"))
        if actor is not None:
            return redirect(target)
        fresh = session is None or session.signed_in  # a revoked session starts afresh
        session = self.codec.new_session() if fresh or session is None else session
        response = self.render_login(request, session, target)
        if fresh:
            self.codec.store(response, session)
        return response

    async def login(self, request: web.Request) -> web.StreamResponse:
        session = self.codec.read(request)
        posted = await request.post()
        if session is None or not csrf_matches(session.csrf, _text(posted.get(CSRF_FIELD))):
            return await self.csrf_refused(request)
        target = safe_next(posted.get("next"))
        token = self.auth.lookup(_text(posted.get("token")).strip()) if self.token_sign_in else None
        if token is None:
            return self.render_login(
                request,
                session,
                target,
                status=401,
                error="That token is not valid."
                if self.token_sign_in
                else "Sign-in with a token is turned off for the console.",
            )
        response = redirect(target)
        # A new session (and CSRF token) on sign-in, so a planted cookie is worthless.
        self.codec.store(response, self.codec.new_session(token))
        return response

    def render_login(
        self,
        request: web.Request,
        session: Session,
        target: str,
        *,
        status: int = 200,
        error: str | None = None,
    ) -> web.Response:
        response = self.render(
            request,
            "login.html",
            session=session,
            actor=None,
            status=status,
            next=target,
            error=error,
            sso_name=self.sso.config.shown_name if self.sso is not None else None,
            token_sign_in=self.token_sign_in,
        )
        if self.sso is not None:
            # The single sign-on form's answer redirects to the provider, which
            # browsers check against form-action too.
            policy = response.headers["Content-Security-Policy"]
            response.headers["Content-Security-Policy"] = policy.replace(
                "form-action 'self'", f"form-action 'self' {self.sso.authorize_origin}", 1
            )
        return response

    async def sso_begin(self, request: web.Request) -> web.StreamResponse:
        """Leave for the identity provider with a new sign-in attempt in a cookie."""
        assert self.sso is not None
        session = self.codec.read(request)
        posted = await request.post()
        if session is None or not csrf_matches(session.csrf, _text(posted.get(CSRF_FIELD))):
            return await self.csrf_refused(request)
        try:
            url, pending = await self.sso.begin(safe_next(posted.get("next")))
        except SsoRefused as exc:
            return await self.refused(request, 503, "Single sign-on unavailable", exc.reason)
        response = redirect(url)
        # SameSite=Lax: sent on the provider's top-level redirect back, never cross-site posts.
        self.codec.store_signed(
            response, SSO_COOKIE, pending.payload(), path=SSO_COOKIE_PATH, expires=pending.expires
        )
        return response

    async def sso_callback(self, request: web.Request) -> web.StreamResponse:
        """Come back from the identity provider: sign in, or refuse and change nothing."""
        assert self.sso is not None
        pending = PendingSignIn.from_payload(self.codec.unsign(request.cookies.get(SSO_COOKIE)))
        answer = {key: request.query[key] for key in request.query}
        try:
            verified = await self.sso.finish(answer, pending, self.spend_sign_in)
        except SsoRefused as exc:
            # The attempt's cookie stays: a forged answer does not end a real sign-in.
            return await self.refused(request, 403, "Sign-in refused", exc.reason)
        assert pending is not None
        actor = Actor(
            id=verified.actor_id,
            groups=verified.groups,
            operator=verified.operator,
            platform="console",
            name=verified.name,
            sso=True,
        )
        session = self.codec.new_sso_session(actor, self.sso.config.fingerprint)
        if len(self.codec.sign(session_payload(session))) > MAX_SESSION_COOKIE:
            # Browsers drop a cookie this large without a word: say so instead.
            return await self.refused(
                request,
                403,
                "Sign-in refused",
                f"The identity provider lists too many groups for you ({len(actor.groups)}) "
                "to keep in a console session. Ask its administrator to send only the "
                "groups signoff uses in the groups claim.",
            )
        response = redirect(pending.next)
        response.del_cookie(SSO_COOKIE, path=SSO_COOKIE_PATH)
        # A new session (and CSRF token), as with a token.
        self.codec.store(response, session)
        return response

    async def spend_sign_in(self, pending: PendingSignIn) -> bool:
        """Mark a sign-in attempt used (on every replica); False if it already was."""
        spent = SSO_STATE_PREFIX + pending.state
        if await self.runtime.session_revoked(spent):
            return False
        await self.runtime.revoke_session(spent, datetime.fromtimestamp(pending.expires, UTC))
        return True

    async def logout(self, request: web.Request) -> web.StreamResponse:
        session = self.codec.read(request)
        posted = await request.post()
        if session is None or not csrf_matches(session.csrf, _text(posted.get(CSRF_FIELD))):
            return await self.csrf_refused(request)
        if session.session_id is not None:
            # Revoked in the database: a copy of the cookie is refused from now on, by
            # every replica, until it would have expired anyway.
            await self.runtime.revoke_session(
                session.session_id, datetime.fromtimestamp(session.expires, UTC)
            )
        response = redirect("/login")
        self.codec.clear(response)
        return response

    # -- pages -----------------------------------------------------------------------
    async def home(
        self, request: web.Request, session: Session, actor: Actor
    ) -> web.StreamResponse:
        return redirect("/runs")

    async def runs(
        self, request: web.Request, session: Session, actor: Actor
    ) -> web.StreamResponse:
        raw = request.query.get("status", "")
        try:
            statuses = parse_statuses(raw)
        except BadRequest as exc:
            return await self.refused(request, 400, "Unknown status", str(exc))
        found = await self.runtime.list_runs(statuses=statuses, limit=100, viewer=actor)
        active = any(run.status in ACTIVE for run in found)
        return self.render(
            request,
            "runs.html",
            session=session,
            actor=actor,
            runs=found,
            filters=STATUS_FILTERS,
            current=raw,
            refresh=request.path_qs if active else None,
        )

    async def run(self, request: web.Request, session: Session, actor: Actor) -> web.StreamResponse:
        return await self.run_page(request, session, actor, request.match_info["run_id"])

    async def run_page(
        self,
        request: web.Request,
        session: Session,
        actor: Actor,
        run_id: str,
        shown: _Rendered | None = None,
    ) -> web.Response:
        shown = shown or _Rendered()
        try:
            result = await self.runtime.get(run_id, viewer=actor)
            events = await self.runtime.events(run_id, viewer=actor)
        except RunNotFound:
            return await self.refused(request, 404, "No such run", f"There is no run {run_id!r}.")
        here = f"/runs/{run_id}"
        standing = await self.runtime.grants_of_run(run_id, viewer=actor, active=False)
        cards = [self.card(entry, actor, shown.states) for entry in result.pending]
        return self.render(
            request,
            "run.html",
            session=session,
            actor=actor,
            status=shown.status,
            flash=shown.flash,
            run=result,
            cards=cards,
            batch=batch_form(cards, checked=True),
            items=timeline(events),
            calls=[c for c in calls(events) if not c.waiting],
            grants=standing,
            may_control=may_control(actor, result),
            next=here,
            refresh=here if result.status in ACTIVE else None,
            live=(
                f"{here}/stream?seen={quote(state_of(result), safe='')}"
                if self.live_text and result.status in ACTIVE
                else None
            ),
        )

    async def tickets(
        self, request: web.Request, session: Session, actor: Actor
    ) -> web.StreamResponse:
        return await self.tickets_page(request, session, actor)

    async def tickets_page(
        self, request: web.Request, session: Session, actor: Actor, shown: _Rendered | None = None
    ) -> web.Response:
        shown = shown or _Rendered()
        entries = await self.runtime.open_tickets(viewer=actor)
        cards = [self.card(entry, actor, shown.states) for entry in entries]
        return self.render(
            request,
            "tickets.html",
            session=session,
            actor=actor,
            status=shown.status,
            flash=shown.flash,
            cards=cards,
            batch=batch_form(cards, checked=False),
            next="/tickets",
        )

    def card(self, entry: PendingEntry, actor: Actor, states: dict[str, FormState]) -> TicketCard:
        ticket = entry.ticket
        allowed = ticket.may_decide(actor)
        # Step-up (decide_in, sso): who may decide it must do so from elsewhere.
        here = ticket.decidable_here(actor)
        may_decide = allowed and here
        sso_name = self.sso.config.shown_name if self.sso is not None else None
        if not allowed:
            refused: str | None = why_not(ticket, actor)
        else:
            refused = None if here else step_up_why(ticket, actor, sso_name)
        editable = may_decide and entry.status == "approval" and bool(entry.editable)
        agent = self.runtime.agents.get(ticket.agent)
        tool = agent.tools.get(entry.call.name) if agent is not None else None
        external = isinstance(agent, ExternalAgent)
        described = " ".join(tool.description.split()) if tool is not None and not external else ""
        return TicketCard(
            entry=entry,
            arguments=pretty(entry.call.arguments),
            fields=form_fields(entry.schema) if entry.status == "input" else [],
            state=states.get(entry.ticket_id, FormState()),
            may_decide=may_decide,
            why_not=refused,
            grants=entry.grants,
            edit_fields=edit_form_fields(self.runtime.edit_form(ticket)) if editable else [],
            tool_description=_shorten(described, TOOL_DESCRIPTION_SHOWN),
            tool_server=tool.server if tool is not None else None,
            external=external,
            sso_sign_in=(
                allowed
                and not here
                and sso_name is not None
                and (not ticket.decide_in or "console" in ticket.decide_in)
            ),
        )

    async def link_page(
        self, request: web.Request, session: Session, actor: Actor
    ) -> web.StreamResponse:
        """Linking a chat account: a POST makes a one-time link code for the person
        signed in (see docs/identity.md)."""
        ids = self.runtime.identities
        person = await ids.person_of(actor.id) or actor.id
        code = await ids.new_link_code(person) if request.method == "POST" else None
        return self.render(
            request,
            "link.html",
            session=session,
            actor=actor,
            person=person,
            linked=[i for i in await ids.identities_of(person) if i != actor.id],
            code=code,
            minutes=round(ids.rules.code_seconds / 60),
        )

    async def grants(
        self, request: web.Request, session: Session, actor: Actor
    ) -> web.StreamResponse:
        return await self.grants_page(request, session, actor)

    async def grants_page(
        self, request: web.Request, session: Session, actor: Actor, shown: _Rendered | None = None
    ) -> web.Response:
        shown = shown or _Rendered()
        raw = request.query.get("state", "")
        try:
            active = parse_grant_state(raw)
        except BadRequest as exc:
            return await self.refused(request, 400, "Unknown state", str(exc))
        found: list[Grant] = await self.runtime.grants(viewer=actor, active=active, limit=500)
        return self.render(
            request,
            "grants.html",
            session=session,
            actor=actor,
            status=shown.status,
            flash=shown.flash,
            grants=found,
            showing_all=not active,
            next=request.path_qs,
        )

    async def start_page(
        self, request: web.Request, session: Session, actor: Actor
    ) -> web.StreamResponse:
        return self.render_start(request, session, actor)

    def render_start(
        self,
        request: web.Request,
        session: Session,
        actor: Actor,
        *,
        status: int = 200,
        error: str | None = None,
        chosen: str = "",
        text: str = "",
    ) -> web.Response:
        agents = self.runtime.agents
        return self.render(
            request,
            "start.html",
            session=session,
            actor=actor,
            status=status,
            agents=[
                agents[name]
                for name in sorted(agents)
                if not getattr(agents[name], "internal", False)
            ],
            error=error,
            chosen=chosen,
            text=text,
        )

    # -- actions -----------------------------------------------------------------------
    async def start(
        self, request: web.Request, session: Session, actor: Actor
    ) -> web.StreamResponse:
        posted = await request.post()
        agent, text = _text(posted.get("agent")), _text(posted.get("input"))
        problem = None
        if agent not in self.runtime.agents:
            problem = "Choose one of the loaded agents."
        elif getattr(self.runtime.agents[agent], "internal", False):
            problem = f"{agent} is started by signoff itself, not by hand."
        elif not text.strip():
            problem = "Type what the agent should do."
        if problem is None:
            try:
                result = await self.runtime.start(
                    agent,
                    text,
                    requester=actor.id,
                    origin={"platform": "console"},
                    wait=False,
                    joining_as=actor,
                )
            except ConfigurationError as exc:
                problem = str(exc)
        if problem is not None:
            return self.render_start(
                request, session, actor, status=422, error=problem, chosen=agent, text=text
            )
        self.on_change()
        return self.done(f"/runs/{result.run_id}", f"Started a run of {agent}.")

    async def control(
        self, request: web.Request, session: Session, actor: Actor
    ) -> web.StreamResponse:
        run_id, action = request.match_info["run_id"], request.match_info["action"]
        here = f"/runs/{run_id}"
        try:
            current = await self.runtime.get(run_id, viewer=actor)
            if not may_control(actor, current):
                flash = ("error", f"Only an operator or {current.requester} may {action} this run.")
                return await self.run_page(
                    request, session, actor, run_id, _Rendered(flash=flash, status=403)
                )
            if action == "cancel":
                await self.runtime.cancel(run_id, actor=actor, reason=f"cancelled by {actor.id}")
            elif action == "pause":
                await self.runtime.pause(run_id, actor=actor)
            else:
                await self.runtime.resume(run_id, actor=actor, wait=False)
        except SignoffError as exc:
            refusal = await explain(self.runtime, exc)
            if refusal.status == 404:
                return await self.refused(request, 404, "No such run", refusal.message)
            return await self.run_page(
                request,
                session,
                actor,
                run_id,
                _Rendered(flash=("error", refusal.message), status=refusal.status),
            )
        self.on_change()
        past = {"cancel": "Cancelled", "pause": "Paused", "resume": "Resumed"}[action]
        return self.done(here, f"{past} the run.")

    async def decide(
        self, request: web.Request, session: Session, actor: Actor
    ) -> web.StreamResponse:
        ticket_id = request.match_info["ticket_id"]
        posted = await request.post()
        back = safe_next(posted.get("next"), "/tickets")
        try:
            ticket = await self.runtime.ticket(ticket_id, viewer=actor)
        except UnknownTicket:
            return await self.refused(
                request, 404, "No such ticket", f"There is no ticket {ticket_id!r}."
            )
        action = _text(posted.get("action"))
        state = FormState(values={k: _text(posted.get(k)) for k in ("reason", "result", "hours")})
        fields: list[FormField] = []
        answer: Answer | None = None
        reason = _text(posted.get("reason")).strip() or None
        match action:
            case "allow":
                grant, problem = _grant_of(posted)
                if problem is not None:
                    state.general.append(problem)
                else:
                    answer = Allow(grant=grant)
            case "edit":
                fields = edit_form_fields(self.runtime.edit_form(ticket))
                if not fields:
                    return await self.refused(
                        request, 409, "Not editable", NOT_EDITABLE.format(ticket_id=ticket_id)
                    )
                data, state = read_fields(fields, posted)
                answer = None if state.errors else Allow(args=data)
            case "deny":
                answer = Deny(reason=reason)
            case "input":
                schema = ticket.target.schema_ if isinstance(ticket.target, RemoteInput) else None
                fields = form_fields(schema)
                data, state = read_fields(fields, posted)
                answer = None if state.errors else InputData(data=data)
            case "resolve":
                try:
                    answer = Resolve(result=loads_strict(_text(posted.get("result"))))
                except NonFiniteNumber:
                    state.errors["result"] = "Numbers must be finite (no NaN or Infinity)."
                except (ValueError, RecursionError):
                    state.errors["result"] = 'Enter the verified result as JSON (e.g. "sent").'
            case "retry":
                answer = Retry()
            case "abort":
                answer = Abort(reason=reason)
            case _:
                return await self.refused(
                    request, 400, "Unknown action", f"Unknown action {action!r}."
                )
        flash: Flash = ("error", "Please correct the form.")
        status = 422
        if answer is not None:
            try:
                await self.runtime.decide(ticket_id, answer, actor)
            except SignoffError as exc:
                refusal = await explain(self.runtime, exc, ticket_id)
                if isinstance(exc, InvalidAnswer | EditRefused):
                    apply_errors(state, exc.errors, fields)
                flash, status = ("error", refusal.message), refusal.status
            else:
                self.on_change()
                what = getattr(ticket.target, "tool", "the ticket")
                granted = _granted_words(answer)
                return self.done(back, f"{_DONE_WORDS.get(action, 'Decided')} {what}{granted}.")
        shown = _Rendered(states={ticket_id: state}, flash=flash, status=status)
        if back == f"/runs/{ticket.run_id}":
            return await self.run_page(request, session, actor, ticket.run_id, shown)
        return await self.tickets_page(request, session, actor, shown)

    async def revoke(
        self, request: web.Request, session: Session, actor: Actor
    ) -> web.StreamResponse:
        grant_id = request.match_info["grant_id"]
        posted = await request.post()
        back = safe_next(posted.get("next"), "/grants")
        try:
            revoked = await self.runtime.revoke_grant(grant_id, actor=actor)
        except GrantError as exc:
            try:
                await self.runtime.grant(grant_id, viewer=actor)
            except GrantError:
                return await self.refused(
                    request, 404, "No such grant", f"There is no grant {grant_id!r}."
                )
            shown = _Rendered(flash=("error", str(exc)), status=409)
            return await self.grants_page(request, session, actor, shown)
        return self.done(back, f"Revoked the grant of {revoked.covers}.")

    async def decide_batch(
        self, request: web.Request, session: Session, actor: Actor
    ) -> web.StreamResponse:
        """Allow or deny every ticked ticket, each validated and applied on its own."""
        posted = await request.post()
        back = safe_next(posted.get("next"), "/tickets")
        action = _text(posted.get("action"))
        ticket_ids = list(dict.fromkeys(_text(v) for v in posted.getall("ticket", []) if v))
        problem = None
        if action not in ("allow", "deny"):
            problem = f"Unknown action {action!r}: choose Allow selected or Deny selected."
        elif not ticket_ids:
            problem = "Tick the calls to decide first; nothing was changed."
        elif len(ticket_ids) > MAX_BATCH:
            problem = f"At most {MAX_BATCH} calls can be decided at once; nothing was changed."
        if problem is not None:
            shown = _Rendered(flash=("error", problem), status=400)
            if back.startswith("/runs/"):
                return await self.run_page(request, session, actor, back[len("/runs/") :], shown)
            return await self.tickets_page(request, session, actor, shown)
        answer: Answer = Allow() if action == "allow" else Deny()
        outcomes = await self.runtime.decide_batch(
            [BatchItem(ticket_id, answer) for ticket_id in ticket_ids], actor
        )
        if any(outcome.applied for outcome in outcomes):
            self.on_change()
        kind = "ok" if all(outcome.applied for outcome in outcomes) else "error"
        return self.done(back, batch_summary(action, outcomes), kind)


def _grant_of(posted: Any) -> tuple[GrantRequest | None, str | None]:
    """The grant an Allow form asks for (``grant=run|thread``, ``hours``, ``same_args``),
    or the problem with the hours typed."""
    scope: GrantScope
    match _text(posted.get("grant")):
        case "run":
            scope = "run"
        case "thread":
            scope = "thread"
        case "":
            return None, None
        case _:
            return None, "Unknown grant: choose this run or this thread."
    hours: float | None = None
    typed = _text(posted.get("hours")).strip()
    if scope == "thread" and typed:
        try:
            hours = float(typed)
        except ValueError:
            hours = -1.0
        if not 0 < hours <= MAX_GRANT_HOURS:
            return None, f"Enter the hours as a number above 0 and at most {MAX_GRANT_HOURS:g}."
    same = _text(posted.get("same_args")) == "true"
    return GrantRequest(scope=scope, hours=hours, args="same" if same else None), None


def _granted_words(answer: Answer) -> str:
    if not isinstance(answer, Allow) or answer.grant is None:
        return ""
    if answer.grant.scope == "thread":
        return " and granted it in this thread"
    return " and granted it for the rest of the run"


NOT_EDITABLE = (
    "The arguments of ticket {ticket_id} cannot be changed; allow or deny it as it is. "
    "Nothing was changed."
)


def batch_summary(action: str, outcomes: list[BatchOutcome]) -> str:
    """One line per batch: how many were decided, then each refusal and why."""
    applied = sum(1 for outcome in outcomes if outcome.applied)
    verb = "Allowed" if action == "allow" else "Denied"
    parts = [f"{verb} {applied} of {len(outcomes)} calls."]
    for outcome in outcomes:
        if outcome.refusal is not None:
            parts.append(f"{outcome.ticket_id}: not decided ({outcome.refusal.message}).")
    return " ".join(parts)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
