"""Claude Code's HTTP hook on ``signoff serve``: ``POST /claude-code/hook``.

Claude Code's ``"type": "http"`` hooks POST the same ``PreToolUse`` JSON a command hook
reads on stdin; this route asks signoff about the call (as `adapters.claude_code.hook`
maps it), waits for a decision and answers Claude Code's hook JSON::

    POST /claude-code/hook?agent=&timeout=&on_timeout=&on_behalf_of=&resume=
        Authorization: Bearer <API token>        -> 200 hook answer
                                                    400 bad input, 401 no valid token,
                                                    403 refused, 409 key reused

Query parameters: ``agent`` (default ``claude-code``), ``timeout`` (seconds to wait for a
decision, 0 to 3600, default 540), ``on_timeout`` (``ask``, ``defer`` or ``deny``, the
answer when nobody decided in time; default ``ask``), ``on_behalf_of`` (the user the
call is made for; the token must be allowed to name them) and ``resume`` (``1`` with
``on_timeout=defer``: signoff resumes the session once the call is decided,
`adapters.claude_code.resume`). A refusal asks nothing and changes nothing.

When nobody decided within ``timeout``: ``defer`` keeps the ticket open (deferred, to be
resumed, with ``resume=1``); ``ask`` and ``deny`` withdraw the request, so nobody decides
a call Claude Code no longer waits for.

It lives outside ``/api``: it answers in Claude Code's hook format, not the JSON API's,
and ``/hooks/`` holds the signed webhooks that start runs.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from adapters.claude_code.hook import (
    DEFAULT_AGENT,
    DEFAULT_TIMEOUT_SECONDS,
    ON_TIMEOUT,
    HookInputError,
    OnTimeout,
    PreToolUse,
    approval_request,
    hook_answer,
    idempotency_key,
    read_pre_tool_use,
)
from adapters.claude_code.resume import ResumeConfig, check_session, destination
from runtime import (
    Actor,
    Approval,
    ApprovalRefused,
    ConfigurationError,
    IdempotencyConflict,
    InvalidApproval,
    Runtime,
)

PATH = "/claude-code/hook"
MAX_TIMEOUT_SECONDS = 3600
"""The longest a request may wait for a decision (``?timeout=``)."""
MAX_BODY_BYTES = 1024 * 1024
"""The largest hook input (a ``Write`` call carries the whole file)."""
_AGENT = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_SECONDS = re.compile(r"\d{1,4}(\.\d{1,3})?")

Authenticate = Callable[[web.Request], Actor | None]
"""The actor of a request's bearer token, or None."""
MayActFor = Callable[[web.Request, str], bool]
"""Whether the request's token may name this user as the requester."""


class _Refused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def _error(status: int, code: str, message: str) -> web.Response:
    response = web.json_response({"error": code, "message": message}, status=status)
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="signoff"'
    return response


@dataclass(frozen=True)
class _Options:
    agent: str
    timeout: float
    on_timeout: OnTimeout
    on_behalf_of: str | None
    resume: bool


def _options(request: web.Request) -> _Options:
    agent = request.query.get("agent") or DEFAULT_AGENT
    if not _AGENT.fullmatch(agent):
        raise _Refused(400, "bad_request", "agent: 1-64 letters, digits, '_', '.' or '-'")
    raw = request.query.get("timeout")
    if raw is None or raw == "":
        timeout = DEFAULT_TIMEOUT_SECONDS
    elif _SECONDS.fullmatch(raw) and float(raw) <= MAX_TIMEOUT_SECONDS:
        timeout = float(raw)
    else:
        raise _Refused(
            400,
            "bad_request",
            f"timeout must be a number of seconds from 0 to {MAX_TIMEOUT_SECONDS}",
        )
    on_timeout = request.query.get("on_timeout") or "ask"
    if on_timeout not in ON_TIMEOUT:
        raise _Refused(400, "bad_request", f"on_timeout must be one of {', '.join(ON_TIMEOUT)}")
    on_behalf_of = request.query.get("on_behalf_of") or None
    if on_behalf_of is not None and len(on_behalf_of) > 200:
        raise _Refused(400, "bad_request", "on_behalf_of is longer than 200 characters")
    resume = request.query.get("resume") or "0"
    if resume not in ("0", "1"):
        raise _Refused(400, "bad_request", "resume must be 0 or 1")
    if resume == "1" and on_timeout != "defer":
        raise _Refused(400, "bad_request", "resume=1 goes with on_timeout=defer")
    return _Options(agent, timeout, on_timeout, on_behalf_of, resume == "1")


def add_claude_code_route(
    app: web.Application,
    runtime: Runtime,
    *,
    authenticate: Authenticate,
    may_act_for: MayActFor,
    on_change: Callable[[], None],
    resumes: Mapping[str, ResumeConfig] | None = None,
) -> None:
    """Add ``POST /claude-code/hook`` to `app`.

    Args:
        app: The application to extend.
        runtime: The runtime that decides.
        authenticate: Who the request's bearer token is (None: refused with 401).
        may_act_for: Whether the token may ask on behalf of a user (``?on_behalf_of=``).
        on_change: Called after a request made a run ready (wakes the worker).
        resumes: How each agent's deferred sessions are resumed (``?resume=1``), by
            agent name; an agent without one refuses ``resume=1``.
    """
    stopping = asyncio.Event()
    configs = dict(resumes or {})

    async def stop_waiting(_app: web.Application) -> None:
        stopping.set()

    app.on_shutdown.append(stop_waiting)

    async def wait(approval: Approval, actor: Actor, seconds: float) -> Approval:
        """The approval once decided, after `seconds`, or as it stands when signoff stops."""
        if approval.status != "pending" or seconds <= 0 or stopping.is_set():
            return approval
        return await runtime.wait_approval(
            approval.approval_id, viewer=actor, timeout=seconds, stop=stopping
        )

    def resume_to(options: _Options, call: PreToolUse) -> dict[str, Any] | None:
        if not options.resume:
            return None
        config = configs.get(options.agent)
        if config is None:
            raise _Refused(
                403,
                "resume_refused",
                f"agent {options.agent!r} has no resume in the agents file: signoff cannot "
                "resume its sessions",
            )
        problem = config.refusal(call.cwd)
        if problem is None:
            try:
                check_session(call.session_id)
            except ValueError as exc:
                problem = str(exc)
        if problem is not None:
            raise _Refused(403, "resume_refused", problem)
        assert call.cwd is not None  # `refusal` refuses None
        return destination(call.cwd)

    async def settle(approval: Approval, actor: Actor, options: _Options) -> Approval:
        """Once the wait is over: a pending approval is deferred (to be resumed) or
        withdrawn (the hook answered ask or deny on its own)."""
        if approval.decided:
            return approval
        if options.on_timeout != "defer":
            waited = f"{options.timeout:g}"
            why = f"Claude Code was answered {options.on_timeout}: nobody decided within {waited} s"
            withdrawn = await runtime.withdraw_approval(
                approval.approval_id, actor=actor, reason=why
            )
            # Decided meanwhile: that decision is the answer; withdrawn: the timeout's.
            return approval if withdrawn.basis == "cancelled" else withdrawn
        if options.resume:
            return await runtime.defer_approval(approval.approval_id, actor=actor)
        return approval

    async def handle(request: web.Request) -> web.StreamResponse:
        actor = authenticate(request)
        if actor is None:
            return _error(401, "unauthenticated", "a valid bearer token is required")
        try:
            options = _options(request)
            if options.on_behalf_of is not None and not may_act_for(request, options.on_behalf_of):
                raise _Refused(
                    403,
                    "forbidden",
                    f"this token may not ask on behalf of {options.on_behalf_of!r}",
                )
            if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
                raise _Refused(413, "too_large", f"the hook input is over {MAX_BODY_BYTES} bytes")
            call = read_pre_tool_use(await request.read())
            approval = await runtime.request_approval(
                approval_request(
                    call,
                    agent=options.agent,
                    on_behalf_of=options.on_behalf_of,
                    resume=resume_to(options, call),
                ),
                actor=actor,
                idempotency_key=idempotency_key(call, options.agent),
            )
        except _Refused as exc:
            return _error(exc.status, exc.code, str(exc))
        except HookInputError as exc:
            return _error(400, "bad_request", str(exc))
        except InvalidApproval as exc:
            return _error(400, "invalid_approval", str(exc))
        except (ApprovalRefused, ConfigurationError) as exc:
            return _error(403, "approval_refused", str(exc))
        except IdempotencyConflict as exc:
            return _error(409, "idempotency_conflict", str(exc))
        if not approval.replayed:
            on_change()
        settled = await wait(approval, actor, options.timeout)
        settled = await settle(settled, actor, options)
        body: dict[str, Any] = hook_answer(
            settled,
            on_timeout=options.on_timeout,
            waited=math.floor(options.timeout * 1000) / 1000,
            resumed=settled.deferred,
        )
        return web.json_response(body)

    app.router.add_post(PATH, handle)


__all__ = ["MAX_TIMEOUT_SECONDS", "PATH", "add_claude_code_route"]
