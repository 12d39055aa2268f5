"""The HTTP application of `signoff serve`: console, JSON API and webhooks."""

from __future__ import annotations

import secrets

from aiohttp import web

from adapters.web import ApiToken, TokenAuth, add_api_routes, add_console_routes
from adapters.webhook import CallbackNotifier, HookConfig, add_hook_routes
from bot.notifiers import NOTIFIERS_KEY
from bot.settings import Settings
from runtime import Runtime
from runtime.outbox import Notifier
from runtime.worker import Worker


def hook_configs(settings: Settings) -> dict[str, HookConfig]:
    """The webhooks of ``SIGNOFF_HOOKS`` as adapter configurations.

    Raises:
        ConfigurationError: A hook is invalid; the message names it.
    """
    hooks = {}
    for name, hook in settings.hooks.items():
        hooks[name] = HookConfig(
            name=name,
            secret=hook.secret.get_secret_value(),
            agent=hook.agent,
            input_template=hook.input_template,
            approvals=dict(hook.approvals),
            requester=hook.requester,
            callback_url=hook.callback_url,
            callback_hosts=tuple(hook.callback_hosts),
            max_body_bytes=hook.max_body_bytes,
        )
    return hooks


def api_tokens(settings: Settings, operator_token: str) -> list[ApiToken]:
    """The operator token plus ``SIGNOFF_API_TOKENS``, as adapter tokens."""
    tokens = [ApiToken(operator_token, "operator", operator=True, name="Operator")]
    for entry in settings.api_tokens:
        tokens.append(
            ApiToken(
                entry.token.get_secret_value(),
                entry.actor,
                operator=entry.operator,
                name=entry.name,
            )
        )
    return tokens


def build_app(
    settings: Settings, runtime: Runtime, worker: Worker, operator_token: str
) -> web.Application:
    """The aiohttp application: console, JSON API and webhooks (health is added later).

    Raises:
        ConfigurationError: A hook names an agent that is not loaded, or another bad value.
    """
    app = web.Application(client_max_size=1024 * 1024)
    auth = TokenAuth(api_tokens(settings, operator_token))
    cookie_secret = (
        settings.cookie_secret.get_secret_value().encode()
        if settings.cookie_secret is not None
        else secrets.token_bytes(32)
    )
    hooks = hook_configs(settings)
    add_api_routes(app, runtime, auth, worker.wake)
    add_console_routes(
        app,
        runtime,
        auth,
        worker.wake,
        cookie_secret=cookie_secret,
        secure_cookies=settings.secure_cookies,
    )
    add_hook_routes(app, runtime, hooks, worker.wake)
    notifiers: dict[str, Notifier] = {"callback": CallbackNotifier(hooks, clock=runtime.clock)}
    app[NOTIFIERS_KEY] = notifiers
    return app
