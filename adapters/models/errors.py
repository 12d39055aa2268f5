"""Provider failures as `runtime.ModelError`: one classification for every SDK.

The SDKs retry rate limits (429), server errors (5xx, Anthropic's 529 "overloaded"),
timeouts and dropped connections themselves, a bounded number of times with backoff
(honouring ``Retry-After``). Whatever is still failing after that, and every other 4xx,
reaches the models as an SDK exception and is translated here.
"""

from __future__ import annotations

import re
from typing import Any

from runtime import ModelError, ModelErrorKind

_CONTEXT_LENGTH = re.compile(
    r"context[ _]length|context window|prompt is too long|too many (input )?tokens",
    re.IGNORECASE,
)


def provider_message(body: Any, fallback: str) -> str:
    """The human part of an error body (``{"error": {"message": ...}}`` and the like)."""
    detail: Any = body
    if isinstance(detail, dict) and isinstance(detail.get("error"), dict):
        detail = detail["error"]
    if isinstance(detail, dict):
        message = detail.get("message") or detail.get("detail")
        if isinstance(message, str) and message.strip():
            return " ".join(message.split())
    if isinstance(detail, str) and detail.strip():
        return " ".join(detail.split())
    return " ".join(fallback.split()) or "no error message"


def _error_code(body: Any) -> str:
    detail = body.get("error", body) if isinstance(body, dict) else None
    if not isinstance(detail, dict):
        return ""
    return " ".join(str(detail.get(key) or "") for key in ("code", "type"))


def kind_of_status(status: int, message: str, body: Any) -> ModelErrorKind:
    """Classify an HTTP error answer."""
    if status == 401:
        return ModelErrorKind.AUTHENTICATION
    if status == 403:
        return ModelErrorKind.PERMISSION
    if status == 404:
        return ModelErrorKind.NOT_FOUND
    if status == 408:
        return ModelErrorKind.TIMEOUT
    if status == 429:
        return ModelErrorKind.RATE_LIMITED
    if status >= 500:
        return ModelErrorKind.SERVER
    if status == 413 or "context_length" in _error_code(body) or _CONTEXT_LENGTH.search(message):
        return ModelErrorKind.CONTEXT_LENGTH
    return ModelErrorKind.BAD_REQUEST


def status_error(
    provider: str, status: int, body: Any, fallback: str, request_id: str | None
) -> ModelError:
    """A `ModelError` for an HTTP error answer of `provider`."""
    message = provider_message(body, fallback)
    return ModelError(
        message,
        kind=kind_of_status(status, message, body),
        provider=provider,
        status=status,
        request_id=request_id,
    )


def timeout_error(provider: str, seconds: float | None) -> ModelError:
    """A `ModelError` for a call that never answered in time."""
    limit = f" within {seconds:g}s" if seconds is not None else ""
    return ModelError(
        f"no answer{limit}, after the client's retries",
        kind=ModelErrorKind.TIMEOUT,
        provider=provider,
    )


def connection_error(provider: str, detail: str) -> ModelError:
    """A `ModelError` for a provider that could not be reached."""
    return ModelError(
        f"cannot reach the provider ({detail}), after the client's retries",
        kind=ModelErrorKind.CONNECTION,
        provider=provider,
    )


def invalid_response(provider: str, detail: str) -> ModelError:
    """A `ModelError` for an answer that could not be read."""
    return ModelError(
        f"unreadable answer: {detail}", kind=ModelErrorKind.INVALID_RESPONSE, provider=provider
    )
