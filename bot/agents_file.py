"""Agents defined in a TOML file (``SIGNOFF_AGENTS``): model, tools, MCP servers and rules.

The file is validated with pydantic when it is loaded; every problem (an unknown key, a
bad value, a rule that names no tool, an import that fails) is a
`runtime.ConfigurationError` naming the file, the key path and, where it can be found,
the line. Whether a rule names a tool an MCP server really has is checked once the server
has listed its tools (`adapters.mcp.hub.McpHub.start`).

The format, in short (docs/agents-file.md has a complete example)::

    [servers.infra]                          # an MCP server over stdio ...
    command = "${SIGNOFF_PYTHON}"
    args = ["infra_server.py"]
    [servers.github]                         # ... or Streamable HTTP
    url = "https://mcp.example.com/mcp"
    bearer_token = "${GITHUB_MCP_TOKEN}"

    [agents.ops]
    instructions = "You operate our services."
    model = "mycompany.models:ops_model"     # module:attr, or provider:model
    tools = ["mycompany.tools:page_oncall"]  # Python tools by import path
    servers = ["infra"]

    [agents.ops.rules."infra.deploy"]        # per-tool settings, by name or glob
    permission = "allow"
    ask_if = [{ environment = "production" }]
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from adapters.claude_code.resume import DEFAULT_COMMAND as DEFAULT_RESUME_COMMAND
from adapters.claude_code.resume import DEFAULT_TIMEOUT_SECONDS as DEFAULT_RESUME_TIMEOUT
from adapters.claude_code.resume import ResumeConfig
from adapters.mcp import (
    Binding,
    Condition,
    HttpServer,
    ServerConfig,
    StdioServer,
    ToolKnobs,
    apply_to_tool,
    check_pattern,
    settle,
)
from adapters.mcp.config import MAX_IMAGE_BYTES, MAX_LISTING_BYTES, MAX_TOOLS
from adapters.mcp.rules import check_arguments
from adapters.models import PROVIDERS as SPEC_PROVIDERS
from adapters.models import canonical, with_options
from bot.imports import import_object
from bot.policies import PolicySpec, attach_policies, build_policies
from runtime import (
    Agent,
    ConfigurationError,
    Escalate,
    ExpiryAction,
    Model,
    Permission,
    ReplayPolicy,
    SignoffError,
    Tool,
    tool,
)
from runtime.domain.external import ExternalAgent, authorising_tool, check_agent_name
from runtime.domain.tools import OnExpiry

PROVIDERS = frozenset(SPEC_PROVIDERS)
"""Model specs ``<provider>:<model>`` with these providers go to `_provider_model`; any
other ``module:attr`` is imported."""

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME = re.compile(r"[A-Za-z0-9_-]+")


def _provider_model(spec: str, where: str) -> str:
    """A provider spec such as ``openai:gpt-4.1-mini``, checked and made canonical.

    The agent keeps the spec; the runtime's model resolver builds the model (and a
    missing API key is reported, naming its setting, before the server starts).

    Raises:
        ConfigurationError: The spec names no model or an unknown provider.
    """
    try:
        return canonical(spec)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None


# -- the file's schema -------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _expiry(value: Any) -> Any:
    if value is None or value in ("deny", "cancel"):
        return value
    if isinstance(value, Mapping) and set(value) <= {"escalate", "deadline"}:
        approvers = value.get("escalate")
        if isinstance(approvers, list) and approvers and all(isinstance(a, str) for a in approvers):
            return dict(value)
    raise ValueError(
        'expected "deny", "cancel" or { escalate = ["<approver>", ...], deadline = <seconds> }'
    )


def _positive(value: timedelta | None) -> timedelta | None:
    if value is not None and value <= timedelta(0):
        raise ValueError("must be positive")
    return value


class ServerSpec(_Strict):
    """``[servers.<name>]``: an MCP server, stdio (``command``) or Streamable HTTP (``url``)."""

    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    bearer_token: str | None = Field(default=None, min_length=1)
    auth: Literal["oauth"] | None = None
    client_id: str | None = Field(default=None, min_length=1)
    client_secret_file: str | None = Field(default=None, min_length=1)
    scopes: list[str] = Field(default_factory=list)
    timeout: float = Field(default=60.0, gt=0)
    connect_timeout: float = Field(default=10.0, gt=0)
    prefix: str = Field(default="", pattern=r"^[A-Za-z0-9_-]*$")
    max_tools: int = Field(default=MAX_TOOLS, gt=0)
    max_listing_bytes: int = Field(default=MAX_LISTING_BYTES, gt=0)
    refresh_interval: float = Field(default=60.0, gt=0)
    trust_annotations: bool = False
    tools: list[str] | None = None
    exclude_tools: list[str] = Field(default_factory=list)
    max_image_bytes: int = Field(default=MAX_IMAGE_BYTES, gt=0)
    elicitation: bool = False
    resources: bool = False

    @model_validator(mode="after")
    def _one_transport(self) -> ServerSpec:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (a stdio server) or url (Streamable HTTP)")
        if self.command is not None and (self.headers or self.bearer_token):
            raise ValueError("headers and bearer_token are for url servers")
        if self.command is not None and "refresh_interval" in self.model_fields_set:
            raise ValueError("refresh_interval is for url servers")
        if self.url is not None and (self.args or self.env or self.cwd):
            raise ValueError("args, env and cwd are for command servers")
        if self.url is not None and not self.url.startswith(("http://", "https://", "${")):
            raise ValueError("url must be an http(s) URL")
        if self.auth is None and (self.client_id or self.client_secret_file or self.scopes):
            raise ValueError('client_id, client_secret_file and scopes need auth = "oauth"')
        if self.auth is not None and self.command is not None:
            raise ValueError('auth = "oauth" is for url servers')
        if self.client_secret_file is not None and self.client_id is None:
            raise ValueError("client_secret_file needs client_id")
        return self


class RuleSpec(_Strict):
    """``[agents.<name>.rules."<pattern>"]``: settings of the tools the pattern matches."""

    permission: Literal["allow", "ask", "deny"] | None = None
    deny_if: list[Any] = Field(default_factory=list)
    ask_if: list[Any] = Field(default_factory=list)
    allow_if: list[Any] = Field(default_factory=list)
    replay_policy: Literal["manual", "safe", "idempotent"] | None = None
    approvers: list[str] | None = None
    four_eyes: bool | None = None
    deadline: timedelta | None = None
    secret: list[str] | None = None
    editable: bool | list[str] | None = None
    on_expiry: Any = None
    grants: list[Literal["run", "thread"]] | None = None
    hide: bool | None = None
    decide_in: list[Literal["console", "slack", "discord", "api", "cli"]] | None = None
    sso: bool | None = None

    _deadline = field_validator("deadline")(_positive)
    _on_expiry = field_validator("on_expiry")(_expiry)

    @field_validator("grants")
    @classmethod
    def _grants_once(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError("a grant scope is given twice")
        return value


class AgentSpec(_Strict):
    """``[agents.<name>]``: one agent."""

    external: Literal[False] = False
    instructions: str
    model: str = Field(min_length=1)
    model_options: dict[str, str | bool | int | float] = Field(default_factory=dict)
    description: str = ""
    version: str = Field(default="1", min_length=1)
    tools: list[str] = Field(default_factory=list)
    servers: list[str] = Field(default_factory=list)
    rules: dict[str, RuleSpec] = Field(default_factory=dict)
    approvers: list[str] = Field(default_factory=list)
    four_eyes: bool = False
    deadline: timedelta | None = None
    on_expiry: Any = "deny"
    max_turns: int = Field(default=20, ge=1)
    subagents: list[str] = Field(default_factory=list)
    policy: str | None = None

    _deadline = field_validator("deadline")(_positive)
    _on_expiry = field_validator("on_expiry")(_expiry)


_NOT_EXTERNAL = ("instructions", "model", "tools", "servers", "subagents", "max_turns")


class ResumeSpec(_Strict):
    """``[agents.<name>.resume]`` of an external agent: how signoff resumes a deferred
    Claude Code session once its call is decided (`adapters.claude_code.resume`)."""

    workdirs: list[str] = Field(min_length=1)
    command: list[str] = Field(default_factory=lambda: list(DEFAULT_RESUME_COMMAND))
    timeout: float = Field(default=DEFAULT_RESUME_TIMEOUT, gt=0)
    env: dict[str, str] = Field(default_factory=dict)


class ExternalSpec(_Strict):
    """``[agents.<name>]`` with ``external = true``: an agent that runs elsewhere and asks
    for approvals over the API (`runtime.ExternalAgent`)."""

    external: Literal[True]
    description: str = ""
    version: str = Field(default="1", min_length=1)
    rules: dict[str, RuleSpec] = Field(default_factory=dict)
    approvers: list[str] = Field(default_factory=list)
    four_eyes: bool = False
    deadline: timedelta | None = None
    on_expiry: Any = "deny"
    approvals: dict[str, Any] = Field(default_factory=lambda: {"platform": "console"})
    overrides: list[Literal["approvers", "deadline"]] = Field(default_factory=list)
    resume: ResumeSpec | None = None
    policy: str | None = None

    _deadline = field_validator("deadline")(_positive)
    _on_expiry = field_validator("on_expiry")(_expiry)

    @model_validator(mode="before")
    @classmethod
    def _runs_elsewhere(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            given = [key for key in _NOT_EXTERNAL if key in data]
            if given:
                raise ValueError(
                    f"an external agent runs elsewhere: it has no {', '.join(given)} "
                    "(only rules, approvers, four_eyes, deadline, on_expiry, approvals, "
                    "overrides, resume, policy, description and version)"
                )
        return data


def _agent_kind(value: Any) -> str:
    return (
        _EXTERNAL_TAG if isinstance(value, Mapping) and value.get("external") is True else _OWN_TAG
    )


_OWN_TAG = "<agent>"
_EXTERNAL_TAG = "<external agent>"


class FileSpec(_Strict):
    """The whole file."""

    servers: dict[str, ServerSpec] = Field(default_factory=dict)
    policies: dict[str, PolicySpec] = Field(default_factory=dict)
    agents: dict[
        str,
        Annotated[
            Annotated[AgentSpec, Tag(_OWN_TAG)] | Annotated[ExternalSpec, Tag(_EXTERNAL_TAG)],
            Discriminator(_agent_kind),
        ],
    ] = Field(min_length=1)


# -- loading -------------------------------------------------------------------------------


@dataclass
class AgentsFile:
    """What an agents file defines, built but not connected.

    Attributes:
        path: The file.
        agents: Its agents; their MCP tools arrive when `bindings` are connected.
        servers: The MCP servers its agents use.
        bindings: Which agent uses which servers, with the per-tool settings.
        resumes: How the external agents with a ``resume`` table resume deferred
            sessions, by agent name.
    """

    path: Path
    agents: list[Agent]
    servers: list[ServerConfig] = field(default_factory=list)
    bindings: list[Binding] = field(default_factory=list)
    resumes: dict[str, ResumeConfig] = field(default_factory=dict)


def load_agents_file(
    path: Path | str, *, mcp_headers: Mapping[str, Mapping[str, str]] | None = None
) -> AgentsFile:
    """Read, validate and build the agents of a TOML agents file.

    Args:
        path: The file (``SIGNOFF_AGENTS``).
        mcp_headers: Extra HTTP headers by server name (``SIGNOFF_MCP_HEADERS``); they
            win over the file's.

    Raises:
        ConfigurationError: Anything wrong with the file; the message names the file, the
            key path and the line where it can.
    """
    file = Path(path)
    where = f"SIGNOFF_AGENTS={path}"
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigurationError(f"{where}: the file does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{where}: the file cannot be read: {exc}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{where}: not valid TOML: {exc}") from None
    lines = _key_lines(text)
    try:
        spec = FileSpec.model_validate(raw)
    except ValidationError as exc:
        raise ConfigurationError(f"{where}: {_describe(exc, lines)}") from None
    return _Builder(file, where, lines, dict(mcp_headers or {})).build(spec)


@dataclass
class _Builder:
    file: Path
    where: str
    lines: dict[tuple[str, ...], int]
    mcp_headers: dict[str, Mapping[str, str]]

    def at(self, *loc: str | int) -> str:
        """``<file>: <key path> (line N)``."""
        return f"{self.where}: {_path(loc)}{_line(self.lines, loc)}"

    def build(self, spec: FileSpec) -> AgentsFile:
        unknown = set(self.mcp_headers) - set(spec.servers)
        if unknown:
            raise ConfigurationError(
                f"SIGNOFF_MCP_HEADERS: {self.file} has no MCP server named "
                f"{', '.join(sorted(unknown))}"
            )
        servers = {name: self.server(name, server) for name, server in spec.servers.items()}
        agents: list[Agent] = []
        bindings: list[Binding] = []
        resumes: dict[str, ResumeConfig] = {}
        used: set[str] = set()
        for name, agent_spec in spec.agents.items():
            if isinstance(agent_spec, ExternalSpec):
                agents.append(self.external(name, agent_spec))
                if agent_spec.resume is not None:
                    resumes[name] = self.resume(name, agent_spec.resume)
                continue
            agent, binding = self.agent(name, agent_spec, servers)
            agents.append(agent)
            if binding is not None:
                bindings.append(binding)
                used.update(binding.servers)
        self.link_subagents(spec, {agent.name: agent for agent in agents})
        attach_policies(
            {agent.name: agent for agent in agents},
            {name: agent_spec.policy for name, agent_spec in spec.agents.items()},
            build_policies(spec.policies, self.file.resolve().parent, self.at),
            self.at,
        )
        return AgentsFile(
            path=self.file,
            agents=agents,
            servers=[servers[n] for n in servers if n in used],
            bindings=bindings,
            resumes=resumes,
        )

    def link_subagents(self, spec: FileSpec, agents: Mapping[str, Agent]) -> None:
        """Give each agent the sub-agents it lists, by name, refusing cycles."""
        for name, agent_spec in spec.agents.items():
            if isinstance(agent_spec, ExternalSpec):
                continue
            for index, sub in enumerate(agent_spec.subagents):
                where = self.at("agents", name, "subagents", index)
                if sub not in agents:
                    known = ", ".join(sorted(agents))
                    raise ConfigurationError(
                        f"{where}: no agent named {sub!r} in this file (defined: {known})"
                    )
                if isinstance(agents[sub], ExternalAgent):
                    raise ConfigurationError(
                        f"{where}: {sub!r} is an external agent: it runs elsewhere, so no "
                        "agent can hand it a task"
                    )
                if _reaches(spec, sub, name):
                    raise ConfigurationError(
                        f"{where}: {sub!r} would be a sub-agent of itself (through {name!r})"
                    )
                try:
                    agents[name].add_subagent(agents[sub])
                except SignoffError as exc:
                    raise ConfigurationError(f"{where}: {exc}") from None

    # -- servers ------------------------------------------------------------------------
    def server(self, name: str, spec: ServerSpec) -> ServerConfig:
        if not _NAME.fullmatch(name):
            raise ConfigurationError(
                f"{self.at('servers', name)}: a server name may use letters, digits, _ and -"
            )

        def expand(value: str, *loc: str | int) -> str:
            return self.expand(value, "servers", name, *loc)

        if spec.command is not None:
            cwd = Path(expand(spec.cwd, "cwd")) if spec.cwd is not None else Path(".")
            if not cwd.is_absolute():
                cwd = self.file.resolve().parent / cwd
            return StdioServer(
                name=name,
                command=expand(spec.command, "command"),
                args=tuple(expand(a, "args", i) for i, a in enumerate(spec.args)),
                env={k: expand(v, "env", k) for k, v in spec.env.items()},
                cwd=str(cwd),
                timeout=spec.timeout,
                connect_timeout=spec.connect_timeout,
                prefix=spec.prefix,
                max_tools=spec.max_tools,
                max_listing_bytes=spec.max_listing_bytes,
                **self.listing_options(name, spec),
            )
        assert spec.url is not None
        headers = {k: expand(v, "headers", k) for k, v in spec.headers.items()}
        if spec.bearer_token is not None:
            headers["Authorization"] = "Bearer " + expand(spec.bearer_token, "bearer_token")
        headers.update(self.mcp_headers.get(name, {}))
        url = expand(spec.url, "url")
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"{self.at('servers', name, 'url')}: not an http(s) URL")
        return HttpServer(
            name=name,
            url=url,
            headers=headers,
            timeout=spec.timeout,
            connect_timeout=spec.connect_timeout,
            prefix=spec.prefix,
            max_tools=spec.max_tools,
            max_listing_bytes=spec.max_listing_bytes,
            refresh_interval=spec.refresh_interval,
            **self.oauth_options(name, spec),
            **self.listing_options(name, spec),
        )

    def listing_options(self, name: str, spec: ServerSpec) -> dict[str, Any]:
        """A server's ``trust_annotations``, ``tools``, ``exclude_tools`` and
        ``max_image_bytes``, checked; its ``elicitation`` and ``resources``."""
        for key, globs in (("tools", spec.tools or []), ("exclude_tools", spec.exclude_tools)):
            for index, glob in enumerate(globs):
                check_pattern(glob, self.at("servers", name, key, index))
        return {
            "trust_annotations": spec.trust_annotations,
            "tools": tuple(spec.tools) if spec.tools is not None else None,
            "exclude_tools": tuple(spec.exclude_tools),
            "max_image_bytes": spec.max_image_bytes,
            "elicitation": spec.elicitation,
            "resources": spec.resources,
        }

    def oauth_options(self, name: str, spec: ServerSpec) -> dict[str, Any]:
        """A server's ``oauth`` client (``auth = "oauth"``), its secret read from its file."""
        from adapters.mcp.config import OAuthClient

        if spec.auth is None:
            return {}
        secret = None
        if spec.client_secret_file is not None:
            path = Path(spec.client_secret_file).expanduser()
            if not path.is_absolute():
                path = self.file.resolve().parent / path
            try:
                secret = path.read_text().strip()
            except OSError as exc:
                raise ConfigurationError(
                    f"{self.at('servers', name, 'client_secret_file')}: cannot read "
                    f"{path}: {exc.strerror}"
                ) from None
            if not secret:
                raise ConfigurationError(
                    f"{self.at('servers', name, 'client_secret_file')}: {path} is empty"
                )
        return {"oauth": OAuthClient(spec.client_id, secret, tuple(spec.scopes))}

    def expand(self, value: str, *loc: str | int) -> str:
        """Replace ``${VAR}`` with the environment's value (``${SIGNOFF_PYTHON}``: this
        interpreter). The values never appear in messages."""

        def one(match: re.Match[str]) -> str:
            variable = match.group(1)
            if variable == "SIGNOFF_PYTHON":
                return sys.executable
            if variable not in os.environ:
                raise ConfigurationError(
                    f"{self.at(*loc)}: the environment variable {variable} is not set"
                )
            return os.environ[variable]

        return _VARIABLE.sub(one, value)

    # -- agents -------------------------------------------------------------------------
    def agent(
        self, name: str, spec: AgentSpec, servers: Mapping[str, ServerConfig]
    ) -> tuple[Agent, Binding | None]:
        for index, server in enumerate(spec.servers):
            if server not in servers:
                known = ", ".join(sorted(servers)) or "none"
                raise ConfigurationError(
                    f"{self.at('agents', name, 'servers', index)}: no MCP server named "
                    f"{server!r} (defined: {known})"
                )
        python_tools = self.python_tools(name, spec)
        mcp_knobs, python_knobs = [], []
        for pattern, rule in spec.rules.items():
            knobs = self.knobs(name, pattern, rule)
            head, dot, _ = pattern.partition(".")
            if dot and head in spec.servers:
                mcp_knobs.append(knobs)
            else:
                python_knobs.append(knobs)
        tools = []
        hidden: set[str] = set()
        for item in python_tools:
            settled = settle(item.name, python_knobs)
            problems = check_arguments(settled, item.name, item.parameters)
            if problems:
                raise ConfigurationError(problems[0])
            applied = apply_to_tool(item, settled)
            tools.append(applied)
            # A rule of this file that denies the tool (or sets hide) keeps it from the model.
            if settled.sources and settled.hidden(applied.permission):
                hidden.add(applied.name)
        for knobs in python_knobs:
            if not any(knobs.matches(t.name) for t in python_tools):
                have = ", ".join(t.name for t in python_tools) or "none"
                servers_hint = ", ".join(spec.servers) or "none"
                raise ConfigurationError(
                    f"{knobs.where}: matches no tool of agent {name!r} (Python tools: {have}; "
                    f"MCP tools are named <server>.<tool>, servers: {servers_hint})"
                )
        where = self.at("agents", name)
        try:
            agent = Agent(
                name,
                spec.instructions,
                self.model(spec.model, "agents", name, "model", options=spec.model_options),
                tools,
                version=spec.version,
                approvers=spec.approvers,
                four_eyes=spec.four_eyes,
                deadline=spec.deadline,
                on_expiry=_on_expiry(spec.on_expiry) or ExpiryAction.DENY,
                max_turns=spec.max_turns,
                description=spec.description,
            )
        except SignoffError as exc:
            raise ConfigurationError(f"{where}: {exc}") from None
        agent.hidden.update(hidden)
        if not spec.servers:
            return agent, None
        return agent, Binding(agent, tuple(spec.servers), tuple(mcp_knobs))

    def resume(self, name: str, spec: ResumeSpec) -> ResumeConfig:
        """How the external agent `name` resumes deferred sessions."""
        try:
            return ResumeConfig(
                workdirs=tuple(spec.workdirs),
                command=tuple(spec.command),
                timeout_seconds=spec.timeout,
                env=dict(spec.env),
            )
        except ConfigurationError as exc:
            raise ConfigurationError(f"{self.at('agents', name, 'resume')}: {exc}") from None

    def external(self, name: str, spec: ExternalSpec) -> ExternalAgent:
        """An external agent: its tools are built by name, its rules applied by pattern."""
        where = self.at("agents", name)
        if not check_agent_name(name):
            raise ConfigurationError(
                f"{where}: an external agent's name is 1-64 letters, digits, '_', '.' or '-', "
                "starting with a letter or digit"
            )
        knobs = []
        for pattern, rule in spec.rules.items():
            if rule.replay_policy is not None or rule.hide is not None:
                raise ConfigurationError(
                    f"{self.at('agents', name, 'rules', pattern)}: replay_policy and hide do not "
                    "apply to an external agent's tools (signoff authorises them; the agent "
                    "runs them)"
                )
            knobs.append(self.knobs(name, pattern, rule))
        rules = tuple(knobs)

        def build(tool_name: str) -> Tool:
            return apply_to_tool(authorising_tool(tool_name), settle(tool_name, rules))

        for entry in rules:
            # A rule that cannot be applied is reported now, not at the first request.
            build(entry.pattern)
        approvals = _approvals(self.at("agents", name, "approvals"), spec.approvals)
        try:
            return ExternalAgent(
                name,
                build,
                # Its policy is recorded on each ticket, not part of what a ticket pins.
                fingerprint=spec.model_dump_json(exclude={"policy"}),
                version=spec.version,
                approvers=spec.approvers,
                four_eyes=spec.four_eyes,
                deadline=spec.deadline,
                on_expiry=_on_expiry(spec.on_expiry) or ExpiryAction.DENY,
                overrides=spec.overrides,
                approvals=approvals,
                description=spec.description,
            )
        except SignoffError as exc:
            raise ConfigurationError(f"{where}: {exc}") from None

    def knobs(self, agent: str, pattern: str, rule: RuleSpec) -> ToolKnobs:
        here = self.at("agents", agent, "rules", pattern)
        check_pattern(pattern, here)
        lists: dict[str, tuple[Condition, ...]] = {}
        for key in ("deny_if", "ask_if", "allow_if"):
            lists[key] = tuple(
                Condition.parse(
                    table,
                    where=f"{self.where}: {_path(('agents', agent, 'rules', pattern, key, i))}",
                )
                for i, table in enumerate(getattr(rule, key))
            )
        return ToolKnobs(
            pattern=pattern,
            where=here,
            permission=Permission(rule.permission) if rule.permission else None,
            deny_if=lists["deny_if"],
            ask_if=lists["ask_if"],
            allow_if=lists["allow_if"],
            replay_policy=ReplayPolicy(rule.replay_policy) if rule.replay_policy else None,
            approvers=tuple(rule.approvers) if rule.approvers is not None else None,
            four_eyes=rule.four_eyes,
            deadline=rule.deadline,
            secret=tuple(rule.secret) if rule.secret is not None else None,
            editable=(
                rule.editable
                if isinstance(rule.editable, bool) or rule.editable is None
                else tuple(rule.editable)
            ),
            on_expiry=_on_expiry(rule.on_expiry),
            grants=tuple(rule.grants) if rule.grants is not None else None,
            decide_in=tuple(rule.decide_in) if rule.decide_in is not None else None,
            sso=rule.sso,
            hide=rule.hide,
        )

    def python_tools(self, agent: str, spec: AgentSpec) -> list[Tool]:
        found: list[Tool] = []
        for index, path in enumerate(spec.tools):
            here = self.at("agents", agent, "tools", index)
            target = import_object(path, here)
            items = list(target) if isinstance(target, list | tuple) else [target]
            for item in items:
                if isinstance(item, Tool):
                    found.append(item)
                elif callable(item):
                    try:
                        found.append(tool(permission=Permission.ASK)(item))
                    except SignoffError as exc:
                        raise ConfigurationError(f"{here}: {exc}") from None
                else:
                    raise ConfigurationError(
                        f"{here}: {path} is a {type(item).__name__}, not a runtime.Tool or a "
                        "function"
                    )
        return found

    def model(
        self, spec: str, *loc: str | int, options: Mapping[str, object] | None = None
    ) -> Model | str:
        here = self.at(*loc)
        provider, sep, rest = spec.partition(":")
        if not sep or not provider.strip() or not rest.strip():
            raise ConfigurationError(
                f"{here}: expected module:attr (a runtime.Model or a function making one) "
                "or provider:model"
            )
        if provider.strip() in PROVIDERS:
            if options:
                try:
                    spec = with_options(spec, options)
                except ConfigurationError as exc:
                    raise ConfigurationError(
                        f"{self.at(*loc[:-1], 'model_options')}: {exc}"
                    ) from None
            return _provider_model(spec, here)
        if options:
            raise ConfigurationError(
                f"{self.at(*loc[:-1], 'model_options')}: only provider:model specs take "
                f"model options; {spec} builds its own model"
            )
        target = import_object(spec, here)
        if callable(target) and not isinstance(target, Model):
            try:
                target = target()
            except Exception as exc:
                raise ConfigurationError(
                    f"{here}: calling {spec} failed: {type(exc).__name__}: {exc}"
                ) from exc
        if not isinstance(target, Model):
            raise ConfigurationError(f"{here}: {spec} is a {type(target).__name__}, not a Model")
        return target


def _reaches(spec: FileSpec, start: str, target: str) -> bool:
    """Whether `target` is `start` or among the sub-agents below it."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        if name == target:
            return True
        if name in seen or name not in spec.agents:
            continue
        seen.add(name)
        found = spec.agents[name]
        if isinstance(found, AgentSpec):
            todo.extend(found.subagents)
    return False


def _on_expiry(value: Any) -> OnExpiry | None:
    if value is None:
        return None
    if isinstance(value, dict):
        deadline = value.get("deadline")
        limit = timedelta(seconds=deadline) if isinstance(deadline, int | float) else None
        return Escalate(approvers=tuple(value["escalate"]), deadline=limit)
    return ExpiryAction(value)


_CARD_PLATFORMS = ("console", "slack", "discord")
# Keys an external run's origin holds besides where its cards go.
_RESERVED_ORIGIN = frozenset({"approval", "approval_callback_url", "callback_url", "hook"})


def _approvals(where: str, approvals: Mapping[str, Any]) -> dict[str, Any]:
    """Where an external agent's cards go: ``{"platform": "console"}`` or a Slack or
    Discord channel."""
    copied = dict(approvals)
    platform = copied.get("platform", "console")
    if platform not in _CARD_PLATFORMS:
        raise ConfigurationError(
            f"{where}: platform {platform!r} is not one of {', '.join(_CARD_PLATFORMS)}"
        )
    copied["platform"] = platform
    if platform != "console":
        channel = copied.get("channel")
        if not isinstance(channel, str) or not channel:
            raise ConfigurationError(f"{where}: {platform} approvals need a 'channel' id")
    reserved = _RESERVED_ORIGIN & copied.keys()
    if reserved:
        raise ConfigurationError(f"{where}: approvals may not set {', '.join(sorted(reserved))}")
    return copied


# -- messages ------------------------------------------------------------------------------


def _path(loc: Sequence[str | int]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            key = part if _NAME.fullmatch(part) else '"' + part.replace('"', '\\"') + '"'
            out += ("." if out else "") + key
    return out or "(top level)"


def _line(lines: Mapping[tuple[str, ...], int], loc: Sequence[str | int]) -> str:
    keys = tuple(str(p) for p in loc if isinstance(p, str))
    for size in range(len(keys), 0, -1):
        if keys[:size] in lines:
            return f" (line {lines[keys[:size]]})"
    return ""


def _describe(exc: ValidationError, lines: Mapping[tuple[str, ...], int]) -> str:
    problems = []
    for error in exc.errors():
        # The tag saying which kind of agent a table was read as is no key of the file.
        loc = [p for p in error["loc"] if isinstance(p, str | int) and p not in _TAGS]
        message = str(error["msg"]).removeprefix("Value error, ")
        match error["type"]:
            case "extra_forbidden":
                message = "unknown key"
            case "missing":
                message = "missing (required)"
        problems.append(f"{_path(loc)}{_line(lines, loc)}: {message}")
    return "; ".join(problems)


_TAGS = frozenset({_OWN_TAG, _EXTERNAL_TAG})
_KEY = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
_DOTTED = rf"{_KEY}(?:\s*\.\s*{_KEY})*"
_HEADER = re.compile(rf"^\s*\[\[?\s*({_DOTTED})\s*\]\]?\s*(?:#.*)?$")
_ASSIGN = re.compile(rf"^\s*({_DOTTED})\s*=")


def _split_key(dotted: str) -> tuple[str, ...]:
    parts = re.findall(_KEY, dotted)
    return tuple(p[1:-1] if p[:1] in "\"'" else p for p in parts)


def _key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Where each table and key starts, roughly (enough to point at a line)."""
    found: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            table = _split_key(header.group(1))
            found.setdefault(table, number)
            continue
        assign = _ASSIGN.match(line)
        if assign:
            found.setdefault(table + _split_key(assign.group(1)), number)
    return found


__all__ = ["PROVIDERS", "AgentsFile", "import_object", "load_agents_file"]
