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
