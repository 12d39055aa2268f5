"""Fixtures: one `signoff serve` per module for the client tests, and clients of it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from adapters.client import RetryPolicy, SignoffClient
from tests.clients.serving import AGENT_TOKEN, Server, server_env, signing_key

QUICK_RETRY = RetryPolicy(first_delay=0.05, max_delay=0.5, give_up_after=60.0)


@pytest.fixture(scope="module")
def key() -> Ed25519PrivateKey:
    return signing_key()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, key: Ed25519PrivateKey) -> Iterator[Server]:
    directory: Path = tmp_path_factory.mktemp("signoff")
    served = Server(server_env(directory, key), directory / "server.log")
    try:
        yield served
    finally:
        served.terminate()


@pytest.fixture
def client(server: Server) -> Iterator[SignoffClient]:
    with httpx.Client(trust_env=False) as http:
        yield SignoffClient(server.url, token=AGENT_TOKEN, retry=QUICK_RETRY, http_client=http)
