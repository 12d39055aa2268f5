"""The agents file's policies: ``[policies.<id>]`` tables, and each agent's ``policy``.

::

    [policies.prod-guard]
    engine = "cedar"                 # or "rego"
    file = "policies/prod.cedar"     # relative to the agents file
    version = "2026-05-01"           # optional; default: the file's digest
    on_error = "ask"                 # or "deny": what a call gets when the policy fails
    timeout = 2.0                    # seconds it has to answer
    query = "data.signoff.decision"  # Rego only: the rule that answers

    [agents.ops]
    policy = "prod-guard"
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from adapters.policies import FilePolicy, load_policy
from runtime import Agent, ConfigurationError, Permission
from runtime.edges import DEFAULT_POLICY_TIMEOUT, PolicyError


class PolicySpec(BaseModel):
    """One ``[policies.<id>]`` table."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: Literal["cedar", "rego"]
    file: str = Field(min_length=1)
    version: str | None = Field(default=None, min_length=1)
    on_error: Literal["ask", "deny"] = "ask"
    timeout: float = Field(default=DEFAULT_POLICY_TIMEOUT, gt=0, le=60)
    query: str | None = None


def build_policies(
    specs: Mapping[str, PolicySpec], base: Path, at: Callable[..., str]
) -> dict[str, FilePolicy[Any]]:
    """The file's policies by id, each file read and parsed now.

    Args:
        specs: The ``[policies]`` tables.
        base: The agents file's directory (relative ``file`` paths start there).
        at: Names a key path of the agents file in messages.

    Raises:
        ConfigurationError: A file is missing or does not parse, or a key does not fit
            its engine.
    """
    built: dict[str, FilePolicy[Any]] = {}
    for policy_id, spec in specs.items():
        if spec.query is not None and spec.engine != "rego":
            raise ConfigurationError(f"{at('policies', policy_id, 'query')}: only Rego has a query")
        path = Path(spec.file)
        if not path.is_absolute():
            path = base / path
        try:
            built[policy_id] = load_policy(
                spec.engine,
                path,
                policy_id=policy_id,
                version=spec.version,
                on_error=Permission(spec.on_error),
                timeout=spec.timeout,
                query=spec.query,
            )
        except PolicyError as exc:
            raise ConfigurationError(f"{at('policies', policy_id)}: {exc}") from None
    return built


def attach_policies(
    agents: Mapping[str, Agent],
    chosen: Mapping[str, str | None],
    policies: Mapping[str, FilePolicy[Any]],
    at: Callable[..., str],
) -> None:
    """Give each agent the policy its ``policy`` key names.

    Raises:
        ConfigurationError: An agent names a policy the file does not define.
    """
    for name, policy_id in chosen.items():
        if policy_id is None:
            continue
        if policy_id not in policies:
            known = ", ".join(sorted(policies)) or "none"
            raise ConfigurationError(
                f"{at('agents', name, 'policy')}: no policy named {policy_id!r} (defined: {known})"
            )
        agents[name].policy = policies[policy_id]
