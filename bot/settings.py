"""Settings of the signoff process, from ``SIGNOFF_*`` environment variables and a TOML file.

Precedence, highest first:

1. values passed in code (the CLI's ``--database-url`` option uses this),
2. environment variables ``SIGNOFF_<NAME>`` (case-insensitive),
3. the TOML file given with ``--config PATH`` (keys are the names without the prefix,
   e.g. ``database_url = "sqlite+aiosqlite:///var/lib/signoff/signoff.db"``),
4. the defaults below.

Invalid values stop the process with a `runtime.ConfigurationError` whose message names
the setting, e.g. ``SIGNOFF_PORT: Input should be a valid integer``.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from adapters.models.specs import canonical
from bot.event_loop import EventLoopChoice
from runtime import ConfigurationError

ENV_PREFIX = "SIGNOFF_"
DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///signoff.db"
"""A SQLite file named ``signoff.db`` in the current working directory."""
DEFAULT_APP = "examples:demo_agents"
"""The bundled example agents (refunds, deploys, oncall)."""

# Settings whose values never appear in error messages (a URL may carry a password).
_SENSITIVE = frozenset(
    {
        "database_url",
        "database_listen_url",
        "operator_token",
        "api_tokens",
        "hooks",
        "approval_callback_secret",
        "cookie_secret",
        "oidc_client_secret",
        "signing_key",
        "slack_bot_token",
        "slack_signing_secret",
        "slack_app_token",
        "discord_bot_token",
        "openai_api_key",
        "anthropic_api_key",
        "mcp_headers",
        "secrets_key",
    }
)
DEFAULT_SLACK_API_BASE_URL = "https://slack.com/api/"
DEFAULT_DISCORD_API_BASE_URL = "https://discord.com/api/v10"
"""Discord's REST API, version 10 (what discord.py 2.x speaks)."""
DEFAULT_DISCORD_GATEWAY_URL = "wss://gateway.discord.gg/"

# As in adapters.web.oidc, which is not imported here (it loads the whole web edge).
ACTOR_PREFIX = "oidc:"
DEFAULT_ALGORITHMS = ("RS256", "ES256", "EdDSA")
ALLOWED_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)

# The TOML values of the `load_settings` call in progress; read by `_FileSource`.
_file_values: ContextVar[Mapping[str, Any] | None] = ContextVar("signoff_file_values", default=None)


class ApiTokenSetting(BaseModel):
    """One bearer token of the JSON API and the console, and who it stands for."""

    model_config = ConfigDict(extra="forbid")

    token: SecretStr = Field(min_length=16)
    actor: str = Field(min_length=1)
    operator: bool = False
    name: str | None = None
    groups: list[str] = Field(default_factory=list)
    on_behalf_of: list[str] = Field(default_factory=list)
    auditor: bool = False


class HookSetting(BaseModel):
    """One signed webhook served at ``POST /hooks/<name>``."""

    model_config = ConfigDict(extra="forbid")

    secret: SecretStr = Field(min_length=16)
    agent: str = Field(min_length=1)
    input_template: str = Field(min_length=1)
    approvals: dict[str, Any] = Field(default_factory=lambda: {"platform": "console"})
    requester: str | None = None
    callback_url: str | None = None
    callback_hosts: list[str] = Field(default_factory=list)
    max_body_bytes: int = Field(default=64 * 1024, gt=0)


class PriceSetting(BaseModel):
    """What one model charges per million tokens (any one currency, say USD)."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)


class Settings(BaseSettings):
    """Everything a signoff process can be configured with.

    Attributes:
        database_url: SQLAlchemy URL of the store. The default is a SQLite file
            ``signoff.db`` relative to the working directory; ``sqlite://`` URLs get the
            aiosqlite driver automatically.
        database_pool_size: PostgreSQL: connections each process keeps open for its
            transactions, once opened (they are opened as transactions need them).
        database_max_overflow: PostgreSQL: connections opened beyond the pool size when
            every one is busy (closed again when returned).
        database_pool_timeout_seconds: PostgreSQL: how long a transaction waits for a
            free connection before it fails.
        database_pool_recycle_seconds: PostgreSQL: a connection older than this is
            opened anew when next taken (``0``: never).
        database_pooler: PostgreSQL: ``none``, or ``transaction`` when
            ``database_url`` goes through a pooler in transaction mode (PgBouncer's
            ``pool_mode = transaction``).
        database_listen_url: PostgreSQL: where the connection listening for other
            replicas' wake-ups goes (default: ``database_url``); required with
            ``database_pooler = "transaction"``.
        app: ``package.module:attr`` naming the agents to load: a list or tuple of
            `runtime.Agent`, or a zero-argument callable returning one. Its default (the
            bundled examples) is loaded only when no agents file is set.
        agents: A TOML agents file (agents, their models, Python tools, MCP servers and
            per-tool rules), loaded besides ``app``.
        external_agents: Whether an external approval (``POST /api/approvals``) may name
            an agent the agents file does not declare: ``any`` (every tool asks, the
            requester decides, cards in the console) or ``declared`` (refused, 403).
        mcp_headers: HTTP headers by MCP server name (``{"<server>": {"Authorization":
            "Bearer ..."}}``), sent to the Streamable HTTP servers of the agents file.
        mcp_question_seconds: How long the MCP gateway waits for its calling client to
            answer an upstream server's question (elicitation) before it tells the
            server ``cancel``.
        sqlite_busy_timeout_ms: How long a SQLite connection waits for another
            process's write lock before failing.
        sqlite_synchronous: ``full`` (every commit survives a power loss) or ``normal``.
        lease_seconds: How long a worker's claim on a run lasts without a heartbeat;
            after that another process may recover the run.
        bind_host: Interface the HTTP server binds to.
        port: TCP port of the HTTP server (0 picks a free one).
        log_level: ``DEBUG``, ``INFO``, ``WARNING``, ``ERROR`` or ``CRITICAL``.
        workers: Runs `signoff serve` drives at the same time.
        role: What `signoff serve` runs: ``all`` (everything in one process), ``web``
            (the HTTP edges and Slack Socket Mode: they store starts and decisions and
            drive nothing) or ``worker`` (drives runs, applies received clicks,
            delivers the outbox, expires tickets, recovers runs, holds the Discord
            gateway; serves only ``/healthz``, ``/readyz`` and ``/metrics``).
            ``signoff serve --role`` wins over it.
        event_loop: The event loop `signoff serve` runs on: ``auto`` (uvloop when
            installed, else asyncio's), ``uvloop`` or ``asyncio``.
        max_queued_runs: Webhooks answer 503 with ``Retry-After`` while this many runs
            wait for a worker (0: never).
        shutdown_grace_seconds: On SIGTERM, how long running tools may take to settle.
        http_idle_timeout_seconds: An HTTP connection that sends no complete request for
            this long (a new one, or an idle keep-alive one) is closed.
        http_body_timeout_seconds: A request body that has not fully arrived after this
            long is answered 408 and the connection closed.
        operator_token: Sign-in token of the built-in operator (console and API). Unset:
            made up once and kept next to a SQLite file (`bot.console_secrets`), and
            printed at start-up.
        api_tokens: More tokens, each standing for a user id (JSON list of
            ``{"token", "actor", "operator", "name", "groups", "on_behalf_of",
            "auditor"}``;
            ``groups`` are approver groups the user belongs to; ``on_behalf_of`` lists the
            user ids, or glob patterns, an approval request may name as its requester;
            ``"auditor": true`` lets it read every run's events, ``GET /api/audit``).
        hooks: Signed webhooks by name (JSON object of ``{"secret", "agent",
            "input_template", "approvals", "requester", "callback_url",
            "callback_hosts", "max_body_bytes"}``).
        approval_callback_secret: The Standard Webhooks secret (``whsec_`` and base64)
            that signs the callbacks of external approvals. Unset: an approval request
            that asks for a callback is refused.
        approval_callback_hosts: The hosts the callbacks of external approvals may go
            to (JSON list); a request naming another host is refused.
        secrets_key: Key sealing secrets kept in the database: the tokens of MCP servers
            signed in to with OAuth (a Fernet key, or any secret of 32 characters or
            more). Every replica needs the same key.
        cookie_secret: Key signing console session cookies (at least 32 characters).
            Unset: made up once and kept with the operator token (in memory: random per
            process, so sessions end with a restart).
        secure_cookies: Mark console cookies ``Secure`` (serve behind HTTPS).
        signing_key: The Ed25519 private key (PEM) signing decision tokens. Unset:
            derived from the cookie secret, so replicas sharing it share the key.
        decision_token_ttl_seconds: How long a decision token is valid after the decision.
        public_url: The base URL signoff is reached at from outside (e.g.
            ``https://signoff.example.com``); the ``iss`` of decision tokens. Unset:
            ``signoff``.
        slack_bot_token: The Slack app's bot token (``xoxb-...``).
        slack_signing_secret: The Slack app's signing secret (HTTP mode).
        slack_app_token: The Slack app-level token (``xapp-...``, Socket Mode).
        slack_api_base_url: Base URL of Slack's Web API (GovSlack, a test fake).
        slack_command: The slash command that starts runs, e.g. ``/signoff``.
        slack_default_agent: The agent a Slack request runs when it names none.
        slack_approver_groups: ``{"<group>": ["S...", "C...", ...]}``: members of those
            Slack user groups or channels match approver entries ``group:<group>``.
        slack_mode: ``off`` (default), ``http`` (Slack calls ``POST /slack/events``; needs
            the bot token and signing secret) or ``socket`` (Socket Mode; needs the bot
            token and app token).
        discord_bot_token: The Discord bot's token; unset, Discord is off.
        discord_api_base_url: Discord's REST base, version included.
        discord_gateway_url: Discord's gateway websocket.
        discord_sync: Where ``/agent`` is registered: ``off``, ``global`` or ``guild``.
        discord_guild_id: The server of ``discord_sync=guild``.
        discord_approver_roles: ``{"<group>": ["<role id>", ...]}``: members of those roles
            match approver entries ``group:<group>``.
        discord_console_url: Public console URL, linked for forms too big for Discord.
        discord_guild_ready_timeout: Seconds to wait for servers before ready.
        discord_ready_timeout: Seconds start-up waits for the gateway.
        discord_ack_budget: Seconds of work before an interaction answer is deferred.
        model: ``<provider>:<model>`` (``openai:gpt-4.1-mini``,
            ``anthropic:claude-sonnet-4-5``): every loaded agent runs on it instead of
            its own model. Unset: the agents keep theirs.
        openai_api_key: Key of ``openai:`` models (falls back to ``OPENAI_API_KEY``).
        openai_base_url: Another OpenAI-compatible endpoint (Azure, vLLM, Ollama ...).
        anthropic_api_key: Key of ``anthropic:`` models (falls back to
            ``ANTHROPIC_API_KEY``).
        anthropic_base_url: Another Anthropic endpoint (a gateway).
        model_timeout_seconds: Seconds one HTTP attempt of a model call may take.
        model_max_retries: Retries of 408/409/429/5xx, timeouts and dropped connections
            by the provider's SDK (with backoff, honouring ``Retry-After``).
        model_max_tokens: Output token limit per answer (unset: OpenAI-compatible
            servers use their default, Anthropic 4096).
        model_prices: ``{"<provider>:<model>": {"input", "output", "cached_input",
            "cache_write"}}`` per million tokens, to record each model call's cost.
        stream_text: Stream provider models' answers and show their text on the
            console's run page while it is written (off: every model call waits for
            the whole answer, and the page shows it once the turn is recorded).
        identities_file: A TOML file linking people's ids across edges: each key a
            person (``oidc:<claim>`` or a name), each value the ids that are that person
            (Slack and Discord user ids, ``oidc:`` identities).
        identity_unlinked: ``allow`` (default: a chat user linked to nobody decides
            under their chat id alone) or ``refuse`` (Slack and Discord users must be
            linked to a person to decide).
        slack_link_by_email: Link a Slack user who acts to ``oidc:<e-mail>`` by the
            verified e-mail of their Slack profile (``users.info``; needs the
            ``users:read.email`` scope and ``SIGNOFF_OIDC_USER_CLAIM=email``).
        auto_migrate: Every command brings the schema up to date before using it (True),
            or only checks it (False: ``signoff migrate`` runs as its own step, e.g. a
            deploy job).
        poll_seconds: How often `signoff serve` looks for ready runs and due
            notifications when nothing woke it (on PostgreSQL other replicas' commits do).
        poll_seconds_listening: The same interval on PostgreSQL while the process
            listens for the other replicas' commits (``LISTEN``): a safety net, since
            their wake-ups bring the work; back to `poll_seconds` at once when the
            listening connection is lost. Never shorter than `poll_seconds`.
        outbox_lease_seconds: How long a process's claim on a notification it is
            delivering lasts; after that another replica may deliver it.
        discord_gateway_lease_seconds: How long the replica holding the Discord gateway
            keeps it without renewing; when it dies another replica takes over within
            about this time.
        metrics_interval_seconds: How often the replica holding the ``metrics`` lease
            reads the database-wide gauges of ``/metrics`` (the others export none).
        oidc_issuer: The OpenID Connect issuer whose JWT access tokens the API accepts
            besides the static tokens (its exact ``iss``). Unset: no JWTs.
        oidc_audience: The ``aud`` such a token must name (required with the issuer).
        oidc_jwks_url: Where the issuer's signing keys are. Unset: the ``jwks_uri`` of
            ``<issuer>/.well-known/openid-configuration``.
        oidc_user_claim: The claim naming the user; a JWT user's id is
            ``oidc:<value>``.
        oidc_groups_claim: The claim listing the user's groups (approver groups,
            matched by ``group:<name>``).
        oidc_operator_groups: Groups whose members are operators (a comma-separated or
            JSON list).
        oidc_auditor_groups: Groups whose members are auditors, who may read every
            run's events (``GET /api/audit``; a comma-separated or JSON list).
        oidc_algorithms: Signature algorithms accepted (asymmetric only; a
            comma-separated or JSON list).
        oidc_client_id: The console's client id at the issuer: set, the console offers
            single sign-on (Authorization Code flow with PKCE; needs the public URL,
            whose ``/login/sso/callback`` is the redirect URI).
        oidc_client_secret: The client's secret (unset: a public client, PKCE only).
        oidc_scopes: The scopes single sign-on asks for (must include ``openid``).
        oidc_provider_name: The name on the console's "Sign in with" button (default:
            the issuer's host).
        console_token_sign_in: Whether configured tokens sign in to the console (off:
            single sign-on only; the API still accepts them).
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        case_sensitive=False,
        extra="forbid",
        validate_default=True,
    )

    database_url: str = DEFAULT_DATABASE_URL
    app: str = DEFAULT_APP
    agents: Path | None = None
    external_agents: Literal["any", "declared"] = "any"
    mcp_headers: dict[str, dict[str, SecretStr]] = Field(default_factory=dict)
    mcp_question_seconds: float = Field(default=300.0, gt=0, le=86_400)
    sqlite_busy_timeout_ms: int = Field(default=750, ge=0, le=600_000)
    sqlite_synchronous: Literal["full", "normal"] = "full"
    database_pool_size: int = Field(default=15, ge=1, le=1000)
    database_max_overflow: int = Field(default=0, ge=0, le=1000)
    database_pool_timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    database_pool_recycle_seconds: int = Field(default=1800, ge=0)
    database_pooler: Literal["none", "transaction"] = "none"
    database_listen_url: str | None = Field(default=None, min_length=1)
    lease_seconds: float = Field(default=30.0, gt=0)
    bind_host: str = Field(default="127.0.0.1", min_length=1)
    port: int = Field(default=8080, ge=0, le=65535)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "WARNING"
    workers: int = Field(default=4, ge=1, le=256)
    role: Literal["all", "web", "worker"] = "all"
    event_loop: EventLoopChoice = "auto"
    max_queued_runs: int = Field(default=1000, ge=0)
    shutdown_grace_seconds: float = Field(default=10.0, ge=0)
    http_idle_timeout_seconds: float = Field(default=15.0, gt=0)
    http_body_timeout_seconds: float = Field(default=30.0, gt=0)
    operator_token: SecretStr | None = Field(default=None, min_length=16)
    api_tokens: list[ApiTokenSetting] = Field(default_factory=list)
    hooks: dict[str, HookSetting] = Field(default_factory=dict)
    approval_callback_secret: SecretStr | None = Field(default=None, min_length=1)
    approval_callback_hosts: list[str] = Field(default_factory=list)
    secrets_key: SecretStr | None = Field(default=None, min_length=32)
    cookie_secret: SecretStr | None = Field(default=None, min_length=32)
    secure_cookies: bool = False
    signing_key: SecretStr | None = Field(default=None, min_length=1)
    decision_token_ttl_seconds: int = Field(default=3600, ge=1, le=30 * 24 * 3600)
    public_url: str | None = Field(default=None, min_length=1)
    slack_bot_token: SecretStr | None = Field(default=None, min_length=1)
    slack_signing_secret: SecretStr | None = Field(default=None, min_length=1)
    slack_app_token: SecretStr | None = Field(default=None, min_length=1)
    slack_api_base_url: str = DEFAULT_SLACK_API_BASE_URL
    slack_command: str = "/signoff"
    slack_default_agent: str | None = Field(default=None, min_length=1)
    slack_approver_groups: dict[str, list[str]] = Field(default_factory=dict)
    # Last: its check reads the Slack credentials above.
    slack_mode: Literal["off", "http", "socket"] = "off"
    # The Discord settings after the token are checked only when it is set.
    discord_bot_token: SecretStr | None = Field(default=None, min_length=1)
    discord_api_base_url: str = DEFAULT_DISCORD_API_BASE_URL
    discord_gateway_url: str = DEFAULT_DISCORD_GATEWAY_URL
    discord_sync: Literal["off", "global", "guild"] = "global"
    discord_guild_id: int | None = Field(default=None, gt=0)
    discord_approver_roles: dict[str, list[str]] = Field(default_factory=dict)
    discord_console_url: str | None = None
    discord_guild_ready_timeout: float = Field(default=2.0, ge=0)
    discord_ready_timeout: float = Field(default=30.0, gt=0)
    discord_ack_budget: float = Field(default=2.0, ge=0, le=2.8)
    model: str | None = Field(default=None, min_length=1)
    openai_api_key: SecretStr | None = Field(default=None, min_length=1)
    openai_base_url: str | None = Field(default=None, min_length=1)
    anthropic_api_key: SecretStr | None = Field(default=None, min_length=1)
    anthropic_base_url: str | None = Field(default=None, min_length=1)
    model_timeout_seconds: float = Field(default=60.0, gt=0)
    model_max_retries: int = Field(default=2, ge=0, le=10)
    model_max_tokens: int | None = Field(default=None, ge=1)
    model_prices: dict[str, PriceSetting] = Field(default_factory=dict)
    stream_text: bool = True
    identities_file: Path | None = None
    identity_unlinked: Literal["allow", "refuse"] = "allow"
    slack_link_by_email: bool = False

    @field_validator("model")
    @classmethod
    def _model_spec(cls, value: str | None) -> str | None:
        return _spec(value) if value is not None else None

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        if value is not None and not value.strip().startswith(("https://", "http://")):
            raise ValueError("expected an http(s) URL such as https://signoff.example.com")
        return value.strip().rstrip("/") if value is not None else None

    @field_validator("openai_base_url", "anthropic_base_url")
    @classmethod
    def _model_url(cls, value: str | None) -> str | None:
        if value is not None and not value.strip().startswith(("https://", "http://")):
            raise ValueError("expected an http(s) URL such as http://localhost:11434/v1")
        return value.strip() if value is not None else None

    @field_validator("model_prices")
    @classmethod
    def _price_specs(cls, value: dict[str, PriceSetting]) -> dict[str, PriceSetting]:
        return {_spec(spec): price for spec, price in value.items()}

    # Several replicas on one database.
    auto_migrate: bool = True
    poll_seconds: float = Field(default=0.5, gt=0, le=300)
    poll_seconds_listening: float = Field(default=5.0, gt=0, le=300)
    outbox_lease_seconds: float = Field(default=60.0, gt=0)
    discord_gateway_lease_seconds: float = Field(default=15.0, gt=0)
    metrics_interval_seconds: float = Field(default=15.0, gt=0, le=3600)

    # JWT access tokens; the settings after the issuer are checked against it.
    oidc_issuer: str | None = Field(default=None, min_length=1)
    oidc_audience: str | None = Field(default=None, min_length=1)
    oidc_jwks_url: str | None = Field(default=None, min_length=1)
    oidc_user_claim: str = Field(default="sub", min_length=1)
    oidc_groups_claim: str = Field(default="groups", min_length=1)
    oidc_operator_groups: Annotated[list[str], NoDecode] = Field(default_factory=list)
    oidc_auditor_groups: Annotated[list[str], NoDecode] = Field(default_factory=list)
    oidc_algorithms: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_ALGORITHMS)
    )
    # Single sign-on for the console (the same issuer).
    oidc_client_id: str | None = Field(default=None, min_length=1)
    oidc_client_secret: SecretStr | None = Field(default=None, min_length=1)
    oidc_scopes: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["openid", "email", "profile"]
    )
    oidc_provider_name: str | None = Field(default=None, min_length=1)
    console_token_sign_in: bool = True

    @field_validator("oidc_client_id")
    @classmethod
    def _oidc_client_id(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None or "oidc_issuer" not in info.data:
            return value
        if info.data["oidc_issuer"] is None:
            raise ValueError("needs SIGNOFF_OIDC_ISSUER")
        if info.data.get("public_url") is None:
            raise ValueError(
                "needs SIGNOFF_PUBLIC_URL (the redirect URI is <public URL>/login/sso/callback)"
            )
        return value.strip()

    @field_validator("oidc_client_secret", "oidc_provider_name")
    @classmethod
    def _oidc_needs_client(cls, value: Any, info: ValidationInfo) -> Any:
        if value is not None and "oidc_client_id" in info.data and not info.data["oidc_client_id"]:
            raise ValueError("needs SIGNOFF_OIDC_CLIENT_ID")
        return value

    @field_validator("oidc_scopes", mode="before")
    @classmethod
    def _oidc_scope_list(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip().startswith("["):
            return value.replace(",", " ").split()
        return cls._comma_list(value)

    @field_validator("oidc_scopes")
    @classmethod
    def _oidc_scopes(cls, value: list[str]) -> list[str]:
        if "openid" not in value:
            raise ValueError("must include openid")
        return value

    @field_validator("console_token_sign_in")
    @classmethod
    def _console_sign_in(cls, value: bool, info: ValidationInfo) -> bool:
        if not value and "oidc_client_id" in info.data and not info.data["oidc_client_id"]:
            raise ValueError(
                "nobody could sign in to the console: set SIGNOFF_OIDC_CLIENT_ID for single "
                "sign-on, or keep token sign-in"
            )
        return value

    @field_validator("oidc_issuer", "oidc_jwks_url")
    @classmethod
    def _oidc_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if not _secure_or_local(value):
            raise ValueError(
                "expected an https:// URL such as https://idp.example.com (http:// only "
                "for localhost)"
            )
        return value

    @field_validator("oidc_audience")
    @classmethod
    def _oidc_audience(cls, value: str | None, info: ValidationInfo) -> str | None:
        if "oidc_issuer" not in info.data:
            return value  # the issuer failed its own check, reported on its own
        if info.data["oidc_issuer"] is not None and value is None:
            raise ValueError("required with SIGNOFF_OIDC_ISSUER (the aud the API accepts)")
        if info.data["oidc_issuer"] is None and value is not None:
            raise ValueError("needs SIGNOFF_OIDC_ISSUER")
        return value.strip() if value is not None else None

    @field_validator("oidc_jwks_url", "oidc_operator_groups", "oidc_auditor_groups")
    @classmethod
    def _oidc_needs_issuer(cls, value: Any, info: ValidationInfo) -> Any:
        if value and info.data.get("oidc_issuer") is None and "oidc_issuer" in info.data:
            raise ValueError("needs SIGNOFF_OIDC_ISSUER")
        return value

    @field_validator(
        "oidc_operator_groups", "oidc_auditor_groups", "oidc_algorithms", mode="before"
    )
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    return json.loads(text)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"not valid JSON ({exc.msg})") from None
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("oidc_algorithms")
    @classmethod
    def _oidc_algorithms(cls, value: list[str]) -> list[str]:
        wrong = [alg for alg in value if alg not in ALLOWED_ALGORITHMS]
        if wrong or not value:
            raise ValueError(
                f"expected some of {', '.join(sorted(ALLOWED_ALGORITHMS))} (never none or "
                f"HS*), got {', '.join(wrong) or 'none'}"
            )
        return value

    @field_validator("oidc_issuer")
    @classmethod
    def _oidc_actor_ids(cls, value: str | None, info: ValidationInfo) -> str | None:
        clash = [
            token.actor
            for token in info.data.get("api_tokens", [])
            if token.actor.startswith(ACTOR_PREFIX)
        ]
        if value is not None and clash:
            raise ValueError(
                f"SIGNOFF_API_TOKENS names {', '.join(clash)}: user ids starting with "
                f"{ACTOR_PREFIX!r} are those of JWT users"
            )
        return value

    @field_validator("database_url")
    @classmethod
    def _looks_like_url(cls, value: str) -> str:
        if "://" not in value:
            raise ValueError(
                "expected a database URL such as sqlite+aiosqlite:///signoff.db "
                "(for a file: sqlite+aiosqlite:///relative/path.db or "
                "sqlite+aiosqlite:////absolute/path.db)"
            )
        return value

    @field_validator("database_pooler", mode="before")
    @classmethod
    def _lower_pooler(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("database_pooler")
    @classmethod
    def _pooler_of_postgres(cls, value: str, info: ValidationInfo) -> str:
        url = info.data.get("database_url")
        if value != "none" and url is not None and _scheme(url) == "sqlite":
            raise ValueError("a pooler stands in front of PostgreSQL, not SQLite")
        return value

    @field_validator("database_listen_url")
    @classmethod
    def _listen_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        if "database_pooler" not in info.data or "database_url" not in info.data:
            return value  # reported on their own
        if value is None:
            if info.data["database_pooler"] == "transaction":
                raise ValueError(
                    "required with SIGNOFF_DATABASE_POOLER=transaction: LISTEN needs a "
                    "session of its own, so give a URL that reaches PostgreSQL directly "
                    "(or through a pooler in session mode)"
                )
            return None
        value = value.strip()
        if _scheme(value) not in ("postgresql", "postgres"):
            raise ValueError(
                "expected a PostgreSQL URL such as postgresql+asyncpg://user@db-host:5432/db"
            )
        from sqlalchemy.engine import make_url  # the store's; not loaded without a URL

        try:
            make_url(value)
        except Exception as exc:  # SQLAlchemy's ArgumentError, a bad port's ValueError
            raise ValueError(f"not a database URL ({type(exc).__name__})") from None
        if _scheme(info.data["database_url"]) == "sqlite":
            raise ValueError("only for PostgreSQL (SIGNOFF_DATABASE_URL is SQLite)")
        return value

    @field_validator("approval_callback_secret")
    @classmethod
    def _whsec(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        text = value.get_secret_value().strip()
        encoded = text.removeprefix("whsec_")
        try:
            key = base64.b64decode(encoded + "==", validate=False)
        except (binascii.Error, ValueError):
            key = b""
        if not text.startswith("whsec_") or len(key) < 16:
            raise ValueError(
                "expected whsec_ followed by at least 16 base64-encoded bytes, e.g. "
                "whsec_$(openssl rand -base64 32)"
            )
        return SecretStr(text)

    @field_validator("approval_callback_hosts")
    @classmethod
    def _callback_hosts(cls, value: list[str]) -> list[str]:
        return [host.strip().lower().rstrip(".") for host in value if host.strip()]

    @field_validator("app")
    @classmethod
    def _looks_like_app(cls, value: str) -> str:
        module, sep, attr = value.partition(":")
        if not sep or not module.strip() or not attr.strip():
            raise ValueError("expected package.module:attr, e.g. examples:demo_agents")
        return value.strip()

    @field_validator("agents", mode="before")
    @classmethod
    def _no_agents_file(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("slack_api_base_url")
    @classmethod
    def _slack_url(cls, value: str) -> str:
        value = value.strip()
        if not value.startswith(("https://", "http://")):
            raise ValueError("expected an http(s) URL such as https://slack.com/api/")
        # slack_sdk appends the method name to the base URL as it is.
        return value if value.endswith("/") else value + "/"

    @field_validator("slack_approver_groups")
    @classmethod
    def _slack_ids(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for group, ids in value.items():
            wrong = [i for i in ids if not re.fullmatch(r"[SCG][A-Z0-9]+", i)]
            if wrong or not ids:
                raise ValueError(
                    f"group {group!r}: expected Slack user group ids (S...) or channel ids "
                    f"(C... or G...), got {wrong or 'none'}"
                )
        return value

    @field_validator("slack_command")
    @classmethod
    def _slash_command(cls, value: str) -> str:
        value = value.strip()
        if not re.fullmatch(r"/[a-z0-9_.-]{1,31}", value):
            raise ValueError("expected a slash command such as /signoff (lower case, no spaces)")
        return value

    @field_validator("slack_mode", mode="before")
    @classmethod
    def _lower_mode(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("slack_mode")
    @classmethod
    def _slack_credentials(cls, value: str, info: ValidationInfo) -> str:
        needed = {
            "off": (),
            "http": ("slack_bot_token", "slack_signing_secret"),
            "socket": ("slack_bot_token", "slack_app_token"),
        }[value]
        # A credential that failed its own validation is reported on its own already.
        missing = [env_name(f) for f in needed if f in info.data and info.data[f] is None]
        if missing:
            wanted = " and ".join(env_name(f) for f in needed)
            raise ValueError(f"{value} mode needs {wanted} (missing: {', '.join(missing)})")
        return value

    @field_validator("discord_api_base_url", "discord_console_url")
    @classmethod
    def _discord_http(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None or not _discord_on(info):
            return value
        if not value.startswith(("http://", "https://")):
            raise ValueError("expected an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("discord_gateway_url")
    @classmethod
    def _discord_ws(cls, value: str, info: ValidationInfo) -> str:
        if _discord_on(info) and not value.startswith(("ws://", "wss://")):
            raise ValueError("expected a ws:// or wss:// URL")
        return value

    @field_validator("discord_guild_id")
    @classmethod
    def _discord_guild(cls, value: int | None, info: ValidationInfo) -> int | None:
        if _discord_on(info) and value is None and info.data.get("discord_sync") == "guild":
            raise ValueError("SIGNOFF_DISCORD_SYNC=guild needs SIGNOFF_DISCORD_GUILD_ID")
        return value

    @field_validator("discord_approver_roles", mode="before")
    @classmethod
    def _discord_role_ids(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, dict):
            return value
        roles_by_group: dict[str, list[str]] = {}
        for group, roles in value.items():
            listed = roles if isinstance(roles, list | tuple) else [roles]
            bad = [r for r in listed if not str(r).isdigit()]
            if bad and _discord_on(info):
                raise ValueError(f"group {group!r}: role ids are numbers, got {bad!r}")
            roles_by_group[str(group)] = [str(r) for r in listed]
        return roles_by_group

    @field_validator("sqlite_synchronous", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Code beats the environment (and its *_FILE secrets), which beats the TOML file.
        return (
            init_settings,
            env_settings,
            _SecretFileSource(settings_cls),
            _FileSource(settings_cls),
        )


def _secure_or_local(url: str) -> bool:
    if url.startswith("https://"):
        return len(url) > len("https://")
    host = re.match(r"http://(\[[^\]]*\]|[^/:?#]*)", url)
    return host is not None and host.group(1).lower() in ("localhost", "127.0.0.1", "[::1]")


def _discord_on(info: ValidationInfo) -> bool:
    """Whether ``SIGNOFF_DISCORD_BOT_TOKEN`` is set (validated before the other Discord
    settings); with Discord off their values are never used, and never refused."""
    return info.data.get("discord_bot_token") is not None


def _spec(value: str) -> str:
    try:
        return canonical(value)
    except ConfigurationError as exc:
        raise ValueError(str(exc)) from None


class _FileSource(PydanticBaseSettingsSource):
    """The TOML file's values (already read and checked by `load_settings`)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return (_file_values.get() or {}).get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(_file_values.get() or {})


FILE_SUFFIX = "_FILE"
SECRET_FILE_SETTINGS = _SENSITIVE
"""Settings that may also be read from a file named by ``SIGNOFF_<NAME>_FILE``."""


def _secret_file_values() -> dict[str, Any]:
    """Values of the ``SIGNOFF_<NAME>_FILE`` variables: the files' contents.

    Raises:
        ConfigurationError: A file cannot be read, or both ``SIGNOFF_<NAME>`` and
            ``SIGNOFF_<NAME>_FILE`` are set.
    """
    environ = {k.upper(): v for k, v in os.environ.items()}
    values: dict[str, Any] = {}
    for field in sorted(SECRET_FILE_SETTINGS):
        variable = env_name(field) + FILE_SUFFIX
        path = environ.get(variable)
        if not path:
            continue
        if env_name(field) in environ:
            raise ConfigurationError(
                f"{variable}: set either {env_name(field)} or {variable}, not both"
            )
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(
                f"{variable}: cannot read {path}: {exc.strerror or exc}"
            ) from None
        except UnicodeDecodeError:
            raise ConfigurationError(f"{variable}: {path} is not UTF-8 text") from None
        # Secret files usually end with a newline; the secret does not.
        values[field] = text.rstrip("\r\n")
    return values


class _SecretFileSource(PydanticBaseSettingsSource):
    """Secrets read from the files named by ``SIGNOFF_<NAME>_FILE`` (Docker, Kubernetes)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return _secret_file_values().get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        values = _secret_file_values()
        for name, value in list(values.items()):
            annotation = Settings.model_fields[name].annotation
            if annotation is not None and getattr(annotation, "__origin__", None) in (list, dict):
                values[name] = _json_value(name, value)
        return values


def _json_value(field: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"{env_name(field)}{FILE_SUFFIX}: the file is not valid JSON ({exc.msg})"
        ) from None


def uses_sqlite(settings: Settings) -> bool:
    """Whether the store is a SQLite file (one machine) rather than a shared server."""
    return _scheme(settings.database_url) == "sqlite"


def _scheme(url: str) -> str:
    """The database a URL names, without its driver (``sqlite``, ``postgresql``)."""
    return url.split(":", 1)[0].split("+", 1)[0].strip().lower()


def require_shared_settings(settings: Settings) -> None:
    """Check what every replica must share when the database is not SQLite.

    Made-up values would differ from one replica to the next: a console session signed
    by one replica would be refused by the next, and each would print its own token.

    Raises:
        ConfigurationError: ``SIGNOFF_COOKIE_SECRET`` or ``SIGNOFF_OPERATOR_TOKEN`` (or
            their ``*_FILE`` variants) is not set.
    """
    if uses_sqlite(settings):
        return
    for field in ("cookie_secret", "operator_token"):
        if getattr(settings, field) is None:
            name = env_name(field)
            raise ConfigurationError(
                f"{name}: required when SIGNOFF_DATABASE_URL is not SQLite (every replica "
                f"must use the same value; {name}{FILE_SUFFIX} reads it from a file)"
            )


def env_name(field: str) -> str:
    """The environment variable of a setting, e.g. ``port`` -> ``SIGNOFF_PORT``."""
    return f"{ENV_PREFIX}{field.upper()}"


def read_config_file(path: Path) -> dict[str, Any]:
    """Read a TOML settings file; keys are setting names without the ``SIGNOFF_`` prefix.

    A ``[signoff]`` table is accepted too, for files shared with other tools.

    Raises:
        ConfigurationError: The file is missing, is not TOML, or names unknown settings.
    """
    try:
        with path.open("rb") as handle:
            raw = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigurationError(f"config file {path} does not exist") from None
    except OSError as exc:
        raise ConfigurationError(f"config file {path} cannot be read: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"config file {path} is not valid TOML: {exc}") from exc
    table = raw.get("signoff", raw) if isinstance(raw.get("signoff"), dict) else raw
    values: dict[str, Any] = {}
    known = set(Settings.model_fields)
    for key, value in table.items():
        name = key.lower()
        if name.startswith(ENV_PREFIX.lower()):
            name = name[len(ENV_PREFIX) :]
        if name not in known:
            choices = ", ".join(sorted(known))
            raise ConfigurationError(
                f"config file {path}: unknown setting {key!r} (known: {choices})"
            )
        values[name] = value
    return values


def load_settings(
    config_file: Path | str | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    override_names: Mapping[str, str] | None = None,
) -> Settings:
    """Build the settings from code, the environment and an optional TOML file.

    Args:
        config_file: A TOML file with defaults for this deployment.
        overrides: Values that beat every other source (``None`` values are ignored).
        override_names: How to name an override in error messages (e.g. the CLI option
            ``--database-url``); defaults to its environment variable.

    Raises:
        ConfigurationError: A value is invalid; the message names the setting and where
            it came from.
    """
    path = Path(config_file) if config_file is not None else None
    from_file = read_config_file(path) if path is not None else {}
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    from_secret_files = set(_secret_file_values())
    token = _file_values.set(from_file)
    try:
        return Settings(**given)
    except ValidationError as exc:
        raise ConfigurationError(
            _describe(exc, given, from_file, path, override_names or {}, from_secret_files)
        ) from None
    except SettingsError as exc:
        # pydantic-settings decodes JSON-valued variables itself and only says which
        # field failed; say which variable and what is wrong with its JSON.
        raise ConfigurationError(_describe_source_error(exc)) from None
    finally:
        _file_values.reset(token)


def _describe_source_error(exc: SettingsError) -> str:
    found = re.search(r'field "(\w+)"', str(exc))
    name = env_name(found.group(1)) if found else "settings"
    cause = exc.__cause__
    if isinstance(cause, json.JSONDecodeError):
        return f"{name}: not valid JSON ({cause.msg} at line {cause.lineno} column {cause.colno})"
    if isinstance(cause, RecursionError):
        return f"{name}: not valid JSON (nested too deeply)"
    return f"{name}: cannot be read ({cause or exc})"


def _describe(
    exc: ValidationError,
    given: Mapping[str, Any],
    from_file: Mapping[str, Any],
    path: Path | None,
    override_names: Mapping[str, str],
    secret_files: set[str],
) -> str:
    environ = {k.upper() for k in os.environ}
    problems = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else "settings"
        name = env_name(field)
        if field in given:
            name = override_names.get(field, name)
        elif field in secret_files:
            name += FILE_SUFFIX
        elif name not in environ and field in from_file and path is not None:
            name = f"{field} in {path}"
        inner = "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"][1:]
        )
        name += inner
        message = str(error["msg"]).removeprefix("Value error, ")
        context = error.get("ctx") or {}
        if error["type"] == "too_short" and isinstance(error.get("input"), str | SecretStr):
            # pydantic counts "items" for secret strings; people count characters.
            message = (
                f"must be at least {context.get('min_length')} characters long "
                f"(got {context.get('actual_length')})"
            )
        if field not in _SENSITIVE and "input" in error:
            message += f" (got {error['input']!r})"
        problems.append(f"{name}: {message}")
    return "; ".join(problems)
