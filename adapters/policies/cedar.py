"""Cedar policies (``cedarpy``): permit lets a call run, forbid denies it, and a call
no policy permits asks a person.

Each call is one request: principal ``User::"<requester>"`` (a member of
``Group::"<name>"`` for each of the requester's groups), action ``Action::"call"``,
resource ``Tool::"<tool>"`` (in ``Agent::"<agent>"``) and the call in ``context``
(``args``, ``agent``, ``agent_version``, ``tool``, ``run_id``, ``thread_id``, ``source``,
``time``, ``epoch_seconds``, ``hour_utc``, ``weekday_utc``, ``requester_groups``). Cedar
has no null and no decimals in its JSON: null arguments are left out and decimals are
passed as text.

- a ``forbid`` matches: deny (its ``@reason("...")`` is the reason);
- a ``permit`` matches and none of the permits that matched carries ``@ask``: allow;
- the permits that matched carry ``@ask``: ask, with the approvers of their
  ``@approvers("a, group:b")``, the shortest ``@deadline_seconds("600")`` and a
  ``@reason``;
- nothing matches: ask, with the tool's approvers.

An error while evaluating any policy fails the call closed: Cedar would skip the policy,
and a skipped ``forbid`` must not let a call through.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import cedarpy

from adapters.policies._file import FilePolicy
from runtime import Permission
from runtime.edges import PolicyAnswer, PolicyCall, PolicyError

_LONG = 2**63


@dataclass(frozen=True)
class CompiledCedar:
    """A Cedar policy set with each policy's annotations, by Cedar's policy id."""

    text: str
    annotations: dict[str, dict[str, str | None]]


class CedarPolicy(FilePolicy[CompiledCedar]):
    """A Cedar policy file (see the module's docstring for how it answers)."""

    def compile(self, text: str) -> CompiledCedar:
        """Parse the policy set and read its annotations."""
        try:
            parsed = json.loads(cedarpy.policies_to_json_str(text))
        except ValueError as exc:
            raise PolicyError(f"Cedar policy {self.path} does not parse: {exc}") from None
        found = parsed.get("staticPolicies", {})
        return CompiledCedar(
            text=text,
            annotations={pid: dict(p.get("annotations") or {}) for pid, p in found.items()},
        )

    def decide(self, compiled: CompiledCedar, call: PolicyCall) -> PolicyAnswer:
        """Evaluate the call as one Cedar request."""
        requester = call.requester or ""
        entities: list[dict[str, Any]] = [
            {
                "uid": {"type": "User", "id": requester},
                "attrs": {},
                "parents": [{"type": "Group", "id": g} for g in call.requester_groups],
            },
            *(
                {"uid": {"type": "Group", "id": g}, "attrs": {}, "parents": []}
                for g in call.requester_groups
            ),
            {"uid": {"type": "Agent", "id": call.agent}, "attrs": {}, "parents": []},
            {
                "uid": {"type": "Tool", "id": call.tool},
                "attrs": {},
                "parents": [{"type": "Agent", "id": call.agent}],
            },
        ]
        document = call.as_input()
        context = {
            key: _cedar_value(value)
            for key, value in document.items()
            if key not in {"requester"} and value is not None
        }
        if call.requester is not None:
            context["requester"] = call.requester
        request = {
            "principal": {"type": "User", "id": requester},
            "action": {"type": "Action", "id": "call"},
            "resource": {"type": "Tool", "id": call.tool},
            "context": context,
        }
        try:
            result = cedarpy.is_authorized(request, compiled.text, entities)
        except Exception as exc:
            raise PolicyError(f"Cedar failed: {exc}") from None
        errors = list(result.diagnostics.errors)
        if errors:
            raise PolicyError("Cedar: " + "; ".join(errors))
        reasons = list(result.diagnostics.reasons)
        chosen = [compiled.annotations.get(pid, {}) for pid in reasons]
        match result.decision:
            case cedarpy.Decision.Deny if reasons:
                return PolicyAnswer(Permission.DENY, reason=_first(chosen, "reason"))
            case cedarpy.Decision.Deny:
                return PolicyAnswer(Permission.ASK, reason="no Cedar policy permits the call")
            case cedarpy.Decision.Allow:
                asking = [a for a in chosen if "ask" in a]
                if not asking:
                    return PolicyAnswer(Permission.ALLOW, reason=_first(chosen, "reason"))
                return _asking(asking)
            case _:
                raise PolicyError(f"Cedar reached no decision ({result.decision})")


def _asking(asking: list[dict[str, str | None]]) -> PolicyAnswer:
    approvers: list[str] = []
    deadlines: list[int] = []
    for found in asking:
        named = found.get("approvers")
        if named is not None:
            approvers += [a.strip() for a in named.split(",") if a.strip()]
        seconds = found.get("deadline_seconds")
        if seconds is not None:
            try:
                deadlines.append(int(seconds))
            except ValueError:
                raise PolicyError(f"@deadline_seconds({seconds!r}) is not a number") from None
    if any(d <= 0 for d in deadlines):
        raise PolicyError("@deadline_seconds must be positive")
    return PolicyAnswer(
        Permission.ASK,
        approvers=tuple(dict.fromkeys(approvers)) or None,
        deadline=timedelta(seconds=min(deadlines)) if deadlines else None,
        reason=_first(asking, "reason"),
    )


def _first(annotations: list[dict[str, str | None]], key: str) -> str | None:
    return next((a[key] for a in annotations if a.get(key)), None)


def _cedar_value(value: Any) -> Any:
    """`value` as Cedar's JSON holds it: no nulls, whole numbers within a long, the rest
    as text."""
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value if -_LONG <= value < _LONG else str(value)
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < _LONG else repr(value)
    if isinstance(value, dict):
        return {str(k): _cedar_value(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_cedar_value(v) for v in value if v is not None]
    return str(value)
