"""Per-tool settings chosen by name or glob, and argument rules without code.

A `ToolKnobs` entry names tools by pattern (`fnmatch`, e.g. ``"github.*"``): MCP tools by
``<server>.<tool>``, Python tools by their name. It may set any of a tool's options, and
*conditions* over the call's arguments that change the permission::

    ToolKnobs("infra.deploy", permission=Permission.ALLOW,
              ask_if=(Condition.parse({"environment": "production"}, where="..."),))

A condition is a table of argument paths (``"target.branch"`` for nested objects) to
matchers, all of which must hold: a plain value means equality, a one-entry table names an
operator (``eq``, ``ne``, ``gt``, ``ge``, ``lt``, ``le``, ``in``, ``not_in``, ``glob``).
A matcher on a missing argument, or on a value of another type, does not hold. When
several lists have a matching condition, ``deny_if`` beats ``ask_if`` beats ``allow_if``;
when none matches, the base permission applies. Nothing is evaluated as code.

This module has no MCP dependency: the agents file applies the same knobs to Python tools.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from runtime import ConfigurationError, GrantScope, Permission, ReplayPolicy, Tool
from runtime.edges import (
    NUMERIC,
    OPERATORS,
    OnExpiry,
    PermissionRule,
    coerce_decide_in,
    coerce_grants,
    is_number,
    lookup,
    passes,
)

_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class Matcher:
    """One test on one argument.

    Attributes:
        path: The argument's keys, outermost first (``("target", "branch")``).
        op: One of `OPERATORS`.
        operand: The value compared with.
    """

    path: tuple[str, ...]
    op: str
    operand: Any

    def holds(self, args: Mapping[str, Any]) -> bool:
        """Whether the call's arguments pass this test."""
        found, value = lookup(args, self.path)
        return found and passes(self.op, value, self.operand)

    def describe(self) -> str:
        """E.g. ``environment == 'production'``."""
        return f"{'.'.join(self.path)} {OPERATORS[self.op]} {self.operand!r}"


@dataclass(frozen=True)
class Condition:
    """Matchers that must all hold."""

    matchers: tuple[Matcher, ...]

    @classmethod
    def parse(cls, table: Any, *, where: str) -> Condition:
        """Read ``{"environment": "production", "replicas": {"gt": 10}}``.

        Args:
            table: The condition as loaded from the file.
            where: How to name it in an error (file and key path).

        Raises:
            ConfigurationError: An empty condition, an unknown operator or an operand of
                the wrong type.
        """
        if not isinstance(table, Mapping) or not table:
            raise ConfigurationError(
                f"{where}: a condition is a table of argument names to values, "
                'e.g. { environment = "production" }'
            )
        matchers = []
        for name, spec in table.items():
            here = f"{where}.{name}"
            path = tuple(str(name).split("."))
            if not all(path):
                raise ConfigurationError(f"{here}: an argument path cannot have empty parts")
            if isinstance(spec, Mapping):
                if len(spec) != 1:
                    raise ConfigurationError(
                        f"{here}: give exactly one operator ({', '.join(OPERATORS)})"
                    )
                [(op, operand)] = spec.items()
                matchers.append(_matcher(path, str(op), operand, here))
            elif isinstance(spec, list):
                raise ConfigurationError(
                    f"{here}: to match one of several values use {{ in = [...] }}"
                )
            else:
                matchers.append(Matcher(path, "eq", spec))
        return cls(tuple(matchers))

    def holds(self, args: Mapping[str, Any]) -> bool:
        """Whether every matcher holds."""
        return all(m.holds(args) for m in self.matchers)

    def describe(self) -> str:
        """E.g. ``environment == 'production' and replicas > 10``."""
        return " and ".join(m.describe() for m in self.matchers)

    @property
    def arguments(self) -> set[str]:
        """The top-level argument names the condition reads."""
        return {m.path[0] for m in self.matchers}


def _matcher(path: tuple[str, ...], op: str, operand: Any, where: str) -> Matcher:
    if op not in OPERATORS:
        raise ConfigurationError(
            f"{where}: unknown operator {op!r} (use one of {', '.join(OPERATORS)})"
        )
    if op in NUMERIC and not is_number(operand):
        raise ConfigurationError(f"{where}.{op}: expected a number, got {operand!r}")
    if op in ("in", "not_in") and not isinstance(operand, list):
        raise ConfigurationError(f"{where}.{op}: expected a list of values, got {operand!r}")
    if op == "glob" and not isinstance(operand, str):
        raise ConfigurationError(f"{where}.{op}: expected a string pattern, got {operand!r}")
    if isinstance(operand, Mapping) or (
        isinstance(operand, list) and any(isinstance(x, Mapping | list) for x in operand)
    ):
        raise ConfigurationError(f"{where}.{op}: compare with plain values, not tables")
    return Matcher(path, op, tuple(operand) if isinstance(operand, list) else operand)


class ArgumentRules:
    """A permission rule (`runtime.domain.tools.PermissionRule`) built from conditions.

    ``deny_if`` beats ``ask_if`` beats ``allow_if``; with no match, `base` decides (a fixed
    permission or another rule, such as a Python tool's own).
    """

    def __init__(
        self,
        base: Permission | PermissionRule,
        *,
        deny_if: Sequence[Condition] = (),
        ask_if: Sequence[Condition] = (),
        allow_if: Sequence[Condition] = (),
    ) -> None:
        self.base = base
        self.lists = (
            (Permission.DENY, tuple(deny_if)),
            (Permission.ASK, tuple(ask_if)),
            (Permission.ALLOW, tuple(allow_if)),
        )
        self.__name__ = "rules"
        self.__doc__ = self.describe()
        # Part of the catalog fingerprint: a changed rule makes parked tickets stale.
        self.__qualname__ = "rules:" + json.dumps(
            [[p.value, [c.describe() for c in conditions]] for p, conditions in self.lists]
            + [self._base_label()]
        )

    def __call__(self, args: dict[str, Any]) -> Permission | str:
        """The permission for a call with these (validated) arguments."""
        for permission, conditions in self.lists:
            if any(c.holds(args) for c in conditions):
                return permission
        if isinstance(self.base, Permission):
            return self.base
        return self.base(args)

    def _base_label(self) -> str:
        if isinstance(self.base, Permission):
            return self.base.value
        return getattr(self.base, "__name__", "its own rule")

    def describe(self) -> str:
        """E.g. ``ask if environment == 'production'; else allow``."""
        parts = [
            f"{permission.value} if {' or '.join(c.describe() for c in conditions)}"
            for permission, conditions in self.lists
            if conditions
        ]
        return "; ".join([*parts, f"else {self._base_label()}"])


def is_glob(pattern: str) -> bool:
    """Whether `pattern` has glob characters (else it names one tool exactly)."""
    return any(c in _GLOB_CHARS for c in pattern)


def check_pattern(pattern: str, where: str) -> None:
    """Refuse a pattern that cannot name a tool.

    Raises:
        ConfigurationError: It is empty, has spaces or an unclosed ``[``.
    """
    if not pattern or any(c.isspace() for c in pattern):
        raise ConfigurationError(f"{where}: {pattern!r} is not a tool name or glob")
    depth = 0
    for char in pattern:
        if char == "[":
            depth += 1
        elif char == "]" and depth:
            depth -= 1
    if depth:
        raise ConfigurationError(f"{where}: the glob {pattern!r} has an unclosed '['")


@dataclass(frozen=True)
class ToolKnobs:
    """Settings for the tools whose names match `pattern`; None leaves an option alone.

    Attributes:
        pattern: A tool name or an `fnmatch` glob (``"infra.*"``).
        where: Where it was declared, for error messages.
        permission: The base permission.
        deny_if: Conditions under which calls are denied.
        ask_if: Conditions under which calls wait for a person.
        allow_if: Conditions under which calls run at once.
        replay_policy: ``manual``, ``safe`` or ``idempotent``.
        approvers: Who may decide.
        four_eyes: Forbid the requester from deciding.
        deadline: Decision deadline.
        secret: Argument names masked wherever a person or a log sees them.
        editable: Whether an approver may change arguments before allowing (True, False,
            or the names of those that may change; see `runtime.domain.edits`).
        on_expiry: What happens when the deadline passes.
        grants: The standing grants an approver may give (``("run",)``, ``("run",
            "thread")``, ``()``).
        hide: Whether the model is not offered the tool (by default a tool whose
            permission is ``deny`` without argument rules is hidden).
        decide_in: Step-up: the only places its calls may be decided.
        sso: Step-up: a console decision must come from a single sign-on session.
    """

    pattern: str
    where: str = ""
    permission: Permission | None = None
    deny_if: tuple[Condition, ...] = ()
    ask_if: tuple[Condition, ...] = ()
    allow_if: tuple[Condition, ...] = ()
    replay_policy: ReplayPolicy | None = None
    approvers: tuple[str, ...] | None = None
    four_eyes: bool | None = None
    deadline: timedelta | None = None
    secret: tuple[str, ...] | None = None
    editable: bool | tuple[str, ...] | None = None
    on_expiry: OnExpiry | None = None
    grants: tuple[GrantScope, ...] | None = None
    hide: bool | None = None
    decide_in: tuple[str, ...] | None = None
    sso: bool | None = None

    def matches(self, name: str) -> bool:
        """Whether this entry applies to the tool named `name`."""
        return fnmatch.fnmatchcase(name, self.pattern)

    @property
    def conditions(self) -> tuple[Condition, ...]:
        """Every condition of the entry."""
        return self.deny_if + self.ask_if + self.allow_if


@dataclass(frozen=True)
class Settled:
    """The options of one tool after every matching `ToolKnobs` entry was applied."""

    permission: Permission | None = None
    deny_if: tuple[Condition, ...] = ()
    ask_if: tuple[Condition, ...] = ()
    allow_if: tuple[Condition, ...] = ()
    replay_policy: ReplayPolicy | None = None
    approvers: tuple[str, ...] | None = None
    four_eyes: bool | None = None
    deadline: timedelta | None = None
    secret: tuple[str, ...] | None = None
    editable: bool | tuple[str, ...] | None = None
    on_expiry: OnExpiry | None = None
    grants: tuple[GrantScope, ...] | None = None
    hide: bool | None = None
    decide_in: tuple[str, ...] | None = None
    sso: bool | None = None
    sources: tuple[ToolKnobs, ...] = field(default=())

    def permission_rule(self, default: Permission | PermissionRule) -> Permission | PermissionRule:
        """The permission to give the tool; `default` when nothing set one."""
        base = self.permission or default
        if not (self.deny_if or self.ask_if or self.allow_if):
            return base
        return ArgumentRules(base, deny_if=self.deny_if, ask_if=self.ask_if, allow_if=self.allow_if)

    def hidden(self, permission: Permission | PermissionRule) -> bool:
        """Whether the model is not offered a tool with these settings and `permission`:
        ``hide`` if set, else whether every call is denied."""
        if self.hide is not None:
            return self.hide
        return permission is Permission.DENY


def settle(name: str, knobs: Iterable[ToolKnobs]) -> Settled:
    """Apply every entry matching `name`: globs first (in order), then exact names.

    A later entry overrides the options it sets; its conditions replace earlier ones of
    the same list.
    """
    matching = [k for k in knobs if k.matches(name)]
    ordered = [k for k in matching if is_glob(k.pattern)] + [
        k for k in matching if not is_glob(k.pattern)
    ]
    settled = Settled()
    for entry in ordered:
        changes: dict[str, Any] = {
            key: getattr(entry, key)
            for key in (
                "permission",
                "replay_policy",
                "approvers",
                "four_eyes",
                "deadline",
                "secret",
                "editable",
                "on_expiry",
                "grants",
                "hide",
                "decide_in",
                "sso",
            )
            if getattr(entry, key) is not None
        }
        for key in ("deny_if", "ask_if", "allow_if"):
            if getattr(entry, key):
                changes[key] = getattr(entry, key)
        settled = replace(settled, **changes, sources=(*settled.sources, entry))
    return settled


def apply_to_tool(item: Tool, settled: Settled) -> Tool:
    """`item` with the settled options applied (a Python tool named in an agents file).

    Raises:
        ConfigurationError: A secret or editable name is not one of the tool's arguments,
            an editable one is secret, or grants on a four-eyes tool.
    """
    if not settled.sources:
        return item
    secret = frozenset(settled.secret) if settled.secret is not None else item.secret
    unknown = secret - set(item.parameters.get("properties", {}))
    if unknown and "properties" in item.parameters:
        where = settled.sources[-1].where
        raise ConfigurationError(
            f"{where}: tool {item.name!r} has no arguments named {', '.join(sorted(unknown))}"
        )
    editable = item.editable
    if settled.editable is not None:
        properties = item.parameters.get("properties")
        editable = settled_editable(
            settled.editable,
            set(properties) if isinstance(properties, dict) else None,
            secret,
            settled.sources[-1].where + f": tool {item.name!r}",
        )
    return replace(
        item,
        permission=settled.permission_rule(item.permission),
        replay_policy=(
            settled.replay_policy.value if settled.replay_policy is not None else item.replay_policy
        ),
        approvers=settled.approvers if settled.approvers is not None else item.approvers,
        four_eyes=settled.four_eyes if settled.four_eyes is not None else item.four_eyes,
        deadline=settled.deadline if settled.deadline is not None else item.deadline,
        secret=secret,
        on_expiry=settled.on_expiry if settled.on_expiry is not None else item.on_expiry,
        grants=settled_grants(item.name, settled, item),
        editable=editable,
        decide_in=step_up_places(item.name, settled, item),
        sso=settled.sso if settled.sso is not None else item.sso,
    )


def step_up_places(name: str, settled: Settled, item: Tool | None = None) -> tuple[str, ...]:
    """The tool's ``decide_in`` once `settled` applies (`item`'s own where it sets none).

    Raises:
        ConfigurationError: An unknown place, or ``sso`` without the console.
    """
    places = (
        settled.decide_in if settled.decide_in is not None else (item.decide_in if item else ())
    )
    sso = settled.sso if settled.sso is not None else (item.sso if item else False)
    where = settled.sources[-1].where if settled.sources else ""
    try:
        return coerce_decide_in(name, places, sso)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}" if where else str(exc)) from None


def settled_grants(
    name: str, settled: Settled, item: Tool | None = None
) -> tuple[GrantScope, ...] | None:
    """The tool's ``grants`` once `settled` applies (`item`'s own where it sets none).

    Raises:
        ConfigurationError: Grants on a tool that is four-eyes itself.
    """
    grants = settled.grants if settled.grants is not None else (item.grants if item else None)
    four_eyes = (
        settled.four_eyes if settled.four_eyes is not None else (item.four_eyes if item else None)
    )
    where = settled.sources[-1].where if settled.sources else ""
    try:
        return coerce_grants(name, grants, four_eyes)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}" if where else str(exc)) from None


def settled_editable(
    editable: bool | tuple[str, ...],
    arguments: set[str] | None,
    secret: frozenset[str],
    where: str,
) -> bool | frozenset[str]:
    """An agents file's ``editable`` for one tool: a flag, or names of its arguments.

    Raises:
        ConfigurationError: A name is not one of the arguments, or is a secret one.
    """
    if isinstance(editable, bool):
        return editable
    chosen = frozenset(editable)
    unknown = chosen - arguments if arguments is not None else frozenset()
    if unknown:
        raise ConfigurationError(
            f"{where}: editable names no argument {', '.join(sorted(unknown))}"
        )
    hidden = chosen & secret
    if hidden:
        raise ConfigurationError(
            f"{where}: secret arguments cannot be editable: {', '.join(sorted(hidden))}"
        )
    return chosen


def check_arguments(settled: Settled, tool_name: str, schema: Mapping[str, Any]) -> list[str]:
    """Problems of conditions and secret names that name no argument of the tool.

    Only exact-name entries are checked: a glob may cover tools with other arguments.
    """
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return []
    problems = []
    for entry in settled.sources:
        if is_glob(entry.pattern):
            continue
        named = set().union(*(c.arguments for c in entry.conditions)) if entry.conditions else set()
        named |= set(entry.secret or ())
        if isinstance(entry.editable, tuple):
            named |= set(entry.editable)
        for missing in sorted(named - set(properties)):
            known = ", ".join(sorted(properties)) or "none"
            problems.append(
                f"{entry.where}: tool {tool_name!r} has no argument {missing!r} (its arguments: "
                f"{known})"
            )
    return problems
