"""What the client raises. One root, split by who must act.

::

    ApprovalError                   every error of the client
    ├── ApprovalRequestError        signoff refused the request (a 4xx): fix the request
    ├── SignoffUnavailable          signoff did not answer in time (network, 5xx, 429)
    ├── ApprovalDenied              the call was denied: do not run it
    ├── ApprovalTimeout             still pending when the caller stopped waiting
    └── DecisionTokenError          a decision token failed verification: do not run it

`ApprovalDenied` and `ApprovalTimeout` carry the `Decision` as signoff last answered it,
and live next to it in `adapters.client.decision`.
"""

from __future__ import annotations

from typing import Any


class ApprovalError(Exception):
    """Base of every error the client raises."""


class ApprovalRequestError(ApprovalError):
    """signoff refused the request with a 4xx answer; retrying it unchanged will not help.

    Attributes:
        status_code: The HTTP status (400 bad input, 401 bad token, 403 refused by
            configuration, 404 unknown or not visible, 409 idempotency or outcome conflict).
        code: signoff's stable reason (``bad_request``, ``not_found`` ...), or None.
        body: The JSON error body, or None when it was not JSON.
    """

    def __init__(
        self, status_code: int, code: str | None, message: str, body: dict[str, Any] | None
    ) -> None:
        super().__init__(f"{status_code} {code or 'error'}: {message}")
        self.status_code = status_code
        self.code = code
        self.message = message
        self.body = body


class SignoffUnavailable(ApprovalError):
    """signoff could not be reached, or kept answering 5xx/429, for longer than allowed."""


class DecisionTokenError(ApprovalError):
    """A decision token is forged, expired, malformed, or for another call or decision."""
