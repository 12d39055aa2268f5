"""A waiting client outlives a restart of `signoff serve`: it reconnects and gets the decision."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from adapters.client import Decision, SignoffClient, derive_key
from tests.clients.conftest import QUICK_RETRY
from tests.clients.serving import AGENT_TOKEN, Server, server_env
from tests.clients.test_client import Blocked


class Observed(httpx.BaseTransport):
    """The real HTTP transport, telling the test when a long poll left and when one failed."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()
        self.polling = threading.Event()
        self.failed = threading.Event()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.params.get("wait"):
            self.polling.set()
        try:
            return self._inner.handle_request(request)
        except httpx.TransportError:
            self.failed.set()
            raise

    def close(self) -> None:
        self._inner.close()


def test_a_waiting_request_reconnects_to_a_restarted_server_and_gets_the_decision(
    tmp_path: Path, key: Ed25519PrivateKey
) -> None:
    env = server_env(tmp_path, key)
    first = Server(env, tmp_path / "first.log")
    observed = Observed()
    with httpx.Client(transport=observed) as http:
        client = SignoffClient(first.url, token=AGENT_TOKEN, retry=QUICK_RETRY, http_client=http)

        def ask(wait: bool) -> Decision:
            return client.request_approval(
                agent="billing",
                tool="refund",
                arguments={"order": "A-1", "amount": 40},
                session_id="conv-restart",
                idempotency_key=derive_key("conv-restart", "call-1"),
                wait=wait,
            )

        pending = ask(wait=False)
        assert pending.pending and pending.ticket_id is not None
        waiting = Blocked(lambda: client.wait(pending.approval_id))
        assert observed.polling.wait(30)

        first.kill()
        assert observed.failed.wait(30), "the long poll should have been cut off"
        second = Server(env, tmp_path / "second.log")
        try:
            assert second.url == first.url
            assert [t["ticket_id"] for t in second.tickets()] == [pending.ticket_id]
            second.decide(pending.ticket_id, {"decision": "allow"})

            decision = waiting.join()
            assert decision.allowed and decision.approval_id == pending.approval_id
            # Asking again with the same key after the restart: the same approval.
            again = ask(wait=True)
            assert again.approval_id == pending.approval_id and again.allowed
            assert second.tickets() == []
        finally:
            second.terminate()
