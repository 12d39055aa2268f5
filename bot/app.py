"""The HTTP application of `signoff serve`: console, JSON API, webhooks and Slack."""

from __future__ import annotations

import secrets
from typing import Literal

from aiohttp import web
from pydantic import SecretStr

from adapters.web import ApiToken, TokenAuth, add_api_routes, add_console_routes, body_deadline
from adapters.webhook import CallbackNotifier, HookConfig, add_hook_routes
from bot.notifiers import NOTIFIERS_KEY
from bot.settings import Settings
from runtime import ConfigurationError, Runtime
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
                groups=frozenset(entry.groups),
            )
        )
    return tokens


def build_app(
    settings: Settings,
    runtime: Runtime,
    worker: Worker,
    operator_token: str,
    *,
    cookie_secret: bytes | None = None,
) -> web.Application:
    """The aiohttp application: console, JSON API and webhooks (health is added later).

    Args:
        settings: The settings.
        runtime: The runtime the edges drive.
        worker: Woken when a run became ready.
        operator_token: The built-in operator's sign-in token.
        cookie_secret: The key signing console cookies (None: ``SIGNOFF_COOKIE_SECRET``,
            else a random one for this process; see `bot.console_secrets`).

    Raises:
        ConfigurationError: A hook names an agent that is not loaded, or another bad value.
    """
    app = web.Application(client_max_size=1024 * 1024)
    auth = TokenAuth(api_tokens(settings, operator_token))
    if cookie_secret is None:
        cookie_secret = (
            settings.cookie_secret.get_secret_value().encode()
            if settings.cookie_secret is not None
            else secrets.token_bytes(32)
        )
    hooks = hook_configs(settings)
    # These edges start runs and apply decisions themselves: they receive nothing.
    add_api_routes(app, runtime, auth, worker.wake_runs)
    add_console_routes(
        app,
        runtime,
        auth,
        worker.wake_runs,
        cookie_secret=cookie_secret,
        secure_cookies=settings.secure_cookies,
    )
    add_hook_routes(
        app,
        runtime,
        hooks,
        worker.wake_runs,
        max_queued=settings.max_queued_runs or None,
        body_timeout=settings.http_body_timeout_seconds,
    )
    notifiers: dict[str, Notifier] = {"callback": CallbackNotifier(hooks, clock=runtime.clock)}
    if settings.slack_mode != "off":
        notifiers["slack"] = add_slack(app, settings, runtime, worker)
    app[NOTIFIERS_KEY] = notifiers
    # Innermost, after the API's own error middleware; webhooks time their own reads.
    app.middlewares.append(body_deadline(settings.http_body_timeout_seconds, skip=("/hooks/",)))
    return app


def add_slack(
    app: web.Application, settings: Settings, runtime: Runtime, worker: Worker
) -> Notifier:
    """Mount the Slack edge (``SIGNOFF_SLACK_MODE`` http or socket); return its notifier.

    HTTP mode serves ``POST /slack/events``. Socket Mode connects when the server starts
    and disconnects when it begins to shut down (aiohttp's startup / shutdown signals).

    Raises:
        ConfigurationError: The ``slack`` extra is not installed.
    """
    try:
        from adapters.slack import (
            SlackConfig,
            SlackNotifier,
            SlackSocketMode,
            add_slack_routes,
            build_slack_app,
        )
    except ImportError as exc:
        raise ConfigurationError(
            f"SIGNOFF_SLACK_MODE={settings.slack_mode} needs the Slack libraries: "
            f"install the slack extra, pip install -e '.[slack]' ({exc})"
        ) from exc

    def secret(value: SecretStr | None) -> str:
        return value.get_secret_value() if value is not None else ""

    mode: Literal["http", "socket"] = "socket" if settings.slack_mode == "socket" else "http"
    config = SlackConfig(
        bot_token=secret(settings.slack_bot_token),
        signing_secret=secret(settings.slack_signing_secret),
        app_token=secret(settings.slack_app_token) or None,
        mode=mode,
        api_base_url=settings.slack_api_base_url,
        command=settings.slack_command,
        default_agent=settings.slack_default_agent,
        approver_groups={k: tuple(v) for k, v in settings.slack_approver_groups.items()},
    )
    if config.default_agent is not None and config.default_agent not in runtime.agents:
        raise ConfigurationError(
            f"SIGNOFF_SLACK_DEFAULT_AGENT: no agent named {config.default_agent!r} "
            f"(loaded: {', '.join(sorted(runtime.agents)) or 'none'})"
        )
    bolt = build_slack_app(runtime, config, worker.wake)
    if mode == "http":
        add_slack_routes(app, bolt, signing_secret=config.signing_secret)
    else:
        socket = SlackSocketMode(bolt, config.app_token or "")

        async def connect(_app: web.Application) -> None:
            await socket.start()

        async def disconnect(_app: web.Application) -> None:
            await socket.stop()

        app.on_startup.append(connect)
        app.on_shutdown.append(disconnect)
    return SlackNotifier(bolt.client, groups=config.approver_groups)
