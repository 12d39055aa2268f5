"""Build the concrete objects of a signoff process from its `Settings`.

Nothing here runs at import time; every function is called by the CLI (or a test).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from adapters.models import ModelOptions, ModelResolver, Price, parse_spec
from bot.identities import apply_identities
from bot.imports import import_object
from bot.settings import Settings, uses_sqlite
from runtime import (
    Agent,
    Clock,
    ConfigurationError,
    IdSource,
    Model,
    Runtime,
    SignoffError,
    StorageError,
)
from runtime.edges import NO_TRACER, Tracer
from runtime.store.sql import PoolOptions, SQLStore

if TYPE_CHECKING:
    from adapters.mcp.hub import McpHub
    from bot.agents_file import AgentsFile

    # Not re-exported by `runtime`: any callable taking (point, info) fits.
    from runtime.engine.deps import Checkpoint
    from runtime.store.base import Store


def _app_agents(settings: Settings) -> list[Agent]:
    """Import the agents named by ``SIGNOFF_APP`` (``package.module:attr``).

    ``attr`` may be dotted (``module:holder.agents``). It must be a list or tuple of
    `runtime.Agent` (a single agent is accepted too), or a zero-argument callable
    returning one. The working directory is importable, like ``python -m`` would have it.

    Raises:
        ConfigurationError: The module cannot be imported, the attribute is missing, or
            it does not give agents with unique names.
    """
    spec = settings.app
    where = f"SIGNOFF_APP={spec}"
    attr_path = spec.partition(":")[2].strip()
    target = import_object(spec, where)
    if callable(target) and not isinstance(target, Agent):
        try:
            target = target()
        except TypeError as exc:
            raise ConfigurationError(
                f"{where}: calling {attr_path} failed (it must take no arguments): {exc}"
            ) from exc
        except SignoffError:
            raise
        except Exception as exc:
            raise ConfigurationError(
                f"{where}: calling {attr_path} failed: {type(exc).__name__}: {exc}"
            ) from exc
    return with_model_setting(settings, _agents_from(target, where))


def with_model_setting(settings: Settings, agents: Sequence[Agent]) -> list[Agent]:
    """The agents, each on ``SIGNOFF_MODEL`` when it is set (copies; the originals stay)."""
    if settings.model is None:
        return list(agents)
    return [agent.with_model(settings.model) for agent in agents]


def model_options(settings: Settings) -> ModelOptions:
    """How provider models are built from the ``SIGNOFF_*`` model settings.

    The API keys fall back to the SDKs' own ``OPENAI_API_KEY`` and ``ANTHROPIC_API_KEY``.
    """

    def key(value: Any, fallback: str) -> str | None:
        if value is not None:
            return str(value.get_secret_value())
        return os.environ.get(fallback) or None

    return ModelOptions(
        openai_api_key=key(settings.openai_api_key, "OPENAI_API_KEY"),
        openai_base_url=settings.openai_base_url,
        anthropic_api_key=key(settings.anthropic_api_key, "ANTHROPIC_API_KEY"),
        anthropic_base_url=settings.anthropic_base_url,
        timeout_seconds=settings.model_timeout_seconds,
        max_retries=settings.model_max_retries,
        max_tokens=settings.model_max_tokens,
        stream=settings.stream_text,
        prices={
            spec: Price(
                input=price.input,
                output=price.output,
                cached_input=price.cached_input,
                cache_write=price.cache_write,
            )
            for spec, price in settings.model_prices.items()
        },
    )


class SettingsModelResolver(ModelResolver):
    """Builds agents' models from specs; a missing API key names its setting."""

    _KEYS = {
        "openai": ("openai_api_key", "SIGNOFF_OPENAI_API_KEY", "OPENAI_API_KEY"),
        "openai-responses": ("openai_api_key", "SIGNOFF_OPENAI_API_KEY", "OPENAI_API_KEY"),
        "anthropic": ("anthropic_api_key", "SIGNOFF_ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY"),
    }

    def __call__(self, spec: str) -> Model:
        """The model for `spec`.

        Raises:
            ConfigurationError: A bad spec, a missing extra, or no key for its provider.
        """
        provider, _ = parse_spec(spec)
        field, setting, fallback = self._KEYS[provider]
        if getattr(self.options, field) is None:
            raise ConfigurationError(
                f"{setting} is not set (nor {fallback}), and the model {spec} needs it"
            )
        return super().__call__(spec)


def model_resolver(settings: Settings) -> SettingsModelResolver:
    """The resolver of agents' model specs for this process's settings."""
    return SettingsModelResolver(model_options(settings))


def check_models(
    settings: Settings, agents: Sequence[Agent], resolve: Callable[[str], Model] | None = None
) -> None:
    """Resolve every model spec of `agents` once, so a missing key is reported now.

    Args:
        settings: The process settings.
        agents: The agents whose models to check.
        resolve: The resolver the runtime will use (its models are built once, and
            closed with the runtime); by default a throwaway one.

    Raises:
        ConfigurationError: Naming the agent and the setting.
    """
    resolve = resolve or model_resolver(settings)
    for agent in agents:
        if isinstance(agent.model, str):
            try:
                resolve(agent.model)
            except ConfigurationError as exc:
                raise ConfigurationError(f"agent {agent.name!r}: {exc}") from exc


@dataclass
class LoadedAgents:
    """The agents of ``SIGNOFF_APP`` and ``SIGNOFF_AGENTS``, and the MCP servers they use.

    The agents file's MCP tools join their agents' catalogs once `start` has connected
    the servers; `close` disconnects them (stdio servers are stopped).

    Attributes:
        agents: Every agent, names unique.
        origin: Where they came from, for people (``examples:demo_agents``, a file).
        file: The agents file, if one is set.
    """

    agents: list[Agent]
    origin: str
    file: AgentsFile | None = None
    sign_ins: Any = None  # adapters.mcp.oauth.SignIns of the OAuth servers, if any
    _hub: McpHub | None = field(default=None, repr=False)

    async def start(self) -> None:
        """Connect the MCP servers and list their tools (waits for each first attempt).

        Raises:
            ConfigurationError: The ``mcp`` extra is missing, or a rule names a tool that
                a reachable server does not have.
        """
        if self.file is None or not self.file.bindings or self._hub is not None:
            return
        try:
            from adapters.mcp.hub import McpHub
        except ImportError as exc:
            raise ConfigurationError(
                f"SIGNOFF_AGENTS={self.file.path}: MCP servers need the MCP SDK: "
                f"pip install 'signoff[mcp]' ({exc})"
            ) from exc
        sign_ins = self.sign_ins
        hub = McpHub(
            self.file.servers,
            self.file.bindings,
            oauth=sign_ins.auth if sign_ins is not None else None,
        )
        if sign_ins is not None:
            sign_ins.on_signed_in.append(
                lambda server: (
                    hub.connections[server].retry_now() if server in hub.connections else None
                )
            )
        await hub.start()
        self._hub = hub

    def mcp_unavailable(self) -> dict[str, str]:
        """Why each MCP server that is not connected is not (e.g. it needs a sign-in)."""
        if self._hub is None:
            return {}
        connections = self._hub.connections
        return {n: c.reason or "not connected" for n, c in connections.items() if not c.up}

    def use_store(self, store: Store) -> None:
        """Keep the OAuth servers' sign-ins in `store` (the runtime's)."""
        if self.sign_ins is not None:
            self.sign_ins.records.use(store)

    async def close(self) -> None:
        """Disconnect the MCP servers."""
        hub, self._hub = self._hub, None
        if hub is not None:
            await hub.stop()
        if self.sign_ins is not None:
            await self.sign_ins.records.close()

    def attach(self, runtime: Runtime) -> None:
        """Let the MCP servers with ``elicitation`` ask people for input during calls of
        `runtime`'s runs (`adapters.mcp.hub.McpHub.attach`)."""
        if self._hub is not None:
            self._hub.attach(runtime)

    def mcp_extras(self) -> dict[str, tuple[list[tuple[str, str]], list[tuple[str, str]]]]:
        """Each connected MCP server's resources (URI, description) and prompts (name,
        description), as it listed them."""
        if self._hub is None:
            return {}
        return {
            name: (
                [(r.uri, r.description or r.name) for r in connection.resources],
                [(p.name, p.description or "") for p in connection.prompts],
            )
            for name, connection in sorted(self._hub.connections.items())
        }

    def source_of(self, agent: str, tool: str) -> str:
        """``python``, or ``mcp:<server>`` for an MCP tool."""
        found = self._hub.source_of(agent, tool) if self._hub is not None else None
        return found or "python"

    def origin_of(self, agent: str, tool: str) -> tuple[str, str] | None:
        """Where an MCP tool's permission and replay policy came from (``rule``,
        ``annotation`` or ``default`` each); None for a Python tool."""
        return self._hub.origin_of(agent, tool) if self._hub is not None else None

    @property
    def mcp_servers(self) -> list[str]:
        """The names of the connected MCP servers."""
        return sorted(self._hub.connections) if self._hub is not None else []

    async def refresh_mcp(self, server: str) -> int:
        """List an MCP server's tools again now; how many it has.

        Raises:
            LookupError: No connected server has that name.
            ConnectionError: The server did not list its tools in time.
        """
        if self._hub is None or server not in self._hub.connections:
            raise LookupError(server)
        from adapters.mcp.connection import McpServerUnavailable

        try:
            return await self._hub.refresh(server)
        except McpServerUnavailable as exc:
            raise ConnectionError(str(exc)) from None


def load_agent_set(settings: Settings) -> LoadedAgents:
    """The agents of ``SIGNOFF_APP`` and of the agents file ``SIGNOFF_AGENTS``, combined.

    ``SIGNOFF_APP``'s default (the bundled examples) is loaded only when no agents file is
    set; set both to combine them. Nothing is connected yet (see `LoadedAgents.start`).

    Raises:
        ConfigurationError: Either source is invalid, or both define an agent's name.
    """
    agents: list[Agent] = []
    origins: list[str] = []
    if settings.agents is None or "app" in settings.model_fields_set:
        agents.extend(_app_agents(settings))
        origins.append(settings.app)
    file = None
    if settings.agents is not None:
        from bot.agents_file import load_agents_file

        headers = {
            server: {k: v.get_secret_value() for k, v in values.items()}
            for server, values in settings.mcp_headers.items()
        }
        file = load_agents_file(settings.agents, mcp_headers=headers)
        taken = {agent.name for agent in agents}
        for agent in file.agents:
            if agent.name in taken:
                raise ConfigurationError(
                    f"SIGNOFF_AGENTS={settings.agents}: agent {agent.name!r} is also defined "
                    f"by SIGNOFF_APP={settings.app}"
                )
        agents.extend(file.agents)
        origins.append(str(settings.agents))
    sign_ins = None
    if file is not None:
        from bot.mcp_oauth import oauth_sign_ins

        sign_ins = oauth_sign_ins(settings, file.servers, lambda: migrated_store(settings))
    return LoadedAgents(agents, " and ".join(origins), file, sign_ins=sign_ins)


def load_agents(settings: Settings) -> list[Agent]:
    """The agents of ``SIGNOFF_APP`` and ``SIGNOFF_AGENTS`` (see `load_agent_set`).

    MCP tools are not in their catalogs: use `connected_agents` for those.

    Raises:
        ConfigurationError: The agents cannot be loaded.
    """
    return load_agent_set(settings).agents


@asynccontextmanager
async def connected_agents(settings: Settings) -> AsyncIterator[LoadedAgents]:
    """`load_agent_set`, with the MCP servers connected for the block.

    Raises:
        ConfigurationError: The agents cannot be loaded or a rule names no MCP tool.
    """
    loaded = load_agent_set(settings)
    await loaded.start()
    try:
        yield loaded
    finally:
        await loaded.close()


def _agents_from(value: Any, where: str) -> list[Agent]:
    if isinstance(value, Agent):
        return [value]
    if not isinstance(value, list | tuple):
        raise ConfigurationError(
            f"{where}: expected a list or tuple of runtime.Agent (or a callable returning "
            f"one), got {type(value).__name__}"
        )
    agents: list[Agent] = []
    seen: set[str] = set()
    for index, item in enumerate(value):
        if not isinstance(item, Agent):
            raise ConfigurationError(
                f"{where}: item {index} is a {type(item).__name__}, not a runtime.Agent"
            )
        if item.name in seen:
            raise ConfigurationError(f"{where}: two agents are named {item.name!r}")
        seen.add(item.name)
        agents.append(item)
    if not agents:
        raise ConfigurationError(f"{where}: gave no agents")
    return agents


def open_store(settings: Settings) -> SQLStore:
    """Open (but do not migrate) the SQL store named by ``SIGNOFF_DATABASE_URL``.

    Raises:
        ConfigurationError: The URL cannot be used (malformed, or its driver is missing).
    """
    try:
        if uses_sqlite(settings):
            return SQLStore.from_url(
                settings.database_url,
                busy_timeout_ms=settings.sqlite_busy_timeout_ms,
                synchronous=settings.sqlite_synchronous,
            )
        return SQLStore.from_url(
            settings.database_url,
            pool=PoolOptions(
                size=settings.database_pool_size,
                max_overflow=settings.database_max_overflow,
                timeout_seconds=settings.database_pool_timeout_seconds,
                recycle_seconds=settings.database_pool_recycle_seconds or None,
            ),
            pooler=settings.database_pooler,
            listen_url=settings.database_listen_url,
        )
    except SignoffError:
        raise
    except ImportError as exc:
        raise ConfigurationError(
            f"SIGNOFF_DATABASE_URL: the database driver is not installed ({exc}); "
            "for PostgreSQL install the postgres extra (pip install -e '.[postgres]')"
        ) from exc
    except Exception as exc:  # SQLAlchemy's URL and dialect errors
        raise ConfigurationError(f"SIGNOFF_DATABASE_URL: {exc}") from exc


async def migrated_store(settings: Settings) -> SQLStore:
    """Open the store and bring its schema to the newest migration.

    With ``SIGNOFF_AUTO_MIGRATE=false`` the schema is only checked: it must be current,
    or newer and backward-compatible (``signoff migrate`` upgrades it).

    Raises:
        ConfigurationError: The URL cannot be used.
        StorageError: The database cannot be reached or migrated, or (not migrating)
            its schema cannot be used by this version.
    """
    store = open_store(settings)
    try:
        if settings.auto_migrate:
            await store.migrate()
        else:
            status = await store.schema_status()
            if not status.usable:
                raise StorageError(f"{status.describe()} (SIGNOFF_AUTO_MIGRATE is false)")
    except BaseException:
        await store.close()
        raise
    return store


async def build_runtime(
    settings: Settings,
    agents: Sequence[Agent] | None = None,
    *,
    checkpoint: Checkpoint | None = None,
    store: Store | None = None,
    clock: Clock | None = None,
    ids: IdSource | None = None,
    worker_id: str | None = None,
    resolver: Callable[[str], Model] | None = None,
    tracer: Tracer = NO_TRACER,
) -> tuple[Runtime, Store]:
    """Build a `Runtime` over a migrated SQL store.

    Args:
        settings: The process settings.
        agents: The agents to run; by default `load_agents` (without MCP tools; pass
            `connected_agents`' for those).
        checkpoint: Observer of the runtime's named execution points (metrics, tests).
        store: The store to use as it is (not migrated; the caller closes it); by
            default the migrated store of ``SIGNOFF_DATABASE_URL``.
        clock: The runtime's time source (default: the system clock).
        ids: The runtime's id source (default: random ids).
        worker_id: Names this process in leases (default: host and process id).
        resolver: Builds agents' models from their specs (default: from the
            ``SIGNOFF_*`` model settings).
        tracer: Where the runtime's spans go (default: nowhere; see ``docs/tracing.md``).

    Returns:
        The runtime and its store; when done, close the runtime (`Runtime.aclose`: the
        model clients it built) and then the store.

    Raises:
        ConfigurationError: Bad ``SIGNOFF_APP`` or ``SIGNOFF_DATABASE_URL``, or an agent's
            model cannot be built (no API key for its provider: the message names the
            setting).
        StorageError: The database cannot be reached or migrated.
    """
    # ``SIGNOFF_MODEL`` was applied to SIGNOFF_APP's agents when they were loaded; agents
    # of an agents file keep the model the file names.
    chosen = list(agents) if agents is not None else load_agents(settings)
    # Models first: a missing key is reported before the database is touched.
    resolve = resolver or model_resolver(settings)
    check_models(settings, chosen, resolve)
    opened = store if store is not None else await migrated_store(settings)
    try:
        runtime = Runtime(
            opened,
            chosen,
            clock=clock,
            ids=ids,
            worker_id=worker_id,
            lease_seconds=settings.lease_seconds,
            checkpoint=checkpoint,
            model_resolver=resolve,
            undeclared_agents=settings.external_agents,
            tracer=tracer,
        )
        await apply_identities(settings, runtime)
    except BaseException:
        if store is None:
            await opened.close()
        raise
    return runtime, opened


__all__ = [
    "LoadedAgents",
    "SettingsModelResolver",
    "build_runtime",
    "check_models",
    "connected_agents",
    "load_agent_set",
    "load_agents",
    "migrated_store",
    "model_options",
    "model_resolver",
    "open_store",
    "with_model_setting",
]
