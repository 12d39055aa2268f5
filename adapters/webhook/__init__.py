"""Webhook-triggered runs: ``POST /hooks/{name}`` and signed completion callbacks.

- `signing`: the HMAC-SHA256 header scheme (pure functions);
- `config`: `HookConfig`, one hook's secret, agent, input template and destinations;
- `routes`: `add_hook_routes`, the aiohttp route that starts runs;
- `callback`: `CallbackNotifier`, completion callbacks via the
  outbox.
"""

from adapters.webhook.callback import CallbackNotifier
from adapters.webhook.config import HookConfig, TemplateError
from adapters.webhook.routes import add_hook_routes
from adapters.webhook.signing import (
    CALLBACK,
    BadSignature,
    MissingSignature,
    SignatureError,
    StaleTimestamp,
    sign,
    signed_headers,
    verify,
    verify_headers,
)

__all__ = [
    "CALLBACK",
    "BadSignature",
    "CallbackNotifier",
    "HookConfig",
    "MissingSignature",
    "SignatureError",
    "StaleTimestamp",
    "TemplateError",
    "add_hook_routes",
    "sign",
    "signed_headers",
    "verify",
    "verify_headers",
]
