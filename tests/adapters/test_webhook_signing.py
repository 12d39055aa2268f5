"""Unit tests of the webhook signature scheme (`adapters.webhook.signing`)."""

from __future__ import annotations

import hashlib
import hmac
import shutil
import subprocess

import pytest

from adapters.webhook.signing import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    BadSignature,
    MissingSignature,
    SignatureError,
    StaleTimestamp,
    sign,
    signed_headers,
    verify,
    verify_headers,
)
from runtime import SignoffError

SECRET = "whsec-test-0123456789abcdef"
BODY = b'{"order_id": "A-1", "amount": 25}'
NOW = 1_767_225_600  # 2026-01-01T00:00:00Z


def test_sign_is_hmac_sha256_over_timestamp_dot_body() -> None:
    expected = hmac.new(SECRET.encode(), f"{NOW}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert sign(SECRET, NOW, BODY) == f"v1={expected}"
    assert sign(SECRET, str(NOW), BODY) == sign(SECRET.encode(), NOW, BODY)


def test_round_trip_returns_the_timestamp() -> None:
    assert verify(SECRET, str(NOW), sign(SECRET, NOW, BODY), BODY, now=NOW) == NOW


def test_signed_headers_round_trip_through_a_header_mapping() -> None:
    headers = signed_headers(SECRET, BODY, NOW + 0.9)
    assert headers[TIMESTAMP_HEADER] == str(NOW)
    assert verify_headers(SECRET, headers, BODY, now=NOW) == NOW


def test_uppercase_hex_and_surrounding_spaces_are_accepted() -> None:
    signature = sign(SECRET, NOW, BODY)
    assert verify(SECRET, f" {NOW} ", "v1=" + signature[3:].upper() + " ", BODY, now=NOW)


@pytest.mark.parametrize(
    "body",
    [
        BODY + b" ",
        BODY.replace(b"25", b"2500"),
        b"",
        BODY[:-1],
    ],
    ids=["trailing-space", "changed-amount", "empty", "truncated"],
)
def test_tampered_body_is_a_bad_signature(body: bytes) -> None:
    with pytest.raises(BadSignature, match="does not match"):
        verify(SECRET, str(NOW), sign(SECRET, NOW, BODY), body, now=NOW)


def test_tampered_timestamp_is_a_bad_signature() -> None:
    with pytest.raises(BadSignature):
        verify(SECRET, str(NOW + 1), sign(SECRET, NOW, BODY), BODY, now=NOW)


def test_timestamp_is_signed_as_sent_not_reformatted() -> None:
    padded = f"0{NOW}"
    assert verify(SECRET, padded, sign(SECRET, padded, BODY), BODY, now=NOW) == NOW
    with pytest.raises(BadSignature):
        verify(SECRET, padded, sign(SECRET, NOW, BODY), BODY, now=NOW)


def test_wrong_secret_is_a_bad_signature() -> None:
    with pytest.raises(BadSignature):
        verify(SECRET, str(NOW), sign("another-secret", NOW, BODY), BODY, now=NOW)


def test_rotation_any_of_several_v1_values_may_match() -> None:
    old = sign("old-secret", NOW, BODY)
    new = sign(SECRET, NOW, BODY)
    assert verify(SECRET, str(NOW), f"{old},{new}", BODY, now=NOW) == NOW
    assert verify(SECRET, str(NOW), f"{new}, {old}", BODY, now=NOW) == NOW
    assert verify("old-secret", str(NOW), f"{new},{old}", BODY, now=NOW) == NOW
    with pytest.raises(BadSignature):
        verify("third-secret", str(NOW), f"{old},{new}", BODY, now=NOW)


def test_unknown_schemes_are_ignored() -> None:
    good = sign(SECRET, NOW, BODY)
    assert verify(SECRET, str(NOW), f"v2=abcdef,{good}", BODY, now=NOW) == NOW
    with pytest.raises(BadSignature, match="no v1= value"):
        verify(SECRET, str(NOW), "v0=" + good[3:], BODY, now=NOW)


def test_too_many_values_are_refused() -> None:
    good = sign(SECRET, NOW, BODY)
    with pytest.raises(BadSignature, match="more than"):
        verify(SECRET, str(NOW), ",".join(["v1=00"] * 8 + [good]), BODY, now=NOW)


@pytest.mark.parametrize(
    ("timestamp", "signature"),
    [(None, "v1=00"), ("", "v1=00"), ("  ", "v1=00"), (str(NOW), None), (str(NOW), "")],
    ids=["no-timestamp", "empty-timestamp", "blank-timestamp", "no-signature", "empty-sig"],
)
def test_missing_headers(timestamp: str | None, signature: str | None) -> None:
    with pytest.raises(MissingSignature, match="header is missing"):
        verify(SECRET, timestamp, signature, BODY, now=NOW)


@pytest.mark.parametrize("timestamp", ["abc", "-5", "1.5", "1e9", "١٢٣", "9" * 13])
def test_malformed_timestamp_is_a_bad_signature(timestamp: str) -> None:
    with pytest.raises(BadSignature, match="Unix time"):
        verify(SECRET, timestamp, sign(SECRET, timestamp, BODY), BODY, now=NOW)


@pytest.mark.parametrize("offset", [-300, -299, 0, 299, 300])
def test_tolerance_edges_are_inclusive(offset: int) -> None:
    sent = NOW + offset
    assert verify(SECRET, str(sent), sign(SECRET, sent, BODY), BODY, now=NOW) == sent


@pytest.mark.parametrize(("offset", "words"), [(-301, "s old"), (301, "in the future")])
def test_beyond_tolerance_is_stale_both_ways(offset: int, words: str) -> None:
    sent = NOW + offset
    with pytest.raises(StaleTimestamp, match=words):
        verify(SECRET, str(sent), sign(SECRET, sent, BODY), BODY, now=NOW)


def test_custom_tolerance() -> None:
    sent = NOW - 11
    signature = sign(SECRET, sent, BODY)
    assert verify(SECRET, str(sent), signature, BODY, now=NOW, tolerance=11) == sent
    with pytest.raises(StaleTimestamp):
        verify(SECRET, str(sent), signature, BODY, now=NOW, tolerance=10)


def test_forged_stale_request_says_bad_signature_not_stale() -> None:
    # Only a holder of the secret learns that their timestamp is the problem.
    sent = NOW - 3600
    with pytest.raises(BadSignature):
        verify(SECRET, str(sent), sign("guess", sent, BODY), BODY, now=NOW)


def test_non_ascii_signature_is_refused_not_crashing() -> None:
    with pytest.raises(BadSignature):
        verify(SECRET, str(NOW), "v1=ünïcode", BODY, now=NOW)


def test_errors_share_one_root_with_codes() -> None:
    assert issubclass(SignatureError, SignoffError)
    assert {MissingSignature.code, BadSignature.code, StaleTimestamp.code} == {
        "missing_signature",
        "bad_signature",
        "stale_timestamp",
    }


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")
def test_openssl_recipe_from_the_docs_matches_sign() -> None:
    script = (
        'printf \'%s.%s\' "$TS" "$BODY" | openssl dgst -sha256 -hmac "$SECRET" -r | cut -d" " -f1'
    )
    out = subprocess.run(
        ["sh", "-c", script],
        env={"TS": str(NOW), "BODY": BODY.decode(), "SECRET": SECRET, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert f"v1={out}" == sign(SECRET, NOW, BODY)
    assert SIGNATURE_HEADER == "X-Signoff-Signature"
