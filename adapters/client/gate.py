"""`gate`: a decorator that asks signoff before a function runs, and reports after."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, TypeVar, cast

from adapters.client.async_client import AsyncSignoffClient
from adapters.client.decision import ApprovalDenied, ApprovalTimeout, Decision, OutcomeStatus
from adapters.client.errors import ApprovalError
from adapters.client.sync_client import SignoffClient

F = TypeVar("F", bound=Callable[..., Any])
KeyOf = Callable[[dict[str, Any]], str]
SUMMARY_LIMIT = 500
_log = logging.getLogger(__name__)


def gate(
    client: SignoffClient | AsyncSignoffClient,
    *,
    agent: str,
    tool: str | None = None,
    session_id: str | None = None,
    description: str | None = None,
    idempotency_key: KeyOf | None = None,
    timeout: float | None = None,
    report: bool = True,
) -> Callable[[F], F]:
    """Run the decorated function only once signoff allows the call.

    Each call asks signoff with the function's arguments by name (defaults included),
    waits for the decision, and then runs the function with the arguments signoff
    answers (a person may have edited them), reporting ``succeeded`` or ``failed``
    afterwards. Sync functions need a `SignoffClient`; async ones take either client.

    Example::

        @gate(signoff, agent="billing")
        def refund(order: str, amount: int) -> None: ...

        refund("A-1", 40)   # raises ApprovalDenied if a person says no

    Args:
        client: The signoff client.
        agent: The agent (source) name.
        tool: The tool's name; the function's name by default.
        session_id: The external session the calls belong to.
        description: Shown on the card.
        idempotency_key: Derives a key from the call's arguments (see `derive_key`), so a
            retried call gets the same approval; without it, each call asks anew.
        timeout: Seconds to wait for a decision; None waits until decided.
        report: Whether to report the outcome once the function ran.

    Raises:
        TypeError: At decoration, for positional-only or ``*args`` parameters (arguments
            travel by name) or a sync function with the async client.

    The wrapped function raises `ApprovalDenied` when the call is denied, `ApprovalTimeout`
    when still pending after `timeout`, and whatever the function raises.
    """

    def decorate(func: F) -> F:
        signature = inspect.signature(func)
        for parameter in signature.parameters.values():
            if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.VAR_POSITIONAL):
                raise TypeError(
                    f"gate sends arguments by name: {func.__qualname__} cannot take "
                    f"{parameter.name!r} positionally only"
                )
        name = tool or func.__name__

        def ask(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            return _named_arguments(signature, args, kwargs)

        def request(arguments: dict[str, Any]) -> dict[str, Any]:
            return {
                "agent": agent,
                "tool": name,
                "arguments": arguments,
                "session_id": session_id,
                "description": description,
                "idempotency_key": idempotency_key(arguments) if idempotency_key else None,
                "wait": True if timeout is None else timeout,
            }

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                ask_for = request(ask(args, kwargs))
                if isinstance(client, AsyncSignoffClient):
                    decision = await client.request_approval(**ask_for)
                else:
                    decision = await asyncio.to_thread(
                        functools.partial(client.request_approval, **ask_for)
                    )
                _raise_unless_allowed(decision)
                try:
                    result = await func(**decision.arguments)
                except Exception as exc:
                    await _report_async(client, decision, "failed", _summary(exc), report)
                    raise
                await _report_async(client, decision, "succeeded", None, report)
                return result

            return cast(F, run_async)

        if not isinstance(client, SignoffClient):
            raise TypeError(f"{func.__qualname__} is not async: gate it with a SignoffClient")
        sync_client = client

        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            decision = sync_client.request_approval(**request(ask(args, kwargs)))
            _raise_unless_allowed(decision)
            try:
                result = func(**decision.arguments)
            except Exception as exc:
                _report(sync_client, decision, "failed", _summary(exc), report)
                raise
            _report(sync_client, decision, "succeeded", None, report)
            return result

        return cast(F, run)

    return decorate


def _named_arguments(
    signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    named: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        else:
            named[name] = value
    return named


def _raise_unless_allowed(decision: Decision) -> None:
    if decision.denied:
        raise ApprovalDenied(decision)
    if decision.pending:
        raise ApprovalTimeout(decision)


def _summary(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"[:SUMMARY_LIMIT]


def _report(
    client: SignoffClient,
    decision: Decision,
    status: OutcomeStatus,
    summary: str | None,
    report: bool,
) -> None:
    # The call has run: failing to record it must not turn its result into an error.
    if not report:
        return
    try:
        client.report_outcome(decision.approval_id, status, summary)
    except ApprovalError as exc:
        _log.warning("could not report the outcome of %s: %s", decision.approval_id, exc)


async def _report_async(
    client: SignoffClient | AsyncSignoffClient,
    decision: Decision,
    status: OutcomeStatus,
    summary: str | None,
    report: bool,
) -> None:
    if not report:
        return
    try:
        if isinstance(client, AsyncSignoffClient):
            await client.report_outcome(decision.approval_id, status, summary)
        else:
            await asyncio.to_thread(client.report_outcome, decision.approval_id, status, summary)
    except ApprovalError as exc:
        _log.warning("could not report the outcome of %s: %s", decision.approval_id, exc)
