"""`signoff serve` as a real process: no request header value or token reaches its logs,
not even from a request aiohttp's parser refuses before any handler runs."""

from __future__ import annotations

import socket

import pytest

from tests.e2e.test_boundaries import TOKEN, Serving, _address, serving

pytestmark = pytest.mark.timeout(90)

__all__ = ["serving"]  # the fixture, shared with the other `signoff serve` boundary tests

WRONG_TOKEN = "not-a-token-but-still-a-secret-4242"
MALFORMED = [
    b"Authorization: Bearer %s\x01",
    b"Authorization: Bearer %s\x7f\x00",
    b"Authorization: Bearer %s\r\n continued",
    b"Authorization Bearer %s",
    b"Cookie: signoff_session=%s\x01",
    b"X-Signoff-Signature: v1=%s\x01",
    b"X-%s\x01: 1",
]


def _send(url: str, request: bytes) -> bytes:
    with socket.create_connection(_address(url)) as sock:
        sock.settimeout(15)
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    return answer


def _request(header: bytes, path: str = "/api/runs") -> bytes:
    return (
        f"GET {path} HTTP/1.1\r\nHost: x\r\n".encode() + header + b"\r\nConnection: close\r\n\r\n"
    )


@pytest.mark.parametrize(
    "serving",
    [
        {"SIGNOFF_OPERATOR_TOKEN": TOKEN, "SIGNOFF_LOG_LEVEL": "DEBUG"},
        {"SIGNOFF_OPERATOR_TOKEN": TOKEN, "SIGNOFF_LOG_LEVEL": "INFO"},
    ],
    ids=["debug", "info"],
    indirect=True,
)
def test_a_malformed_header_is_400_and_its_value_is_in_no_log_line(serving: Serving) -> None:
    for secret in (TOKEN, WRONG_TOKEN):
        for header in MALFORMED:
            answer = _send(serving.url, _request(header % secret.encode()))
            status = answer.split(b"\r\n", 1)[0]
            assert b" 400 " in status, (header, answer)
    # Still serving after the refusals.
    ok = _send(serving.url, _request(b"X-Probe: 1", "/healthz"))
    assert b" 200 " in ok.split(b"\r\n", 1)[0], ok
    out, err = serving.stop()
    assert TOKEN not in err and TOKEN not in out.replace(f"sign-in token: {TOKEN}", "")
    assert WRONG_TOKEN not in err and WRONG_TOKEN not in out
    assert "refused a malformed HTTP request" in err


def test_credentials_in_messages_and_exceptions_are_masked() -> None:
    import io
    import logging

    from bot.logs import JsonFormatter, RedactingFilter

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("signoff.test_log_secrets")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("sent %s", f"Authorization: Bearer {WRONG_TOKEN}")
        try:
            raise RuntimeError(f"bad header b'Cookie: s={WRONG_TOKEN}'; basic {WRONG_TOKEN}")
        except RuntimeError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    text = stream.getvalue()
    assert WRONG_TOKEN not in text
    assert text.count("[redacted]") >= 3
    assert "RuntimeError" in text
