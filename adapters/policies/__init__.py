"""Policies as code: Cedar and Rego policy files an agent consults for every tool call.

`load_policy` builds one from its engine's name and file; each engine lives in its own
module (`cedar`, `rego`) and needs the ``policies`` extra (``cedarpy``, ``regopy``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, assert_never

from adapters.policies._file import FilePolicy, PolicyFile
from runtime import Permission
from runtime.edges import PolicyError

Engine = Literal["cedar", "rego"]
"""The policy engines signoff ships."""

ENGINES: tuple[Engine, ...] = ("cedar", "rego")


def load_policy(
    engine: Engine,
    path: Path | str,
    *,
    policy_id: str = "policy",
    version: str | None = None,
    on_error: Permission = Permission.ASK,
    timeout: float | None = None,
    query: str | None = None,
) -> FilePolicy[Any]:
    """A policy of `engine` read from `path`.

    Args:
        engine: ``cedar`` or ``rego``.
        path: The policy file.
        policy_id: Its id, recorded with its answers.
        version: Its version (default: ``sha256:`` and the first 12 hex digits of the
            file's digest).
        on_error: What a call gets when the policy fails: ask or deny.
        timeout: Seconds it has to answer.
        query: For Rego, the rule answering (default ``data.signoff.decision``).

    Raises:
        PolicyError: The file cannot be read or does not parse, or the engine's package
            is not installed.
    """
    source = PolicyFile(Path(path))
    # Each engine's package is imported only when a policy uses it.
    try:
        match engine:
            case "cedar":
                from adapters.policies.cedar import CedarPolicy

                return CedarPolicy(policy_id, source, version, on_error, timeout)
            case "rego":
                from adapters.policies.rego import DEFAULT_QUERY, RegoPolicy

                return RegoPolicy(
                    policy_id, source, version, on_error, timeout, query or DEFAULT_QUERY
                )
            case _:
                assert_never(engine)
    except ImportError as exc:
        raise PolicyError(
            f"{engine} policies need the {exc.name} package: pip install 'signoff[policies]'"
        ) from None


__all__ = ["ENGINES", "Engine", "FilePolicy", "PolicyFile", "load_policy"]
