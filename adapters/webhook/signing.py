"""Signing and verifying webhook requests and completion callbacks (pure functions).

Scheme for requests to ``POST /hooks/{name}``::

    X-Signoff-Timestamp: <unix seconds>
    X-Signoff-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>." + raw body bytes)>

Completion callbacks signoff sends carry the same two headers, but their MAC covers a
purpose label first (`CALLBACK`)::

    X-Signoff-Signature: v1=<hex HMAC-SHA256(secret, "callback.<timestamp>." + raw body)>

so a callback, which the receiver may log or forward, is never also a valid request to
the hook that sent it (a request's signed text starts with a digit, a callback's with
``callback.``).

- The MAC is computed over the ASCII timestamp exactly as sent in the header, one dot,
  then the raw request body bytes, unmodified (no JSON re-serialisation); the key is the
  hook's secret as UTF-8 bytes. The hex digest is lowercase (uppercase is accepted).
- ``X-Signoff-Signature`` may hold several comma-separated values, e.g.
  ``v1=<hex>,v1=<hex>``: during a secret rotation the sender signs with the old and the
  new secret, and the request is accepted if any ``v1`` value matches. Values with
  another scheme prefix are ignored (room for ``v2``).
- The timestamp must be within ``tolerance`` seconds (default 300, five minutes) of the
  receiver's clock, in either direction: old requests (replays) and requests from the
  future are refused alike.
- Comparison is constant-time (`hmac.compare_digest`). The signature is checked before
  the timestamp window, so only a holder of the secret learns that a timestamp is stale.

Example with openssl and curl::

    body='{"order_id": "A-1", "amount": 25}'
    ts=$(date +%s)
    sig=$(printf '%s.%s' "$ts" "$body" | openssl dgst -sha256 -hmac "$SECRET" -r | cut -d' ' -f1)
    curl -sS -X POST "http://127.0.0.1:8080/hooks/refunds" \\
      -H 'Content-Type: application/json' \\
      -H "X-Signoff-Timestamp: $ts" -H "X-Signoff-Signature: v1=$sig" \\
      -H 'Idempotency-Key: order-A-1' --data-binary "$body"

Errors::

    SignoffError (runtime)
    └── SignatureError              the caller: the request is not authentic (HTTP 401)
        ├── MissingSignature        a header is absent or empty
        ├── BadSignature            malformed headers, or no v1 value matches
        └── StaleTimestamp          authentic, but outside the time window
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from runtime import SignoffError

TIMESTAMP_HEADER = "X-Signoff-Timestamp"
SIGNATURE_HEADER = "X-Signoff-Signature"
SCHEME = "v1"
DEFAULT_TOLERANCE = 300
"""Seconds a timestamp may differ from the receiver's clock (five minutes)."""
CALLBACK = "callback"
"""The purpose label of completion callbacks: their MAC covers ``"callback." + ...``."""

# Bounds that keep a hostile header from costing more than a few MACs.
_MAX_SIGNATURES = 8
_MAX_TIMESTAMP_DIGITS = 12


class SignatureError(SignoffError):
    """The request's signature headers do not prove it came from the secret's holder."""

    code = "bad_signature"


class MissingSignature(SignatureError):
    """The timestamp or signature header is absent or empty."""

    code = "missing_signature"


class BadSignature(SignatureError):
    """The headers are malformed, or no ``v1`` signature matches the body."""

    code = "bad_signature"


class StaleTimestamp(SignatureError):
    """The signature is valid but the timestamp is outside the tolerance window."""

    code = "stale_timestamp"


def _key(secret: str | bytes) -> bytes:
    return secret.encode("utf-8") if isinstance(secret, str) else secret


def _digest(secret: str | bytes, timestamp: str, body: bytes, purpose: str | None) -> str:
    label = f"{purpose}." if purpose else ""
    message = (label + timestamp).encode("utf-8") + b"." + body
    return hmac.new(_key(secret), message, hashlib.sha256).hexdigest()


def sign(
    secret: str | bytes, timestamp: int | str, body: bytes, *, purpose: str | None = None
) -> str:
    """The ``X-Signoff-Signature`` value for `body` sent at `timestamp`.

    Args:
        secret: The hook's shared secret.
        timestamp: Unix seconds, exactly as sent in ``X-Signoff-Timestamp``.
        body: The raw body bytes, exactly as sent.
        purpose: None for a request to a hook; `CALLBACK` for a completion callback.

    Returns:
        ``"v1=<lowercase hex HMAC-SHA256>"``.
    """
    return f"{SCHEME}={_digest(secret, str(timestamp), body, purpose)}"


def signed_headers(
    secret: str | bytes, body: bytes, now: float, *, purpose: str | None = None
) -> dict[str, str]:
    """Both signature headers for sending `body` at Unix time `now` (see `sign`)."""
    timestamp = str(int(now))
    return {
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: sign(secret, timestamp, body, purpose=purpose),
    }


def _parse_timestamp(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > _MAX_TIMESTAMP_DIGITS:
        raise BadSignature(f"{TIMESTAMP_HEADER} must be a Unix time in whole seconds")
    return int(text)


def _candidates(header: str) -> list[str]:
    values = [part.strip() for part in header.split(",") if part.strip()]
    if len(values) > _MAX_SIGNATURES:
        raise BadSignature(f"{SIGNATURE_HEADER} holds more than {_MAX_SIGNATURES} values")
    prefix = f"{SCHEME}="
    found = [v[len(prefix) :] for v in values if v.startswith(prefix)]
    if not found:
        raise BadSignature(f"{SIGNATURE_HEADER} holds no {SCHEME}= value")
    return found


def verify(
    secret: str | bytes,
    headers_timestamp: str | None,
    headers_signature: str | None,
    body: bytes,
    now: float,
    tolerance: int = DEFAULT_TOLERANCE,
    *,
    purpose: str | None = None,
) -> int:
    """Check a request's signature headers against its raw body.

    Args:
        secret: The hook's shared secret.
        headers_timestamp: The ``X-Signoff-Timestamp`` header value (None if absent).
        headers_signature: The ``X-Signoff-Signature`` header value (None if absent).
        body: The raw body bytes, before any parsing.
        now: The receiver's current Unix time in seconds.
        tolerance: Seconds the timestamp may be off, in the past or the future.
        purpose: None for a request to a hook; `CALLBACK` to check a completion callback.

    Returns:
        The verified timestamp.

    Raises:
        MissingSignature: A header is absent or empty.
        BadSignature: A header is malformed or no ``v1`` value matches.
        StaleTimestamp: The signature matches but the timestamp is outside the window.
    """
    if not headers_timestamp or not headers_timestamp.strip():
        raise MissingSignature(f"the {TIMESTAMP_HEADER} header is missing")
    if not headers_signature or not headers_signature.strip():
        raise MissingSignature(f"the {SIGNATURE_HEADER} header is missing")
    sent = headers_timestamp.strip()
    timestamp = _parse_timestamp(sent)
    # The MAC covers the timestamp text as sent, not a re-formatted number.
    expected = _digest(secret, sent, body, purpose).encode("ascii")
    matched = False
    # Compare every candidate (no early exit) so timing does not tell which one matched.
    for candidate in _candidates(headers_signature):
        given = candidate.strip().lower().encode("utf-8", "replace")
        matched |= hmac.compare_digest(expected, given)
    if not matched:
        raise BadSignature("the signature does not match the body and timestamp")
    skew = now - timestamp
    if skew > tolerance:
        raise StaleTimestamp(
            f"the timestamp is {int(skew)} s old; at most {tolerance} s are accepted"
        )
    if -skew > tolerance:
        raise StaleTimestamp(
            f"the timestamp is {int(-skew)} s in the future; at most {tolerance} s are accepted"
        )
    return timestamp


def verify_headers(
    secret: str | bytes,
    headers: Mapping[str, str],
    body: bytes,
    now: float,
    tolerance: int = DEFAULT_TOLERANCE,
    *,
    purpose: str | None = None,
) -> int:
    """`verify` reading both headers from a case-insensitive header mapping."""
    return verify(
        secret,
        headers.get(TIMESTAMP_HEADER),
        headers.get(SIGNATURE_HEADER),
        body,
        now,
        tolerance,
        purpose=purpose,
    )
