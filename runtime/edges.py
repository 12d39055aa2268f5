"""What the edges (Slack, Discord, the web console and API, webhooks, MCP, provider models)
may use of the runtime beyond its public package.

Adapters import only `runtime` and this module; `tests/unit/test_layers.py` holds them to
it. Everything here is re-exported from the layer that defines it.
"""

from runtime.domain.constraints import NUMERIC, OPERATORS, is_number, lookup, passes
from runtime.domain.forms import (
    FieldType,
    FieldView,
    SchemaField,
    parse_result,
    read_typed,
    schema_fields,
)
from runtime.domain.jsontext import NonFiniteNumber, loads_strict
from runtime.domain.model import (
    PROVIDER_STATE,
    TextSink,
    chat_messages,
    parse_chat_completion,
    provider_state,
)
from runtime.domain.notifications import (
    APPROVAL_CALLBACK,
    APPROVAL_CALLBACK_URL,
    ApprovalCallback,
    ApprovalRequested,
    BatchOffered,
    Decided,
    DecisionRefused,
    Delivery,
    DescribedTicket,
    InputRequested,
    Notification,
    OutcomeNotification,
    PostedCard,
    RunCallback,
    RunFinished,
    RunPaused,
    TicketExpired,
    TicketNotification,
    TicketVoided,
    UncertainCall,
    refusal_of,
)
from runtime.domain.policies import (
    DEFAULT_POLICY_TIMEOUT,
    REQUESTER_GROUPS,
    PolicyAnswer,
    PolicyCall,
    PolicyError,
    parse_answer,
)
from runtime.domain.tickets import describe_chain, describe_deciders
from runtime.domain.tools import (
    ArgumentError,
    OnExpiry,
    PermissionRule,
    coerce_decide_in,
    coerce_grants,
)
from runtime.domain.tracing import (
    NO_TRACER,
    Attributes,
    AttributeValue,
    Carrier,
    NoTracer,
    Span,
    SpanKind,
    Tracer,
)
from runtime.domain.visibility import may_control
from runtime.services.batches import MAX_BATCH
from runtime.services.delivery import DeliveryError, batch_open_ids
from runtime.services.queries import InvalidCursor

__all__ = [
    "APPROVAL_CALLBACK",
    "APPROVAL_CALLBACK_URL",
    "DEFAULT_POLICY_TIMEOUT",
    "MAX_BATCH",
    "NO_TRACER",
    "NUMERIC",
    "OPERATORS",
    "PROVIDER_STATE",
    "REQUESTER_GROUPS",
    "ApprovalCallback",
    "ApprovalRequested",
    "ArgumentError",
    "AttributeValue",
    "Attributes",
    "BatchOffered",
    "Carrier",
    "Decided",
    "DecisionRefused",
    "Delivery",
    "DeliveryError",
    "DescribedTicket",
    "FieldType",
    "FieldView",
    "InputRequested",
    "InvalidCursor",
    "NoTracer",
    "NonFiniteNumber",
    "Notification",
    "OnExpiry",
    "OutcomeNotification",
    "PermissionRule",
    "PolicyAnswer",
    "PolicyCall",
    "PolicyError",
    "PostedCard",
    "RunCallback",
    "RunFinished",
    "RunPaused",
    "SchemaField",
    "Span",
    "SpanKind",
    "TextSink",
    "TicketExpired",
    "TicketNotification",
    "TicketVoided",
    "Tracer",
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
]
