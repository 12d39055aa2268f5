"""`AsyncSignoffClient`: ask signoff whether a tool call may run, from asyncio code."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import httpx

from adapters.client import wire
from adapters.client.decision import Decision, OutcomeStatus
from adapters.client.retry import RetryPolicy


class AsyncSignoffClient:
    """An asyncio client of signoff's approvals API (``/api/approvals``).

    Example::

        async with AsyncSignoffClient("https://signoff.example.com", token="…") as signoff:
            decision = await signoff.request_approval(
                agent="billing", tool="refund", arguments={"order": "A-1", "amount": 40}
            )
            if decision.allowed:
                await refund(**decision.arguments)

    Args:
        base_url: Where signoff serves (``http://127.0.0.1:8080``).
        token: An API token (one of ``SIGNOFF_API_TOKENS``).
        timeout: Seconds for an ordinary request; a long poll gets its wait on top.
        retry: How requests that signoff did not answer are retried.
        http_client: An ``httpx.AsyncClient`` to send with (proxies, certificates …); the
            client then does not close it.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}", "User-Agent": wire.USER_AGENT}
        self._timeout = timeout
        self._retry = retry or RetryPolicy()
        self._owned = http_client is None
        self._http = http_client if http_client is not None else httpx.AsyncClient()

    async def request_approval(
        self,
        *,
        agent: str,
        tool: str,
        arguments: Mapping[str, Any],
        session_id: str | None = None,
        idempotency_key: str | None = None,
        description: str | None = None,
        schema: Mapping[str, Any] | None = None,
        on_behalf_of: str | None = None,
        approvers: Sequence[str] | None = None,
        deadline_seconds: float | None = None,
        secret: Sequence[str] | None = None,
        callback_url: str | None = None,
        wait: bool | float = True,
    ) -> Decision:
        """Ask whether `tool` may run with `arguments`.

        Args:
            agent: The agent (source) name, as declared in the agents file.
            tool: The tool's name.
            arguments: Its arguments (a JSON object).
            session_id: The external run or conversation; grants of scope ``run`` and
                ``thread`` cover it.
            idempotency_key: The same key gives the same approval (never a second
                card); derive it from your own ids with `derive_key`. Without one, a
                fresh key is used, which still makes this call's retries safe.
            description: Why the call is made, shown on the card.
            schema: A JSON schema the arguments must satisfy.
            on_behalf_of: The user the request is made for (the token must allow it).
            approvers: Who may decide, where the agent's configuration allows overriding.
            deadline_seconds: How long the ticket stays open, where allowed.
            secret: Argument names to mask on cards and in the flight recorder.
            callback_url: Where signoff posts the decision (signed, Standard Webhooks).
            wait: True waits until decided; a number waits at most that many seconds;
                False returns signoff's first answer.

        Returns:
            The decision; still pending if `wait` ran out (or was False).

        Raises:
            ApprovalRequestError: signoff refused the request (bad input, refused agent,
                idempotency conflict …).
            SignoffUnavailable: signoff could not be reached for too long.
        """
        call = wire.approval_call(
            agent=agent,
            tool=tool,
            arguments=arguments,
            idempotency_key=idempotency_key,
            session_id=session_id,
            description=description,
            schema=schema,
            on_behalf_of=on_behalf_of,
            approvers=approvers,
            deadline_seconds=deadline_seconds,
            secret=secret,
            callback_url=callback_url,
        )
        started = time.monotonic()
        decision = await self._decision(call)
        if not decision.pending or wait is False:
            return decision
        timeout = None if wait is True else max(0.0, float(wait) - (time.monotonic() - started))
        return await self.wait(decision.approval_id, timeout=timeout)

    async def get(self, approval_id: str, *, wait: float = 0) -> Decision:
        """Read an approval; with `wait` (up to 60 s), hold on while it is pending.

        Raises:
            ApprovalRequestError: 404 when the approval does not exist for this token.
            SignoffUnavailable: signoff could not be reached for too long.
        """
        return await self._decision(wire.get_call(approval_id, wait))

    # `timeout` as in SignoffClient.wait: the two clients share one API.
    async def wait(self, approval_id: str, *, timeout: float | None = None) -> Decision:  # noqa: ASYNC109
        """Wait until the approval is decided, long polling (and reconnecting) as needed.

        Args:
            approval_id: The approval.
            timeout: At most this many seconds; None waits until decided.

        Returns:
            The decision; still pending when `timeout` ran out.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            decision = await self.get(approval_id, wait=wire.next_poll(remaining))
            if not decision.pending or (deadline is not None and time.monotonic() >= deadline):
                return decision

    async def report_outcome(
        self, approval_id: str, status: OutcomeStatus, summary: str | None = None
    ) -> Decision:
        """Report what happened when the approved call ran.

        Args:
            approval_id: The approval.
            status: ``succeeded``, ``failed``, or ``unknown`` (a person reconciles it).
            summary: A short account, kept in the flight recorder.

        Returns:
            The approval with its outcome.
        """
        return await self._decision(wire.outcome_call(approval_id, status, summary))

    async def jwks(self) -> dict[str, Any]:
        """The public keys of decision tokens (``/.well-known/jwks.json``)."""
        return await self._send(wire.Call("GET", "/.well-known/jwks.json"))

    async def close(self) -> None:
        """Close the connections (unless the ``http_client`` was given)."""
        if self._owned:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncSignoffClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _decision(self, call: wire.Call) -> Decision:
        return Decision.from_json(await self._send(call))

    async def _send(self, call: wire.Call) -> dict[str, Any]:
        attempts = self._retry.start()
        while True:
            try:
                response = await self._http.request(
                    call.method,
                    self._base_url + call.path,
                    json=call.json,
                    params=call.params,
                    headers={**self._headers, **(call.headers or {})},
                    timeout=self._timeout + call.wait,
                )
            except httpx.TransportError as exc:
                delay = attempts.failed(f"{type(exc).__name__}: {exc}")
            else:
                body = wire.read(response)
                if not isinstance(body, wire.Transient):
                    return body
                delay = attempts.failed(body.why, body.retry_after)
            await asyncio.sleep(delay)
