"""The console's timeline words flight-recorder events for people."""

from __future__ import annotations

from adapters.web.timeline import timeline


def _event(kind: str, **data: object) -> dict[str, object]:
    return {"seq": 1, "at": "2026-12-01T08:00:00+00:00", "kind": kind, "actor": None, "data": data}


def test_a_model_call_shows_its_usage_cache_cost_and_a_cut_off_stop() -> None:
    [item] = timeline(
        [
            _event(
                "model_call",
                turn=2,
                model="gpt-4.1-mini",
                prompt_tokens=120,
                completion_tokens=30,
                cached_tokens=100,
                cost=0.00125,
                stop="length",
            )
        ]
    )
    assert item.title == (
        "Model call, turn 2 (gpt-4.1-mini): 120 prompt + 30 completion tokens (100 cached), "
        "cost 0.0013; stopped: length"
    )


def test_a_failed_model_call_says_what_the_provider_said() -> None:
    [item] = timeline(
        [
            _event(
                "model_failed",
                turn=1,
                model="claude-sonnet-4-5",
                failure="authentication",
                status=401,
                message="invalid x-api-key",
            )
        ]
    )
    assert item.title == "Model call failed, turn 1 (claude-sonnet-4-5): authentication (HTTP 401)"
    assert item.details == [("provider said", "invalid x-api-key")]
    assert item.tone == "bad"


def test_arguments_are_shown_where_the_call_was_proposed_only() -> None:
    items = timeline(
        [
            _event("tool_proposed", tool="refund", args={"amount": 249}, permission="ask"),
            _event(
                "ticket_opened",
                ticket_id="tk_1",
                target={"tool": "refund", "args": {"amount": 249}},
                who_may_decide="U1",
            ),
        ]
    )
    shown = [text for item in items for label, text in item.details if label == "arguments"]
    assert shown == ['{\n  "amount": 249\n}']


def test_each_call_says_who_decided_it_or_what_let_it_run() -> None:
    from adapters.mcp.rules import ArgumentRules, Condition
    from adapters.web.timeline import calls
    from runtime import Permission
    from runtime.domain.tools import describe_permission

    rules = ArgumentRules(
        Permission.ALLOW,
        ask_if=[Condition.parse({"environment": "production"}, where="rules")],
    )
    rule = describe_permission(rules)
    assert rule == "rule: ask if environment == 'production'; else allow"
    assert describe_permission(lambda args: "ask") == "a rule over the arguments"
    assert describe_permission(Permission.ASK) == "permission ask"

    def asked(call: str, ticket: str) -> list[dict[str, object]]:
        return [
            _event("tool_proposed", call_id=call, tool="deploy", args={}, permission="ask"),
            _event(
                "ticket_opened",
                ticket_id=ticket,
                target={"kind": "tool_permission", "call_id": call, "tool": "deploy"},
                who_may_decide="U1",
            ),
        ]

    events = [
        _event(
            "tool_proposed", call_id="c1", tool="deploy", args={}, permission="allow", rule=rule
        ),
        _event("tool_dispatched", call_id="c1", tool="deploy", attempt=1),
        _event("tool_completed", call_id="c1", tool="deploy", result="ok"),
        _event("tool_proposed", call_id="c2", tool="deploy", args={}, permission="ask"),
        _event("grant_applied", call_id="c2", tool="deploy", grant_id="gr_1", granted_by="U2"),
        *asked("c3", "tk_3"),
        _event("ticket_expired", ticket_id="tk_3", action="deny"),
        *asked("c4", "tk_4"),
        _event("ticket_voided", ticket_id="tk_4"),
        *asked("c5", "tk_5"),
        _event(
            "ticket_decided",
            ticket_id="tk_5",
            decision="deny",
            actor="U1",
            actor_name="Uma",
            platform="slack",
            decided_at="2026-12-01T08:05:00+00:00",
            reason="not today",
        ),
        _event("tool_denied", call_id="c5", tool="deploy", reason="Permission denied"),
        *asked("c6", "tk_6"),
    ]
    found = {c.call_id: c for c in calls(events)}
    assert found["c1"].outcome == f"Ran without asking: allowed by the tool's {rule}"
    assert (found["c1"].state, found["c1"].result) == ("completed", "ok")
    assert found["c2"].outcome == (
        "Ran without asking: allowed by the standing grant gr_1 (given by U2)"
    )
    assert found["c3"].state == "expired" and "expired (deny)" in found["c3"].outcome
    assert found["c4"].state == "withdrawn"
    denied = found["c5"]
    assert (denied.state, denied.outcome) == ("denied", "Denied by Uma via slack")
    assert (denied.decided_by, denied.reason) == ("Uma", "not today")
    assert denied.decided_at == "2026-12-01T08:05:00+00:00"
    assert found["c6"].waiting and not denied.waiting
