"""The HTTP application of `signoff serve`: console, JSON API, webhooks and Slack."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from aiohttp import web
from pydantic import SecretStr

from adapters.claude_code.prompt_route import add_lazy_permission_prompt_routes
from adapters.claude_code.resume import ResumeConfig
from adapters.claude_code.route import add_claude_code_route
from adapters.web import ApiToken, TokenAuth, add_api_routes, add_console_routes, body_deadline
from adapters.web.approval_models import approval_body
from adapters.web.approvals import add_approval_routes
from adapters.web.audit import add_audit_route
from adapters.web.decision_tokens import DEFAULT_ISSUER, DecisionSigner, add_jwks_route
from adapters.web.live import LiveText, add_live_routes
from adapters.web.mcp_signin import SignInFlow, add_mcp_signin_routes
from adapters.web.oidc import OidcConfig, OidcVerifier, invalid_token_challenge, keep_keys_fresh
from adapters.web.openapi import add_openapi_route
from adapters.web.sso import CALLBACK_PATH, SsoClient, SsoConfig
from adapters.webhook import CallbackNotifier, HookConfig, add_hook_routes
from adapters.webhook.approval_callback import (
    ApprovalCallbackNotifier,
    ApprovalCallbacks,
    RenderApproval,
)
from bot.settings import Settings
from runtime import ConfigurationError, Runtime
from runtime.edges import APPROVAL_CALLBACK
from runtime.services.audit import AuditLog
from runtime.services.delivery import Notifier
from runtime.worker import Worker

if TYPE_CHECKING:  # the Slack libraries are an optional extra, imported when Slack is on
    from slack_bolt.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    from adapters.slack import ChannelLimiter, SlackConfig


def approval_callbacks(settings: Settings) -> ApprovalCallbacks:
    """Whether and where external approvals may ask for a callback
    (``SIGNOFF_APPROVAL_CALLBACK_SECRET``, ``SIGNOFF_APPROVAL_CALLBACK_HOSTS``)."""
    secret = settings.approval_callback_secret
    return ApprovalCallbacks(
        secret=secret.get_secret_value() if secret is not None else None,
        hosts=tuple(settings.approval_callback_hosts),
    )


def approval_renderer(runtime: Runtime, signer: DecisionSigner) -> RenderApproval:
    """The body of an approval's callback: the approval as the API answers it, decision
    token included, secret arguments masked (a callback may be logged or forwarded)."""

    async def render(approval_id: str) -> dict[str, Any]:
        approval = await runtime.approval(approval_id, viewer=None)
        return approval_body(approval, reveal_secrets=False, signer=signer)

    return render


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
                on_behalf_of=tuple(entry.on_behalf_of),
                auditor=entry.auditor,
            )
        )
    return tokens


def oidc_verifier(settings: Settings) -> OidcVerifier | None:
    """The verifier of JWT access tokens (``SIGNOFF_OIDC_*``), or None without an issuer."""
    if settings.oidc_issuer is None or settings.oidc_audience is None:
        return None
    config = OidcConfig(
        issuer=settings.oidc_issuer,
        audience=settings.oidc_audience,
        jwks_url=settings.oidc_jwks_url,
        user_claim=settings.oidc_user_claim,
        groups_claim=settings.oidc_groups_claim,
        operator_groups=frozenset(settings.oidc_operator_groups),
        auditor_groups=frozenset(settings.oidc_auditor_groups),
        algorithms=tuple(settings.oidc_algorithms),
    )
    return OidcVerifier(config)


def sso_client(settings: Settings) -> SsoClient | None:
    """The console's single sign-on (``SIGNOFF_OIDC_CLIENT_ID``), or None without it."""
    if (
        settings.oidc_issuer is None
        or settings.oidc_client_id is None
        or settings.public_url is None
    ):
        return None
    secret = settings.oidc_client_secret
    return SsoClient(
        SsoConfig(
            issuer=settings.oidc_issuer,
            client_id=settings.oidc_client_id,
            redirect_uri=settings.public_url + CALLBACK_PATH,
            client_secret=secret.get_secret_value() if secret is not None else None,
            scopes=tuple(settings.oidc_scopes),
            jwks_url=settings.oidc_jwks_url,
            user_claim=settings.oidc_user_claim,
            groups_claim=settings.oidc_groups_claim,
            operator_groups=frozenset(settings.oidc_operator_groups),
            algorithms=tuple(settings.oidc_algorithms),
            label=settings.oidc_provider_name,
        )
    )


def decision_signer(settings: Settings, cookie_secret: bytes) -> DecisionSigner:
    """The signer of decision tokens: ``SIGNOFF_SIGNING_KEY``, else a key derived from
    the cookie secret (the same on every replica sharing it, and across restarts).

    Raises:
        ConfigurationError: ``SIGNOFF_SIGNING_KEY`` is not an Ed25519 private key.
    """
    issuer = settings.public_url or DEFAULT_ISSUER
    ttl = settings.decision_token_ttl_seconds
    if settings.signing_key is not None:
        pem = settings.signing_key.get_secret_value()
        return DecisionSigner.from_pem(pem, issuer=issuer, ttl_seconds=ttl)
    return DecisionSigner.derived(cookie_secret, issuer=issuer, ttl_seconds=ttl)


def _may_act_for(auth: TokenAuth) -> Callable[[web.Request, str], bool]:
    """Whether a request's bearer token may name a user as its requester."""

    def check(request: web.Request, user_id: str) -> bool:
        token = auth.bearer_token(request)
        return token is not None and token.may_act_for(user_id)

    return check


@dataclass
class SlackEdge:
    """The mounted Slack edge: its bolt app and the notifier of ``slack`` outbox items."""

    bolt: AsyncApp
    notifier: Notifier


@dataclass
class Web:
    """The HTTP application and the notifiers of the edges mounted on it.

    Attributes:
        app: Console, JSON API, webhooks and (when on) Slack's routes.
        notifiers: Notifier per platform name (``callback``, ``slack`` when on).
        slack: The Slack edge, when it is on.
        signer: The signer of decision tokens (see `decision_signer`).
        auth: Who the API lets in.
    """

    app: web.Application
    notifiers: dict[str, Notifier]
    slack: SlackEdge | None = None
    signer: DecisionSigner | None = None
    auth: TokenAuth | None = None


def build_web(
    settings: Settings,
    runtime: Runtime,
    worker: Worker,
    operator_token: str,
    *,
    cookie_secret: bytes | None = None,
    auth: TokenAuth | None = None,
    slack_config: SlackConfig | None = None,
    slack_client: AsyncWebClient | None = None,
    slack_limiter: ChannelLimiter | None = None,
    resumes: Mapping[str, ResumeConfig] | None = None,
    mcp_sign_ins: SignInFlow | None = None,
    live: LiveText | None = None,
    acked: Callable[[str, float], None] | None = None,
) -> Web:
    """The aiohttp application (console, JSON API, webhooks, Slack) and its notifiers.

    Health routes are added later (`bot.health.add_health_routes`).

    Args:
        settings: The settings.
        runtime: The runtime the edges drive.
        worker: Woken when a run became ready.
        operator_token: The built-in operator's sign-in token.
        cookie_secret: The key signing console cookies (None: ``SIGNOFF_COOKIE_SECRET``,
            else a random one for this process; see `bot.console_secrets`).
        auth: Who the API and console let in (default: the operator token,
            ``SIGNOFF_API_TOKENS`` and the JWTs of ``SIGNOFF_OIDC_ISSUER``).
        slack_config: The Slack edge's configuration (default: from the
            ``SIGNOFF_SLACK_*`` settings, when ``SIGNOFF_SLACK_MODE`` is not ``off``);
            given, the edge is mounted whatever the mode setting says.
        slack_client: Slack's Web API client (default: one for the configuration).
        slack_limiter: Spacing of Slack messages to one channel (default: one a second).
        resumes: How external agents resume deferred Claude Code sessions, by agent
            name (the agents file's ``resume`` tables).
        mcp_sign_ins: The sign-ins of MCP servers that use OAuth (the console's MCP
            sign-in page; None: no such servers).
        live: This process's live text of the answers being written: run pages follow
            it (``GET /runs/{run_id}/stream``); None: they do not.
        acked: Told how long each Slack Socket Mode envelope took to acknowledge.

    Raises:
        ConfigurationError: A hook names an agent that is not loaded, or another bad value.
    """
    app = web.Application(client_max_size=1024 * 1024)
    if auth is None:
        try:
            auth = TokenAuth(api_tokens(settings, operator_token), jwt=oidc_verifier(settings))
        except ValueError as exc:
            raise ConfigurationError(f"SIGNOFF_API_TOKENS: {exc}") from None
    if auth.jwt is not None:
        # Keys fetched before the server answers; the invalid_token challenge outermost.
        app.cleanup_ctx.append(keep_keys_fresh(auth.jwt))
        app.middlewares.insert(0, invalid_token_challenge)
    if cookie_secret is None:
        cookie_secret = (
            settings.cookie_secret.get_secret_value().encode()
            if settings.cookie_secret is not None
            else secrets.token_bytes(32)
        )
    hooks = hook_configs(settings)
    signer = decision_signer(settings, cookie_secret)
    add_jwks_route(app, signer)
    # These edges start runs and apply decisions themselves: they receive nothing.
    add_api_routes(app, runtime, auth, worker.wake_runs)
    callbacks = approval_callbacks(settings)
    add_approval_routes(
        app, runtime, auth, worker.wake_runs, signer=signer, check_callback=callbacks.check
    )
    add_claude_code_route(
        app,
        runtime,
        authenticate=auth.bearer,
        may_act_for=_may_act_for(auth),
        on_change=worker.wake_runs,
        resumes=resumes,
    )
    add_audit_route(app, auth, AuditLog(runtime.store).page)
    add_openapi_route(app)
    from importlib.util import find_spec

    if find_spec("mcp") is not None:  # Claude Code's permission prompt tool: the mcp extra
        # Started at its first request: a server nobody asks there never imports the SDK.
        add_lazy_permission_prompt_routes(
            app,
            runtime,
            authenticate=auth.bearer,
            may_act_for=_may_act_for(auth),
            on_change=worker.wake_runs,
        )
    sso = sso_client(settings)
    if sso is not None:
        app.cleanup_ctx.append(sso.lifetime)
    console = add_console_routes(
        app,
        runtime,
        auth,
        worker.wake_runs,
        cookie_secret=cookie_secret,
        secure_cookies=settings.secure_cookies,
        sso=sso,
        token_sign_in=settings.console_token_sign_in,
    )
    if mcp_sign_ins is not None:
        add_mcp_signin_routes(app, console, mcp_sign_ins)
    if live is not None:
        add_live_routes(app, runtime, console, live)
        console.live_text = True
    add_hook_routes(
        app,
        runtime,
        hooks,
        worker.wake_runs,
        max_queued=settings.max_queued_runs or None,
        body_timeout=settings.http_body_timeout_seconds,
    )
    notifiers: dict[str, Notifier] = {
        "callback": CallbackNotifier(hooks, clock=runtime.clock),
        APPROVAL_CALLBACK: ApprovalCallbackNotifier(
            callbacks, approval_renderer(runtime, signer), clock=runtime.clock
        ),
    }
    slack = None
    if slack_config is not None or settings.slack_mode != "off":
        slack = add_slack(
            app,
            settings,
            runtime,
            worker,
            config=slack_config,
            client=slack_client,
            limiter=slack_limiter,
            acked=acked,
        )
        notifiers["slack"] = slack.notifier
    # Innermost, after the API's own error middleware; webhooks time their own reads.
    app.middlewares.append(body_deadline(settings.http_body_timeout_seconds, skip=("/hooks/",)))
    return Web(app, notifiers, slack, signer, auth)


def build_app(
    settings: Settings,
    runtime: Runtime,
    worker: Worker,
    operator_token: str,
    *,
    cookie_secret: bytes | None = None,
) -> web.Application:
    """`build_web`'s application alone (its notifiers are not delivered to).

    Raises:
        ConfigurationError: A hook names an agent that is not loaded, or another bad value.
    """
    return build_web(settings, runtime, worker, operator_token, cookie_secret=cookie_secret).app


def slack_config_of(settings: Settings) -> SlackConfig:
    """The Slack edge's configuration from the ``SIGNOFF_SLACK_*`` settings.

    Raises:
        ConfigurationError: The ``slack`` extra is not installed.
    """
    try:
        from adapters.slack import SlackConfig
    except ImportError as exc:
        raise _no_slack(settings, exc) from exc

    def secret(value: SecretStr | None) -> str:
        return value.get_secret_value() if value is not None else ""

    if settings.slack_link_by_email and settings.oidc_user_claim != "email":
        raise ConfigurationError(
            "SIGNOFF_SLACK_LINK_BY_EMAIL links Slack users to oidc:<e-mail>: it needs "
            f"SIGNOFF_OIDC_USER_CLAIM=email (not {settings.oidc_user_claim!r})"
        )
    mode: Literal["http", "socket"] = "socket" if settings.slack_mode == "socket" else "http"
    return SlackConfig(
        bot_token=secret(settings.slack_bot_token),
        signing_secret=secret(settings.slack_signing_secret),
        app_token=secret(settings.slack_app_token) or None,
        mode=mode,
        api_base_url=settings.slack_api_base_url,
        command=settings.slack_command,
        default_agent=settings.slack_default_agent,
        approver_groups={k: tuple(v) for k, v in settings.slack_approver_groups.items()},
        link_by_email=settings.slack_link_by_email,
        console_url=settings.public_url,
    )


def _no_slack(settings: Settings, exc: ImportError) -> ConfigurationError:
    return ConfigurationError(
        f"SIGNOFF_SLACK_MODE={settings.slack_mode} needs the Slack libraries: "
        f"install the slack extra, pip install -e '.[slack]' ({exc})"
    )


def add_slack(
    app: web.Application,
    settings: Settings,
    runtime: Runtime,
    worker: Worker,
    *,
    config: SlackConfig | None = None,
    client: AsyncWebClient | None = None,
    limiter: ChannelLimiter | None = None,
    acked: Callable[[str, float], None] | None = None,
) -> SlackEdge:
    """Mount the Slack edge (``SIGNOFF_SLACK_MODE`` http or socket).

    HTTP mode serves ``POST /slack/events``. Socket Mode connects when the server starts
    and disconnects when it begins to shut down (aiohttp's startup / shutdown signals).

    Args:
        app: Where to mount it.
        settings: The settings.
        runtime: The runtime the edge drives.
        worker: Woken when a run was started or a click stored.
        config: The edge's configuration (default: `slack_config_of` the settings).
        client: Slack's Web API client (default: one for the configuration).
        limiter: Spacing of messages to one channel (default: one a second).
        acked: Told how long each Socket Mode envelope took to acknowledge.

    Raises:
        ConfigurationError: The ``slack`` extra is not installed, or the default agent
            is not loaded.
    """
    try:
        from adapters.slack import (
            SlackNotifier,
            SlackSocketMode,
            add_slack_routes,
            build_slack_app,
        )
    except ImportError as exc:
        raise _no_slack(settings, exc) from exc

    if config is None:
        config = slack_config_of(settings)
    if config.default_agent is not None and config.default_agent not in runtime.agents:
        raise ConfigurationError(
            f"SIGNOFF_SLACK_DEFAULT_AGENT: no agent named {config.default_agent!r} "
            f"(loaded: {', '.join(sorted(runtime.agents)) or 'none'})"
        )
    bolt = build_slack_app(runtime, config, worker.wake, client=client)
    if config.mode == "http":
        add_slack_routes(app, bolt, signing_secret=config.signing_secret)
    else:
        socket = SlackSocketMode(bolt, config.app_token or "", acked=acked)

        async def connect(_app: web.Application) -> None:
            await socket.start()

        async def disconnect(_app: web.Application) -> None:
            await socket.stop()

        app.on_startup.append(connect)
        app.on_shutdown.append(disconnect)
    notifier = SlackNotifier(
        bolt.client, groups=config.approver_groups, limiter=limiter, console_url=config.console_url
    )
    return SlackEdge(bolt, notifier)
