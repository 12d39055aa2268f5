"""Tool definitions: permission, replay policy, who may decide, and the argument schema."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from functools import cached_property
from typing import Any, get_type_hints, overload

import jsonschema
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from runtime.domain.errors import ConfigurationError
from runtime.domain.tickets import GrantScope

GRANT_SCOPES: tuple[GrantScope, ...] = ("run", "thread")
"""Every scope a standing grant can have."""
DEFAULT_GRANTS: tuple[GrantScope, ...] = ("run",)
"""The grants a tool allows unless it says otherwise: for the rest of the run."""


class Permission(StrEnum):
    """Whether a tool call runs at once, waits for a person, or never runs."""

    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


class ReplayPolicy(StrEnum):
    """What recovery may do with a call that was dispatched but has no recorded result."""

    MANUAL = "manual"
    SAFE = "safe"
    IDEMPOTENT = "idempotent"


class ExpiryAction(StrEnum):
    """What happens when a ticket's deadline passes without a decision."""

    DENY = "deny"
    CANCEL = "cancel"


@dataclass(frozen=True)
class Escalate:
    """On expiry, hand the ticket to other approvers (once); if they also let it expire,
    the call is denied.

    Attributes:
        approvers: Who may decide the escalated ticket.
        deadline: How long they have (None: no deadline).
    """

    approvers: tuple[str, ...]
    deadline: timedelta | None = None

    def __post_init__(self) -> None:
        if not self.approvers:
            raise ConfigurationError("Escalate needs at least one approver")


OnExpiry = ExpiryAction | Escalate


def coerce_expiry(value: OnExpiry | str | None) -> OnExpiry | None:
    """Accept ``"deny"``, ``"cancel"``, an `ExpiryAction` or an `Escalate`."""
    if value is None or isinstance(value, Escalate | ExpiryAction):
        return value
    try:
        return ExpiryAction(value)
    except ValueError as exc:
        raise ConfigurationError(
            f"on_expiry must be deny, cancel or Escalate(...); got {value!r}"
        ) from exc


MASK = "••••••"
"""What a secret argument's value is replaced by wherever a person or a log sees it."""

PermissionRule = Callable[[dict[str, Any]], "Permission | str"]
"""A callable deciding the permission from the call's validated arguments."""


def describe_permission(permission: Permission | PermissionRule) -> str:
    """How a tool's permission is set, in words, for the flight recorder: ``permission
    allow`` for a fixed one; for a rule its own description (the first line of its
    docstring, as the agents file's rules give) or its name."""
    if isinstance(permission, Permission):
        return f"permission {permission.value}"
    doc = (getattr(permission, "__doc__", None) or "").strip()
    name = str(getattr(permission, "__name__", "") or "")
    if doc and type(permission).__doc__ != doc:
        return f"rule: {doc.splitlines()[0]}"
    if name and name != "<lambda>":
        return f"rule {name}"
    return "a rule over the arguments"


@dataclass(frozen=True)
class InputRequest:
    """Returned by a tool to ask a person for typed input before it goes on.

    The run parks exactly as for an approval; once the answer arrives the tool is called
    again with the validated answer in `current_tool_context().answer`.

    Attributes:
        prompt: What to ask.
        schema: A pydantic model class or a JSON schema for the answer.
    """

    prompt: str
    schema: type[BaseModel] | dict[str, Any]

    def json_schema(self) -> dict[str, Any]:
        """The answer's JSON schema."""
        if isinstance(self.schema, dict):
            return self.schema
        return self.schema.model_json_schema()


class ArgumentError(ValueError):
    """The model's arguments do not fit the tool's signature (shown to the model)."""


@dataclass(frozen=True)
class Tool:
    """A tool an agent may call.

    Build it with the `tool` decorator from a Python function, or with `Tool.from_schema`
    from a JSON schema and an async invoker (tools of another system, e.g. MCP).

    Attributes:
        name: The name the model calls it by.
        description: What it does, for the model.
        fn: The async (or plain) function.
        permission: A fixed permission or a rule over the arguments.
        replay_policy: ``manual``, ``safe`` or ``idempotent``, as a string.
        approvers: Who besides the requester may decide; ``group:<id>`` entries match
            groups verified by the edge; ``*`` lets anyone decide.
        four_eyes: The requester may not decide their own call.
        deadline: How long a decision may take before the ticket expires.
        secret: Argument names masked wherever a person or a log sees them.
        on_expiry: What happens when the deadline passes (default: the agent's).
        grants: How far an approver may allow beyond one call: ``("run",)`` (the
            default, None), ``("run", "thread")``, or ``()`` for never. Four-eyes tools
            never take grants.
        editable: Whether an approver may change the arguments before allowing a call:
            True (any argument but secret ones), False (none), or the names of the
            arguments that may change (see `runtime.domain.edits`).
        server: The MCP server it comes from (None: not an MCP tool); cards show it.
        decide_in: Step-up: the only places its calls may be decided (e.g.
            ``("console",)``); empty means anywhere. Chat cards then link to the console.
        sso: Step-up: a console decision must come from a single sign-on session.
    """

    name: str
    description: str
    fn: Callable[..., Any]
    permission: Permission | PermissionRule
    replay_policy: str
    approvers: tuple[str, ...] | None = None
    four_eyes: bool | None = None
    deadline: timedelta | None = None
    secret: frozenset[str] = frozenset()
    on_expiry: OnExpiry | None = None
    grants: tuple[GrantScope, ...] | None = None
    editable: bool | frozenset[str] = True
    server: str | None = None
    decide_in: tuple[str, ...] = ()
    sso: bool = False
    _args_model: type[BaseModel] = field(default=BaseModel, repr=False, compare=False)
    # Set by `from_schema`: the arguments' JSON schema as given, and its validator.
    _schema: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_schema(
        cls,
        name: str,
        description: str,
        schema: dict[str, Any],
        invoke: Callable[[dict[str, Any]], Awaitable[Any]],
        *,
        permission: Permission | str | PermissionRule = Permission.ALLOW,
        replay_policy: ReplayPolicy | str = ReplayPolicy.MANUAL,
        approvers: Sequence[str] | None = None,
        four_eyes: bool | None = None,
        deadline: timedelta | float | None = None,
        secret: Sequence[str] = (),
        on_expiry: OnExpiry | str | None = None,
        grants: Sequence[str] | None = None,
        editable: bool | Sequence[str] = True,
        server: str | None = None,
        decide_in: Sequence[str] = (),
        sso: bool = False,
    ) -> Tool:
        """A tool whose arguments are described by a JSON schema instead of type hints.

        The schema is shown to the model and to forms exactly as given, and the model's
        arguments are validated against it (`jsonschema`, the draft named by ``$schema``,
        else 2020-12); arguments that do not fit become an error result the model sees.

        Args:
            name: The name the model calls it by.
            description: What it does, for the model.
            schema: The arguments' JSON schema (an object schema).
            invoke: Called with the validated arguments as one dict; its result (or
                exception) is the tool's.
            permission: As for `tool`.
            replay_policy: As for `tool`.
            approvers: As for `tool`.
            four_eyes: As for `tool`.
            deadline: As for `tool`.
            secret: As for `tool`; names of the schema's properties.
            on_expiry: As for `tool`.
            grants: As for `tool`.
            editable: As for `tool`; names of the schema's properties.
            server: The MCP server it comes from, shown on approval cards.
            decide_in: As for `tool`.
            sso: As for `tool`.

        Raises:
            ConfigurationError: The schema is not a valid JSON schema, or an option is bad.
        """
        if not isinstance(schema, dict):
            raise ConfigurationError(f"tool {name!r}: the input schema must be a JSON object")
        try:
            _validator_class(schema).check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ConfigurationError(
                f"tool {name!r}: invalid input schema: {exc.message}"
            ) from None
        limit = _deadline(name, deadline)
        properties = schema.get("properties")
        unknown = set(secret) - set(properties) if isinstance(properties, dict) else set()
        if unknown:
            raise ConfigurationError(f"tool {name!r}: secret names unknown arguments {unknown}")
        names = set(properties) if isinstance(properties, dict) else None
        allowed = _editable(name, editable, names, frozenset(secret))
        return cls(
            name=name,
            description=description,
            fn=invoke,
            permission=_coerce_permission(permission),
            replay_policy=_coerce_policy(replay_policy),
            approvers=tuple(approvers) if approvers is not None else None,
            four_eyes=four_eyes,
            deadline=limit,
            secret=frozenset(secret),
            on_expiry=coerce_expiry(on_expiry),
            grants=coerce_grants(name, grants, four_eyes),
            editable=allowed,
            server=server,
            decide_in=coerce_decide_in(name, decide_in, sso),
            sso=sso,
            _schema=schema,
        )

    @cached_property
    def _validator(self) -> Any:
        assert self._schema is not None
        return _validator_class(self._schema)(self._schema)

    @cached_property
    def parameters(self) -> dict[str, Any]:
        """JSON schema of the arguments: as given, or from the function's type hints."""
        if self._schema is not None:
            return self._schema
        schema = self._args_model.model_json_schema()
        schema.pop("title", None)
        return schema

    @cached_property
    def _spec(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def spec(self) -> dict[str, Any]:
        """The tool as an OpenAI-style function definition (computed once)."""
        return self._spec

    def parse_arguments(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Validate the model's arguments; the checked ones, as JSON values (see
        `check_arguments`).

        Raises:
            ArgumentError: With a message the model can act on.
        """
        parsed, errors = self.check_arguments(raw)
        if parsed is None:
            raise ArgumentError(f"invalid arguments for {self.name}: {_told(errors)}")
        return parsed

    def check_arguments(
        self, raw: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """Validate arguments; the parsed ones, or None and one ``{"path", "message"}``
        per problem (``path`` is the dotted argument name, empty for the whole call).

        The parsed arguments are JSON values (coerced and defaulted as the function's
        signature says: ``"2"`` for an ``int`` is ``2``, a ``date`` its ISO text), as
        they are stored and read back; `invoke` hands the function its declared types.

        A message never quotes the value of a secret argument, nor an object holding
        one: such a problem is told from the failing check and the schema alone.
        """
        if self._schema is not None:
            found = sorted(
                self._validator.iter_errors(raw), key=lambda e: [str(p) for p in e.absolute_path]
            )
            if found:
                return None, [_schema_problem(e, raw, self.secret) for e in found]
            return dict(raw), []
        try:
            parsed = self._args_model.model_validate(raw)
        except ValidationError as exc:
            return None, [_model_problem(e, self.secret) for e in exc.errors()]
        return parsed.model_dump(mode="json"), []

    def editable_arguments(self) -> tuple[str, ...]:
        """The arguments an approver may change, in the schema's order (never secret ones)."""
        if self.editable is False:
            return ()
        properties = self.parameters.get("properties")
        names = [str(n) for n in properties] if isinstance(properties, dict) else []
        chosen = names if self.editable is True else [n for n in names if n in self.editable]
        return tuple(n for n in chosen if n not in self.secret)

    def editable_for(self, args: Mapping[str, Any]) -> tuple[str, ...]:
        """The arguments an approver may change in a call with `args` (never secret ones):
        `editable_arguments`, for a tool whose schema names its arguments."""
        return self.editable_arguments()

    def parameters_for(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The schema an edit form of a call with `args` shows: `parameters`."""
        return self.parameters

    def permission_for(self, args: dict[str, Any]) -> Permission:
        """The permission for a call with these (validated) arguments."""
        if isinstance(self.permission, Permission):
            return self.permission
        outcome = self.permission(args)
        try:
            return Permission(outcome)
        except ValueError as exc:
            raise ConfigurationError(
                f"permission rule of tool {self.name!r} returned {outcome!r}"
            ) from exc

    def masked(self, args: dict[str, Any]) -> dict[str, Any]:
        """`args` with secret parameters replaced by a mask."""
        if not self.secret:
            return args
        return {k: (MASK if k in self.secret else v) for k, v in args.items()}

    async def invoke(self, args: dict[str, Any]) -> Any:
        """Call the function (or a `from_schema` invoker) with validated arguments: a
        function gets the types its signature declares (a model, a ``date``, a tuple),
        whether `args` were just checked or read back from the store.

        Raises:
            ArgumentError: Stored arguments no longer fit the function's signature (it
                changed since they were checked); the message quotes no secret.
        """
        if self._schema is not None:
            outcome = self.fn(dict(args))
        else:
            try:
                typed = self._args_model.model_validate(args)
            except ValidationError as exc:
                errors = [_model_problem(e, self.secret) for e in exc.errors()]
                raise ArgumentError(f"invalid arguments for {self.name}: {_told(errors)}") from None
            outcome = self.fn(**{name: getattr(typed, name) for name in type(typed).model_fields})
        if inspect.isawaitable(outcome):
            outcome = await outcome
        return outcome

    @cached_property
    def fingerprint_parts(self) -> dict[str, Any]:
        """What identifies this tool's contract, for the catalog fingerprint."""
        permission = (
            self.permission.value
            if isinstance(self.permission, Permission)
            else f"rule:{getattr(self.permission, '__qualname__', 'callable')}"
        )
        return {
            "name": self.name,
            "parameters": self.parameters,
            "permission": permission,
            "replay_policy": self.replay_policy,
        }


# -- problems with arguments, told without a secret's value ---------------------------

SECRET_VALUE = "the secret value"
"""How a problem with a secret argument names its value (never quoted)."""
_SECRET_OBJECT = "the argument object"
_SOME_VALUE = "a value"

# Checks whose messages name argument names and the schema only, never a value.
_NAMES_ONLY = frozenset(
    {
        "required",
        "additionalProperties",
        "unevaluatedProperties",
        "dependentRequired",
        "dependencies",
    }
)


def _shows_secret(
    error: jsonschema.ValidationError, raw: dict[str, Any], secret: frozenset[str]
) -> str | None:
    """How to name the value `error` is about when it is (or holds) a secret; else None."""
    if not secret:
        return None
    path = list(error.absolute_path)
    if path:
        return SECRET_VALUE if str(path[0]) in secret else None
    if error.instance is raw:
        return _SECRET_OBJECT if any(name in secret for name in raw) else None
    # An error without a path about another value than the whole object lost its place
    # (jsonschema drops the path of a false schema's error): it may be a secret.
    return _SOME_VALUE


def _clause(error: jsonschema.ValidationError) -> str:
    """What failed, from the check and its schema value (the instance is never read)."""
    # A false schema's error has no check (None), whatever the stubs say.
    kind: Any = error.validator
    expected = error.validator_value
    match kind:
        case "type":
            types = expected if isinstance(expected, list) else [expected]
            return "is not of type " + ", ".join(repr(t) for t in types)
        case "enum":
            return f"is not one of {expected!r}"
        case "const":
            return f"is not {expected!r}"
        case "pattern":
            return f"does not match {expected!r}"
        case "format":
            return f"is not a {expected!r}"
        case "minLength":
            return f"is shorter than {expected!r} characters"
        case "maxLength":
            return f"is longer than {expected!r} characters"
        case "minimum":
            return f"is less than the minimum of {expected!r}"
        case "maximum":
            return f"is greater than the maximum of {expected!r}"
        case "exclusiveMinimum":
            return f"is less than or equal to the minimum of {expected!r}"
        case "exclusiveMaximum":
            return f"is greater than or equal to the maximum of {expected!r}"
        case "multipleOf":
            return f"is not a multiple of {expected!r}"
        case "minItems":
            return f"has fewer than {expected!r} items"
        case "maxItems":
            return f"has more than {expected!r} items"
        case "uniqueItems":
            return "has non-unique elements"
        case "minProperties":
            return f"has fewer than {expected!r} properties"
        case "maxProperties":
            return f"has more than {expected!r} properties"
        case "anyOf":
            return "is not valid under any of the given schemas"
        case "oneOf":
            # Without sub-errors, more than one schema matched.
            if error.context:
                return "is not valid under any of the given schemas"
            return "is valid under more than one of the given schemas"
        case "not":
            return f"should not be valid under {expected!r}"
        case None:
            return "is not allowed here"
        case _:
            return f"does not pass {kind!r}"


def _schema_problem(
    error: jsonschema.ValidationError, raw: dict[str, Any], secret: frozenset[str]
) -> dict[str, Any]:
    path = ".".join(str(p) for p in error.absolute_path)
    subject = _shows_secret(error, raw, secret)
    if subject is None or error.validator in _NAMES_ONLY:
        return {"path": path, "message": error.message}
    return {"path": path, "message": f"{subject} {_clause(error)}"}


# Context entries of pydantic errors that come from the schema, not from the value.
_SCHEMA_CONTEXT = frozenset(
    {
        "gt",
        "ge",
        "lt",
        "le",
        "multiple_of",
        "min_length",
        "max_length",
        "pattern",
        "expected",
        "class_name",
        "class",
        "field_type",
        "max_digits",
        "decimal_places",
        "whole_digits",
        "expected_schemes",
        "expected_version",
        "tz_expected",
        "encoding",
        "discriminator",
        "expected_tags",
    }
)


def _model_problem(error: Any, secret: frozenset[str]) -> dict[str, Any]:
    loc = list(error["loc"])
    path = ".".join(str(p) for p in loc)
    context = error.get("ctx") or {}
    if loc and str(loc[0]) in secret and not set(context) <= _SCHEMA_CONTEXT:
        # Its message would carry text made from the value (a parser's or a validator's).
        return {"path": path, "message": f"{SECRET_VALUE} is not valid ({error['type']})"}
    return {"path": path, "message": error["msg"]}


def _coerce_permission(value: Permission | str | PermissionRule) -> Permission | PermissionRule:
    if isinstance(value, Permission):
        return value
    if isinstance(value, str):
        try:
            return Permission(value)
        except ValueError as exc:
            raise ConfigurationError(
                f"permission must be one of allow, ask, deny or a callable; got {value!r}"
            ) from exc
    if callable(value):
        return value
    raise ConfigurationError(f"permission must be allow, ask, deny or a callable; got {value!r}")


def coerce_grants(
    name: str, value: Sequence[str] | None, four_eyes: bool | None
) -> tuple[GrantScope, ...] | None:
    """Check a tool's ``grants`` option: scopes of `GRANT_SCOPES`, each once.

    Raises:
        ConfigurationError: An unknown or repeated scope, a string instead of a list, or
            grants on a tool that is four-eyes itself.
    """
    if value is None:
        return None
    if isinstance(value, str):
        raise ConfigurationError(
            f"tool {name!r}: grants must be a list of scopes such as ('run',), not {value!r}"
        )
    scopes: list[GrantScope] = []
    for scope in value:
        if scope not in GRANT_SCOPES:
            raise ConfigurationError(
                f"tool {name!r}: unknown grant scope {scope!r} (known: run, thread)"
            )
        if scope in scopes:
            raise ConfigurationError(f"tool {name!r}: grant scope {scope!r} is given twice")
        scopes.append("run" if scope == "run" else "thread")
    if scopes and four_eyes:
        raise ConfigurationError(
            f"tool {name!r}: a four-eyes tool cannot take standing grants (every call needs "
            "its own decision by someone other than the requester); remove grants"
        )
    return tuple(scopes)


def _coerce_policy(value: ReplayPolicy | str) -> str:
    try:
        return ReplayPolicy(value).value
    except ValueError as exc:
        raise ConfigurationError(
            f"replay_policy must be one of manual, safe, idempotent; got {value!r}"
        ) from exc


def _validator_class(schema: dict[str, Any]) -> Any:
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)


def _editable(
    name: str,
    editable: bool | Sequence[str],
    arguments: set[str] | None,
    secret: frozenset[str],
) -> bool | frozenset[str]:
    """Check an ``editable`` option: a flag, or names of (non-secret) arguments."""
    if isinstance(editable, bool):
        return editable
    if isinstance(editable, str):
        raise ConfigurationError(
            f"tool {name!r}: editable must be True, False or a list of argument names "
            f"(write editable=({editable!r},) for one)"
        )
    chosen = frozenset(editable)
    unknown = chosen - arguments if arguments is not None else set()
    if unknown:
        raise ConfigurationError(
            f"tool {name!r}: editable names unknown arguments {', '.join(sorted(unknown))}"
        )
    hidden = chosen & secret
    if hidden:
        raise ConfigurationError(
            f"tool {name!r}: secret arguments cannot be editable: {', '.join(sorted(hidden))}"
        )
    return chosen


def _deadline(name: str, deadline: timedelta | float | None) -> timedelta | None:
    limit = timedelta(seconds=deadline) if isinstance(deadline, int | float) else deadline
    if limit is not None and limit <= timedelta(0):
        raise ConfigurationError(f"tool {name!r}: deadline must be positive")
    return limit


def _told(errors: list[dict[str, Any]]) -> str:
    """Argument problems as one line."""
    return "; ".join(f"{e['path'] or 'arguments'}: {e['message']}" for e in errors)


def _args_model(fn: Callable[..., Any], name: str) -> type[BaseModel]:
    signature = inspect.signature(fn)
    hints = get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigurationError(f"tool {name!r} cannot take *args or **kwargs")
        annotation = hints.get(param.name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    model: type[BaseModel] = create_model(
        f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
    )
    return model


DECISION_PLACES = ("console", "slack", "discord", "api", "cli")
"""Where a call may be decided (`Tool.decide_in`): the platforms of deciding actors."""


def coerce_decide_in(name: str, places: Sequence[str], sso: bool) -> tuple[str, ...]:
    """A tool's ``decide_in`` checked: known places, each once; ``sso`` needs the console.

    Raises:
        ConfigurationError: An unknown place, or ``sso`` without the console among them.
    """
    if isinstance(places, str):
        raise ConfigurationError(f"tool {name!r}: decide_in is a list of places")
    unknown = [p for p in places if p not in DECISION_PLACES]
    if unknown:
        raise ConfigurationError(
            f"tool {name!r}: decide_in names unknown places {unknown} "
            f"(known: {', '.join(DECISION_PLACES)})"
        )
    if sso and "console" not in places:
        raise ConfigurationError(f'tool {name!r}: sso = true needs decide_in = ["console"]')
    return tuple(dict.fromkeys(places))


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    permission: Permission | str | PermissionRule = Permission.ALLOW,
    replay_policy: ReplayPolicy | str = ReplayPolicy.MANUAL,
    approvers: Sequence[str] | None = None,
    four_eyes: bool | None = None,
    deadline: timedelta | float | None = None,
    secret: Sequence[str] = (),
    on_expiry: OnExpiry | str | None = None,
    grants: Sequence[str] | None = None,
    editable: bool | Sequence[str] = True,
    decide_in: Sequence[str] = (),
    sso: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    permission: Permission | str | PermissionRule = Permission.ALLOW,
    replay_policy: ReplayPolicy | str = ReplayPolicy.MANUAL,
    approvers: Sequence[str] | None = None,
    four_eyes: bool | None = None,
    deadline: timedelta | float | None = None,
    secret: Sequence[str] = (),
    on_expiry: OnExpiry | str | None = None,
    grants: Sequence[str] | None = None,
    editable: bool | Sequence[str] = True,
    decide_in: Sequence[str] = (),
    sso: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Declare a tool. Use bare (``@tool``) or with options (``@tool(permission="ask")``).

    Args:
        fn: The function, when used bare.
        name: Name shown to the model (default: the function's name).
        description: Description for the model (default: the docstring's first paragraph).
        permission: ``allow``, ``ask``, ``deny`` (enum or string) or a callable taking the
            validated arguments and returning one of them.
        replay_policy: ``manual`` (default), ``safe`` or ``idempotent``.
        approvers: Who besides the requester may decide.
        four_eyes: Forbid the requester from deciding their own call.
        deadline: Decision deadline, as a timedelta or seconds.
        secret: Names of arguments to mask in cards, consoles and exports.
        on_expiry: ``deny`` (the default), ``cancel`` the run, or `Escalate`.
        grants: Standing grants an approver may give with an allow: ``("run",)`` (the
            default) lets them allow the tool for the rest of the run, ``("run",
            "thread")`` also in the thread for some hours, ``()`` never. Not with
            ``four_eyes``.
        editable: Whether an approver may change the arguments before allowing: True
            (the default: any argument but secret ones), False, or the names of the
            arguments that may change, e.g. ``("amount",)``.
        decide_in: Step-up: where its calls may be decided, among ``console``,
            ``slack``, ``discord``, ``api`` and ``cli`` (default: anywhere); a chat card
            of a call that may not be decided there links to the console instead.
        sso: Step-up: a console decision must come from a single sign-on session
            (needs ``decide_in``, e.g. ``("console",)``).

    Returns:
        A `Tool`, or a decorator producing one.
    """

    def build(func: Callable[..., Any]) -> Tool:
        tool_name = name or func.__name__
        doc = inspect.getdoc(func) or ""
        limit = _deadline(tool_name, deadline)
        args_model = _args_model(func, tool_name)
        unknown = set(secret) - set(args_model.model_fields)
        if unknown:
            raise ConfigurationError(
                f"tool {tool_name!r}: secret names unknown arguments {unknown}"
            )
        allowed = _editable(tool_name, editable, set(args_model.model_fields), frozenset(secret))
        return Tool(
            name=tool_name,
            description=description or doc.split("\n\n")[0],
            fn=func,
            permission=_coerce_permission(permission),
            replay_policy=_coerce_policy(replay_policy),
            approvers=tuple(approvers) if approvers is not None else None,
            four_eyes=four_eyes,
            deadline=limit,
            secret=frozenset(secret),
            on_expiry=coerce_expiry(on_expiry),
            grants=coerce_grants(tool_name, grants, four_eyes),
            editable=allowed,
            decide_in=coerce_decide_in(tool_name, decide_in, sso),
            sso=sso,
            _args_model=args_model,
        )

    if fn is not None:
        return build(fn)
    return build
