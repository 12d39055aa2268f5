"""The public surface: every name imported from `runtime`, `runtime.edges` and `adapters.models`.

Moving code never changes what users import. Each name below must stay exported (listed
in the package's ``__all__``) and importable; a test fails, naming it, when one
disappears. A new public name is added here on purpose, in the same change.
"""

from __future__ import annotations

import importlib

import pytest

RUNTIME = (
    "Abort",
    "AcceptOutcome",
    "Accepted",
    "AccessDenied",
    "Actor",
    "ActorSource",
    "Agent",
    "Allow",
    "Answer",
    "AnswerKind",
    "Approval",
    "ApprovalOutcome",
    "ApprovalRefused",
    "ApprovalRequest",
    "AwaitTarget",
    "BatchAccepted",
    "BatchItem",
    "BatchOutcome",
    "CallState",
    "Child",
    "ChildFinished",
    "Clock",
    "ConfigurationError",
    "Continue",
    "Decidable",
    "Deny",
    "EditDenied",
    "EditForm",
    "EditRefused",
    "Escalate",
    "Expired",
    "ExpiryAction",
    "ExternalAgent",
    "FormOutcome",
    "Grant",
    "GrantError",
    "GrantNotActive",
    "GrantNotAllowed",
    "GrantRequest",
    "GrantScope",
    "GrantState",
    "IdSource",
    "IdempotencyConflict",
    "IllegalTransition",
    "InputData",
    "InputRequest",
    "InvalidAnswer",
    "InvalidApproval",
    "InvalidEdit",
    "LeaseLost",
    "MAX_GRANT_HOURS",
    "ManualClock",
    "MemoryStore",
    "Model",
    "ModelError",
    "ModelErrorKind",
    "ModelRequest",
    "ModelResponse",
    "NotAwaiting",
    "NotEditable",
    "OutcomeConflict",
    "Pause",
    "PendingEntry",
    "Permission",
    "RandomIds",
    "ReceivedOutcome",
    "Refusal",
    "RefusalReason",
    "Refused",
    "RemoteInput",
    "ReplayPolicy",
    "ResolutionError",
    "Resolve",
    "ResumeCommand",
    "ResumeError",
    "ResumeTicket",
    "Retry",
    "RunError",
    "RunLink",
    "RunNotFound",
    "RunResult",
    "RunStatus",
    "Runtime",
    "ScriptedModel",
    "SequentialIds",
    "SignoffError",
    "StaleTicket",
    "StopReason",
    "StorageError",
    "Store",
    "SystemClock",
    "TicketStatus",
    "Tool",
    "ToolCallRequest",
    "ToolCallView",
    "ToolContext",
    "ToolOutcomeUnknown",
    "ToolPermission",
    "Totals",
    "Transaction",
    "Unauthorized",
    "Uncertain",
    "UnknownExecutionKey",
    "UnknownGrant",
    "UnknownTicket",
    "Usage",
    "args_digest",
    "classify",
    "current_tool_context",
    "delegate_tool_name",
    "final_reply",
    "tool",
    "tool_call_reply",
    "usage_of_events",
    "validate_resume",
)

ADAPTERS_MODELS = (
    "MODEL_OPTIONS",
    "PROVIDERS",
    "AnthropicModel",
    "ModelOptions",
    "ModelResolver",
    "OpenAIModel",
    "OpenAIResponsesModel",
    "Price",
    "canonical",
    "model_from_spec",
    "parse_spec",
    "priced",
    "spec_options",
    "with_options",
)

# What the edges may use beyond the public package (`runtime.edges`).
EDGES = (
    "APPROVAL_CALLBACK",
    "AttributeValue",
    "Attributes",
    "Carrier",
    "NO_TRACER",
    "NoTracer",
    "Span",
    "SpanKind",
    "Tracer",
    "APPROVAL_CALLBACK_URL",
    "ApprovalCallback",
    "ApprovalRequested",
    "ArgumentError",
    "BatchOffered",
    "Decided",
    "DEFAULT_POLICY_TIMEOUT",
    "DecisionRefused",
    "Delivery",
    "DeliveryError",
    "DescribedTicket",
    "FieldType",
    "FieldView",
    "InputRequested",
    "InvalidCursor",
    "MAX_BATCH",
    "NUMERIC",
    "NonFiniteNumber",
    "Notification",
    "OPERATORS",
    "OnExpiry",
    "PROVIDER_STATE",
    "OutcomeNotification",
    "PermissionRule",
    "PolicyAnswer",
    "PolicyCall",
    "PolicyError",
    "PostedCard",
    "REQUESTER_GROUPS",
    "RunCallback",
    "RunFinished",
    "RunPaused",
    "SchemaField",
    "TextSink",
    "TicketExpired",
    "TicketNotification",
    "TicketVoided",
    "UncertainCall",
    "batch_open_ids",
    "chat_messages",
    "coerce_decide_in",
    "coerce_grants",
    "describe_chain",
    "describe_deciders",
    "is_number",
    "loads_strict",
    "lookup",
    "may_control",
    "parse_answer",
    "parse_chat_completion",
    "parse_result",
    "passes",
    "provider_state",
    "read_typed",
    "refusal_of",
    "schema_fields",
)

SURFACES = {"runtime": RUNTIME, "runtime.edges": EDGES, "adapters.models": ADAPTERS_MODELS}


@pytest.mark.parametrize("package", sorted(SURFACES))
def test_every_pinned_name_is_still_exported(package: str) -> None:
    module = importlib.import_module(package)
    missing = [name for name in SURFACES[package] if name not in module.__all__]
    assert missing == [], f"{package} no longer exports {missing}"


@pytest.mark.parametrize("package", sorted(SURFACES))
def test_every_exported_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    unresolved = [name for name in module.__all__ if not hasattr(module, name)]
    assert unresolved == [], f"{package}.__all__ names {unresolved}, which it does not define"


@pytest.mark.parametrize("package", sorted(SURFACES))
def test_every_exported_name_is_pinned(package: str) -> None:
    module = importlib.import_module(package)
    unpinned = sorted(set(module.__all__) - set(SURFACES[package]))
    assert unpinned == [], f"{package} exports {unpinned}: pin them here"


def test_star_import_gives_the_pinned_names() -> None:
    namespace: dict[str, object] = {}
    exec("from runtime import *", namespace)
    assert set(RUNTIME) <= set(namespace)


def test_the_provider_models_resolve_without_their_sdks_imported() -> None:
    # `OpenAIModel` and `AnthropicModel` load lazily; the names must still be reachable.
    import adapters.models

    assert adapters.models.OpenAIModel.__name__ == "OpenAIModel"
    assert adapters.models.AnthropicModel.__name__ == "AnthropicModel"
