"""Transition tables of runs and tool calls."""

from __future__ import annotations

import itertools

import pytest

from runtime import CallState, IllegalTransition, RunStatus, TicketStatus
from runtime.domain.states import (
    CALL_TRANSITIONS,
    RUN_TRANSITIONS,
    check_call_move,
    check_run_move,
)

RUN_MOVES = [(a, b) for a, targets in RUN_TRANSITIONS.items() for b in sorted(targets)]
CALL_MOVES = [(a, b) for a, targets in CALL_TRANSITIONS.items() for b in sorted(targets)]


def test_tables_cover_every_state() -> None:
    assert set(RUN_TRANSITIONS) == set(RunStatus)
    assert set(CALL_TRANSITIONS) == set(CallState)
    for targets in RUN_TRANSITIONS.values():
        assert targets <= set(RunStatus)
    for call_targets in CALL_TRANSITIONS.values():
        assert call_targets <= set(CallState)


@pytest.mark.parametrize(("current", "new"), RUN_MOVES)
def test_every_allowed_run_move_passes(current: RunStatus, new: RunStatus) -> None:
    check_run_move(current, new)


@pytest.mark.parametrize(("current", "new"), CALL_MOVES)
def test_every_allowed_call_move_passes(current: CallState, new: CallState) -> None:
    check_call_move(current, new)


def test_the_lifecycle_of_the_design_is_allowed() -> None:
    run_path = [
        RunStatus.QUEUED,
        RunStatus.RUNNING,
        RunStatus.AWAITING,
        RunStatus.RUNNING,
        RunStatus.PAUSED,
        RunStatus.QUEUED,
        RunStatus.RUNNING,
        RunStatus.DONE,
    ]
    for a, b in itertools.pairwise(run_path):
        check_run_move(a, b)
    call_path = [
        CallState.PROPOSED,
        CallState.AWAITING_DECISION,
        CallState.APPROVED,
        CallState.DISPATCHED,
        CallState.UNCERTAIN,
        CallState.RESOLVED,
    ]
    for a, b in itertools.pairwise(call_path):
        check_call_move(a, b)


@pytest.mark.parametrize(
    ("current", "new"),
    [
        (RunStatus.QUEUED, RunStatus.DONE),
        (RunStatus.QUEUED, RunStatus.AWAITING),
        (RunStatus.AWAITING, RunStatus.DONE),
        (RunStatus.PAUSED, RunStatus.RUNNING),
        (RunStatus.DONE, RunStatus.RUNNING),
        (RunStatus.FAILED, RunStatus.QUEUED),
        (RunStatus.CANCELLED, RunStatus.RUNNING),
        (RunStatus.DONE, RunStatus.DONE),
    ],
)
def test_illegal_run_moves_raise(current: RunStatus, new: RunStatus) -> None:
    with pytest.raises(IllegalTransition) as info:
        check_run_move(current, new)
    assert str(current) in str(info.value)
    assert str(new) in str(info.value)


@pytest.mark.parametrize(
    ("current", "new"),
    [
        (CallState.PROPOSED, CallState.DISPATCHED),
        (CallState.AWAITING_DECISION, CallState.DISPATCHED),
        (CallState.DENIED, CallState.APPROVED),
        (CallState.COMPLETED, CallState.DISPATCHED),
        (CallState.FAILED, CallState.APPROVED),
        (CallState.RESOLVED, CallState.UNCERTAIN),
        (CallState.DISPATCHED, CallState.DENIED),
        (CallState.APPROVED, CallState.COMPLETED),
        (CallState.UNCERTAIN, CallState.COMPLETED),
        (CallState.CANCELLED, CallState.APPROVED),
    ],
)
def test_illegal_call_moves_raise(current: CallState, new: CallState) -> None:
    with pytest.raises(IllegalTransition):
        check_call_move(current, new)


def test_every_move_not_in_the_tables_is_illegal() -> None:
    for a in RunStatus:
        for b in RunStatus:
            if b in RUN_TRANSITIONS[a]:
                continue
            with pytest.raises(IllegalTransition):
                check_run_move(a, b)
    for c in CallState:
        for d in CallState:
            if d in CALL_TRANSITIONS[c]:
                continue
            with pytest.raises(IllegalTransition):
                check_call_move(c, d)


def test_finished_runs_are_exactly_the_terminal_ones() -> None:
    finished = {s for s in RunStatus if s.finished}
    assert finished == {RunStatus.DONE, RunStatus.FAILED, RunStatus.CANCELLED}
    # A finished run has no way out; every other status has one.
    for status in RunStatus:
        assert (not RUN_TRANSITIONS[status]) == status.finished


def test_settled_calls_are_exactly_those_with_a_model_visible_result() -> None:
    settled = {s for s in CallState if s.settled}
    assert settled == {
        CallState.DENIED,
        CallState.COMPLETED,
        CallState.FAILED,
        CallState.RESOLVED,
        CallState.CANCELLED,
    }
    for state in settled:
        assert not CALL_TRANSITIONS[state], f"{state} is settled but can still move"


def test_enum_values_are_stable_strings() -> None:
    assert [s.value for s in RunStatus] == [
        "queued",
        "running",
        "awaiting",
        "paused",
        "done",
        "failed",
        "cancelled",
    ]
    assert CallState("awaiting_decision") is CallState.AWAITING_DECISION
    assert CallState("dispatched") is CallState.DISPATCHED
    assert {s.value for s in TicketStatus} == {"open", "decided", "expired", "voided"}
