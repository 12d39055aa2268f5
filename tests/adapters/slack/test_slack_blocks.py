"""Block Kit builders: Slack's limits hold for any input; buttons carry only the ticket."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.slack import blocks, modals
from adapters.slack.blocks import TicketRef
from runtime.domain.notifications import (
    CARD_KINDS,
    ApprovalRequested,
    Decided,
    InputRequested,
    RunFinished,
    TicketExpired,
    TicketNotification,
    TicketVoided,
    UncertainCall,
    read_notification,
)

REF = TicketRef("tk_0123456789abcdef0123", "A" * 43)


def fields(args: Any, **extra: Any) -> dict[str, Any]:
    return {
        "run_id": "run_1",
        "agent": "bank",
        "ticket_id": REF.ticket_id,
        "target": {"kind": "tool_permission", "call_id": "c1", "tool": "transfer", "args": args},
        "requester": "U1",
        "approvers": ["group:S1", "group:C2", "U3", "group:ops"],
        "deciders": ["group:S1", "group:C2", "U3", "group:ops"],
        "four_eyes": False,
        "deadline": "2026-01-01T00:10:00+00:00",
        **extra,
    }


def payload(args: Any, **extra: Any) -> ApprovalRequested:
    return ApprovalRequested.model_validate(fields(args, **extra))


def note(kind: str, args: Any, **extra: Any) -> TicketNotification:
    read = read_notification(kind, fields(args, **extra))
    assert isinstance(read, ApprovalRequested | InputRequested | UncertainCall)
    return read


def check_limits(message: list[dict[str, Any]]) -> None:
    assert len(message) <= blocks.MAX_BLOCKS
    for block in message:
        text = block.get("text")
        if isinstance(text, dict):
            limit = blocks.MAX_HEADER_TEXT if block["type"] == "header" else 3000
            assert len(text["text"]) <= limit
        for item in block.get("fields") or []:
            assert len(item["text"]) <= 2000
        for element in block.get("elements") or []:
            if element.get("type") == "button":
                assert len(element["value"]) <= blocks.MAX_BUTTON_VALUE
                assert len(element["text"]["text"]) <= 75
            elif "text" in element:
                assert len(element["text"]) <= 3000


def test_huge_arguments_are_truncated_safely() -> None:
    args = {"note": "&<>" * 5000, "items": list(range(3000)), "nested": {"a": {"b": "x" * 9000}}}
    card = blocks.approval_card(payload(args, target={"tool": "t" * 500, "args": args}), REF)
    check_limits(card)
    code = next(b["text"]["text"] for b in card if b["text"]["text"].startswith("```"))
    assert code.endswith("…```") and "&amp;&lt;&gt;" in code
    assert not code[:-4].rstrip("…").endswith("&")  # never cut inside an entity


def test_buttons_carry_only_the_ticket_and_its_token() -> None:
    card = blocks.approval_card(payload({"amount": 1}), REF)
    [actions] = [b for b in card if b["type"] == "actions"]
    for element in actions["elements"]:
        assert json.loads(element["value"]) == {"t": REF.ticket_id, "c": REF.correlation}
        assert blocks.parse_ref(element["value"]) == REF
    assert [e["action_id"] for e in actions["elements"]] == [
        blocks.ACTION_ALLOW,
        blocks.ACTION_DENY,
        blocks.ACTION_DENY_REASON,
    ]
    assert [e.get("style") for e in actions["elements"]] == ["primary", "danger", None]


def test_who_may_decide_renders_slack_mentions() -> None:
    shown = json.dumps(blocks.approval_card(payload({}), REF))
    assert "<@U1>" in shown and "<!subteam^S1>" in shown and "members of <#C2>" in shown
    assert "<@U3>" in shown and "group `ops`" in shown
    assert "<!date^1767226200^{date_short_pretty} at {time}|" in shown


@pytest.mark.parametrize("value", [None, 7, "", "x", "[]", '{"t": 1, "c": "x"}', '{"t": "a"}'])
def test_foreign_button_values_are_not_ours(value: Any) -> None:
    assert blocks.parse_ref(value) is None


def test_closed_cards_have_no_buttons_and_say_how() -> None:
    decided = Decided(
        run_id="run_1",
        ticket_id=REF.ticket_id,
        decision="deny",
        actor="U2",
        decided_at="2026-01-01T00:05:00+00:00",
        reason="too <much>",
    )
    line = blocks.outcome_line(decided)
    assert line.startswith(":no_entry: Denied by <@U2> at <!date^") and "too &lt;much&gt;" in line
    card = blocks.approval_card(payload({}), None, line)
    assert not any(b["type"] == "actions" for b in card)
    expired = TicketExpired(run_id="run_1", ticket_id=REF.ticket_id, action="deny")
    assert "Expired" in blocks.outcome_line(expired)
    escalated = blocks.outcome_line(
        TicketExpired(
            run_id="run_1", ticket_id=REF.ticket_id, action="escalate", escalated_to=["U9"]
        )
    )
    assert "escalated to <@U9>" in escalated
    voided = TicketVoided(run_id="run_1", ticket_id=REF.ticket_id, reason="stop")
    assert "Voided" in blocks.outcome_line(voided)


def test_final_answer_is_split_within_limits() -> None:
    text, message = blocks.finished_message(
        RunFinished(status="done", text="word " * 60_000, agent="bank", run_id="run_1")
    )
    check_limits(message)
    assert len(text) <= 3000 and len(message) == blocks.MAX_BLOCKS
    failed, _ = blocks.finished_message(
        RunFinished(status="failed", error="boom", agent="bank", run_id="run_1")
    )
    assert "failed: boom" in failed


@settings(max_examples=60, deadline=None)
@given(
    args=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=400),
        lambda inner: (
            st.lists(inner, max_size=8) | st.dictionaries(st.text(max_size=30), inner, max_size=8)
        ),
        max_leaves=60,
    ),
    tool=st.text(min_size=1, max_size=300),
    reason=st.text(max_size=4000),
)
def test_any_card_fits_block_kit(args: Any, tool: str, reason: str) -> None:
    for kind in CARD_KINDS:
        target = {
            "tool": tool,
            "args": args,
            "reason": reason,
            "prompt": reason,
            "execution_key": tool,
        }
        check_limits(blocks.card(note(kind, args, target=target), REF))
        assert len(blocks.card_text(note(kind, args, target=target))) <= 3000


def test_input_modal_from_a_json_schema() -> None:
    schema = {
        "$defs": {"Color": {"enum": ["red", "green"], "type": "string"}},
        "properties": {
            "name": {"type": "string", "title": "Name", "description": "Who"},
            "count": {"type": "integer", "default": 3},
            "ratio": {"type": "number"},
            "ok": {"type": "boolean", "default": False},
            "color": {"anyOf": [{"$ref": "#/$defs/Color"}, {"type": "null"}]},
            "extra": {"type": "object"},
        },
        "required": ["name", "count"],
        "type": "object",
    }
    view = modals.input_modal(REF, "a_tool_with_a_rather_long_name", "Tell me", schema)
    assert len(view["title"]["text"]) <= blocks.MAX_MODAL_TITLE
    assert json.loads(view["private_metadata"]) == {"t": REF.ticket_id, "c": REF.correlation}
    inputs = [b for b in view["blocks"] if b["type"] == "input"]
    kinds = [b["element"]["type"] for b in inputs]
    assert kinds == [
        "plain_text_input",
        "plain_text_input",
        "plain_text_input",
        "static_select",
        "static_select",
        "plain_text_input",
    ]
    assert [b["optional"] for b in inputs] == [False, False, True, True, True, True]
    assert inputs[3]["element"]["initial_option"]["value"] == "false"
    assert inputs[5]["element"]["multiline"] is True  # JSON for an object

    state = {
        "field_0": {"value": {"value": "Ada"}},
        "field_1": {"value": {"value": " 4 "}},
        "field_2": {"value": {"value": "0.5"}},
        "field_3": {"value": {"selected_option": {"value": "true"}}},
        "field_4": {"value": {"selected_option": {"value": '"green"'}}},
        "field_5": {"value": {"value": '{"a": 1}'}},
    }
    data, errors = modals.read_input(schema, state)
    assert errors == {}
    assert data == {
        "name": "Ada",
        "count": 4,
        "ratio": 0.5,
        "ok": True,
        "color": "green",
        "extra": {"a": 1},
    }

    bad = {
        **state,
        "field_1": {"value": {"value": "x"}},
        "field_4": {"value": {"selected_option": {"value": '"blue"'}}},
    }
    bad.pop("field_0")
    _data, errors = modals.read_input(schema, bad)
    assert errors == {
        "field_0": "This field is required.",
        "field_1": "Enter a whole number.",
        "field_4": "Choose one of the options.",
    }
    shown = modals.field_errors(
        schema,
        [
            {"path": "count", "message": "5 is greater than the maximum of 4"},
            {"path": "", "message": "'name' is a required property"},
            {"path": "", "message": "something else"},
        ],
    )
    assert shown == {
        "field_1": "5 is greater than the maximum of 4",
        "field_0": "'name' is a required property",
    }


def test_modals_fit_slack_limits() -> None:
    for view in (
        modals.deny_reason_modal(REF, "x" * 400),
        modals.resolve_modal(REF, "page", {"big": "y" * 10_000}),
        modals.input_modal(
            REF,
            "t",
            "p" * 10_000,
            {"properties": {f"f{i}": {"type": "string"} for i in range(200)}},
        ),
        modals.notice_view("A rather long title for a modal", "text"),
    ):
        assert len(view["title"]["text"]) <= blocks.MAX_MODAL_TITLE
        assert len(view["blocks"]) <= 100
        check_limits(view["blocks"])
        assert len(view.get("private_metadata", "")) <= 3000


def test_the_tools_own_description_and_mcp_server_are_shown_cut_and_escaped() -> None:
    hostile = "Moves <!channel> money & more.\n\n" + "x" * 5000
    card = blocks.approval_card(
        payload({"amount": 1}, tool_description=hostile, tool_server="bank<api>"), REF
    )
    check_limits(card)
    [about] = [b for b in card if b["type"] == "context" and "MCP server" in json.dumps(b)]
    described, server = (e["text"] for e in about["elements"])
    assert described.startswith("Moves &lt;!channel&gt; money &amp; more. xxx")
    assert described.endswith("x…") and len(described) <= blocks.MAX_TOOL_DESCRIPTION + 20
    assert server == "MCP server `bank&lt;api&gt;`"
    # Right under the card's title, before the call and its arguments.
    assert card.index(about) == 1

    plain = blocks.approval_card(payload({"amount": 1}), REF)
    assert "MCP server" not in json.dumps(plain) and len(plain) == len(card) - 1
