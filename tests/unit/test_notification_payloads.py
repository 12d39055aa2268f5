"""The stored shape of every notification: the outbox row's kind and JSON payload.

Rows outlive versions: older rows must still read, and replicas of the previous version
read the rows this one writes. Each example below is a note as its writer builds it and
the exact JSON its row holds (field names, order and values); a change of shape fails
here before it reaches a database.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from runtime.domain.notifications import (
    KINDS,
    ApprovalCallback,
    ApprovalRequested,
    BatchCall,
    BatchOffered,
    Decided,
    DecisionRefused,
    InputRequested,
    Notification,
    RunCallback,
    RunFinished,
    RunPaused,
    TicketExpired,
    TicketVoided,
    UncertainCall,
    read_notification,
)

_TICKET: dict[str, Any] = {
    "run_id": "run_1",
    "agent": "billing",
    "ticket_id": "tk_1",
    "target": {
        "kind": "tool_permission",
        "call_id": "call_1",
        "tool": "refund",
        "args": {"order_id": "A-1", "amount": 12.5},
        "reason": None,
    },
    "requester": "U1",
    "approvers": ["U2"],
    "deciders": ["U2"],
    "four_eyes": False,
    "who_may_decide": "U2",
    "deadline": "2026-12-03T19:00:00+00:00",
    "grants": ["run"],
    "chain": [],
}

EXAMPLES: list[tuple[Notification, str]] = [
    (
        ApprovalRequested(
            **_TICKET, editable=["amount"], tool_description="Refund.", tool_server=None
        ),
        '{"run_id": "run_1", "agent": "billing", "ticket_id": "tk_1", "target": {"kind": '
        '"tool_permission", "call_id": "call_1", "tool": "refund", "args": {"order_id": '
        '"A-1", "amount": 12.5}, "reason": null}, "requester": "U1", "approvers": ["U2"], '
        '"deciders": ["U2"], "four_eyes": false, "who_may_decide": "U2", "deadline": '
        '"2026-12-03T19:00:00+00:00", "grants": ["run"], "chain": [], "editable": '
        '["amount"], "tool_description": "Refund.", "tool_server": null}',
    ),
    (
        InputRequested(
            run_id="run_1",
            agent="ops",
            ticket_id="tk_2",
            target={"kind": "remote_input", "call_id": "call_2", "prompt": "Which host?"},
            requester=None,
            approvers=[],
            deciders=[],
            four_eyes=False,
            who_may_decide="anyone",
            deadline=None,
            grants=[],
            chain=["ops", "infra"],
        ),
        '{"run_id": "run_1", "agent": "ops", "ticket_id": "tk_2", "target": {"kind": '
        '"remote_input", "call_id": "call_2", "prompt": "Which host?"}, "requester": null, '
        '"approvers": [], "deciders": [], "four_eyes": false, "who_may_decide": "anyone", '
        '"deadline": null, "grants": [], "chain": ["ops", "infra"]}',
    ),
    (
        UncertainCall(**{**_TICKET, "grants": []}, editable=[], tool_server="infra"),
        '{"run_id": "run_1", "agent": "billing", "ticket_id": "tk_1", "target": {"kind": '
        '"tool_permission", "call_id": "call_1", "tool": "refund", "args": {"order_id": '
        '"A-1", "amount": 12.5}, "reason": null}, "requester": "U1", "approvers": ["U2"], '
        '"deciders": ["U2"], "four_eyes": false, "who_may_decide": "U2", "deadline": '
        '"2026-12-03T19:00:00+00:00", "grants": [], "chain": [], "editable": [], '
        '"tool_server": "infra"}',
    ),
    (
        Decided(
            run_id="run_1",
            agent="billing",
            ticket_id="tk_1",
            decision="allow",
            actor="U2",
            actor_name=None,
            platform="slack",
            decided_at="2026-12-03T18:10:00+00:00",
            reason="looks fine",
            tool="refund",
            edit={"summary": "amount 12.5 → 10", "changes": []},
            args={"order_id": "A-1", "amount": 10},
            args_digest="sha256:ab",
            grant={"grant_id": "gr_1", "scope": "run", "expires_at": None},
        ),
        '{"run_id": "run_1", "agent": "billing", "ticket_id": "tk_1", "decision": "allow", '
        '"actor": "U2", "actor_name": null, "platform": "slack", "decided_at": '
        '"2026-12-03T18:10:00+00:00", "reason": "looks fine", "tool": "refund", "edit": '
        '{"summary": "amount 12.5 \\u2192 10", "changes": []}, "args": {"order_id": "A-1", '
        '"amount": 10}, "args_digest": "sha256:ab", "grant": {"grant_id": "gr_1", "scope": '
        '"run", "expires_at": null}}',
    ),
    (
        Decided(
            run_id="run_1",
            agent="billing",
            ticket_id="tk_3",
            decision="allow",
            actor="U2",
            actor_name="Ana",
            platform="discord",
            decided_at="2026-12-03T18:11:00+00:00",
            tool="refund",
            args={},
            grant={"grant_id": "gr_1"},
            by_grant=True,
        ),
        '{"run_id": "run_1", "agent": "billing", "ticket_id": "tk_3", "decision": "allow", '
        '"actor": "U2", "actor_name": "Ana", "platform": "discord", "decided_at": '
        '"2026-12-03T18:11:00+00:00", "tool": "refund", "args": {}, "grant": {"grant_id": '
        '"gr_1"}, "by_grant": true}',
    ),
    (
        TicketExpired(
            run_id="run_1",
            agent="billing",
            ticket_id="tk_1",
            action="escalate",
            escalated_to=["group:leads"],
        ),
        '{"run_id": "run_1", "agent": "billing", "ticket_id": "tk_1", "action": "escalate", '
        '"escalated_to": ["group:leads"]}',
    ),
    (
        TicketExpired(run_id="run_1", agent="billing", ticket_id="tk_1", action="deny"),
        '{"run_id": "run_1", "agent": "billing", "ticket_id": "tk_1", "action": "deny"}',
    ),
    (
        TicketVoided(run_id="run_1", agent="billing", ticket_id="tk_1", reason=None),
        '{"run_id": "run_1", "agent": "billing", "ticket_id": "tk_1", "reason": null}',
    ),
    (
        RunFinished(run_id="run_1", agent="billing", status="done", text="Done.", thread_id="th_1"),
        '{"run_id": "run_1", "agent": "billing", "status": "done", "text": "Done.", '
        '"thread_id": "th_1"}',
    ),
    (
        RunFinished(
            run_id="run_1", agent="billing", status="failed", error="boom", thread_id="th_1"
        ),
        '{"run_id": "run_1", "agent": "billing", "status": "failed", "error": "boom", '
        '"thread_id": "th_1"}',
    ),
    (
        RunPaused(
            run_id="run_1",
            agent="billing",
            ticket_id="tk_4",
            target={"kind": "pause"},
            requester="U1",
            approvers=[],
            deciders=["U1"],
            four_eyes=False,
            who_may_decide="U1",
            deadline=None,
            grants=[],
            chain=[],
        ),
        '{"run_id": "run_1", "agent": "billing", "ticket_id": "tk_4", "target": {"kind": '
        '"pause"}, "requester": "U1", "approvers": [], "deciders": ["U1"], "four_eyes": '
        'false, "who_may_decide": "U1", "deadline": null, "grants": [], "chain": []}',
    ),
    (
        DecisionRefused(
            run_id="run_1",
            agent="billing",
            ticket_id="tk_1",
            error="not_awaiting",
            reason="already_decided",
            decided_by="U3",
            message="ticket tk_1 was already decided",
            actor="U2",
        ),
        '{"run_id": "run_1", "agent": "billing", "ticket_id": "tk_1", "error": '
        '"not_awaiting", "reason": "already_decided", "decided_by": "U3", "message": '
        '"ticket tk_1 was already decided", "actor": "U2"}',
    ),
    (
        BatchOffered(
            run_id="run_1",
            agent="billing",
            ticket_ids=["tk_1", "tk_5"],
            token="tok",
            calls=[
                BatchCall(ticket_id="tk_1", tool="refund", args={"order_id": "A-1"}),
                BatchCall(ticket_id="tk_5", tool="refund", args={"card": "••••"}),
            ],
        ),
        '{"run_id": "run_1", "agent": "billing", "ticket_ids": ["tk_1", "tk_5"], "token": '
        '"tok", "calls": [{"ticket_id": "tk_1", "tool": "refund", "args": {"order_id": '
        '"A-1"}}, {"ticket_id": "tk_5", "tool": "refund", "args": {"card": '
        '"\\u2022\\u2022\\u2022\\u2022"}}]}',
    ),
    (
        RunCallback(
            run_id="run_1", agent="billing", status="cancelled", reason="stop", thread_id=None
        ),
        '{"run_id": "run_1", "agent": "billing", "status": "cancelled", "reason": "stop", '
        '"thread_id": null}',
    ),
    (
        ApprovalCallback(run_id="run_1", agent="billing", status="done"),
        '{"run_id": "run_1", "agent": "billing", "status": "done"}',
    ),
]


@pytest.mark.parametrize(
    ("note", "stored"), EXAMPLES, ids=[f"{n.kind}-{i}" for i, (n, _) in enumerate(EXAMPLES)]
)
def test_a_note_is_stored_in_the_shape_older_versions_read(note: Notification, stored: str) -> None:
    assert json.dumps(note.payload()) == stored
    read = read_notification(note.kind, json.loads(stored))
    assert read == note
    assert json.dumps(read.payload()) == stored


def test_every_kind_has_an_example() -> None:
    assert sorted({note.kind for note, _ in EXAMPLES}) == sorted(KINDS)


def test_a_row_of_an_older_version_reads_and_keeps_what_it_held() -> None:
    older = {k: v for k, v in _TICKET.items() if k != "deciders"}
    note = read_notification("approval_requested", {**older, "added_later": 1})
    assert isinstance(note, ApprovalRequested)
    assert note.deciders == ["U2"]  # from the approvers, as before `deciders` existed
    assert (note.editable, note.tool_server) == ([], None)
