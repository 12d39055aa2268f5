"""Resume tickets, await targets, answers and `validate_resume`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from runtime import (
    Abort,
    Actor,
    Allow,
    Continue,
    Deny,
    Expired,
    InputData,
    InvalidAnswer,
    NotAwaiting,
    Pause,
    RemoteInput,
    ResolutionError,
    Resolve,
    ResumeCommand,
    ResumeError,
    ResumeTicket,
    Retry,
    StaleTicket,
    TicketStatus,
    ToolPermission,
    Unauthorized,
    Uncertain,
    validate_resume,
)
from runtime.domain.tickets import ANSWER, AWAIT_TARGET, answer_fits

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DEADLINE = T0 + timedelta(hours=1)
VERSION = "v1"
FINGERPRINT = "fp1"

PERMISSION = ToolPermission(call_id="c1", tool="refund", args={"amount": 250}, reason="why")
INPUT = RemoteInput(
    call_id="c1",
    tool="form",
    prompt="Which account?",
    schema={
        "type": "object",
        "properties": {"account": {"type": "string"}, "count": {"type": "integer", "minimum": 1}},
        "required": ["account"],
        "additionalProperties": False,
    },
)
UNCERTAIN = Uncertain(call_id="c1", tool="pay", args={"to": "x"}, execution_key="xk_1")
PAUSE = Pause()

TARGETS = [PERMISSION, INPUT, UNCERTAIN, PAUSE]
ANSWERS = [
    Allow(),
    Deny(reason="no"),
    InputData(data={"account": "a"}),
    Resolve(result={"ok": True}),
    Retry(),
    Abort(reason="gave up"),
    Continue(),
]
FITS = {
    "tool_permission": {"allow", "deny"},
    "remote_input": {"input", "deny"},
    "uncertain": {"resolve", "retry", "abort"},
    "pause": {"continue"},
}


def make_ticket(target: Any = PERMISSION, **changes: Any) -> ResumeTicket:
    fields: dict[str, Any] = {
        "ticket_id": "tk_1",
        "correlation": "secret-correlation",
        "run_id": "run_1",
        "thread_id": "th_1",
        "agent": "support",
        "agent_version": VERSION,
        "catalog_fingerprint": FINGERPRINT,
        "target": target,
        "requester": "U1",
        "created_at": T0,
    }
    if not isinstance(target, Pause):
        fields["deadline"] = DEADLINE
    fields.update(changes)
    return ResumeTicket(**fields)


def fitting_answer(ticket: ResumeTicket) -> Any:
    return {
        "tool_permission": Allow(),
        "remote_input": InputData(data={"account": "acc-1"}),
        "uncertain": Retry(),
        "pause": Continue(),
    }[ticket.target.kind]


def command_for(ticket: ResumeTicket, **changes: Any) -> ResumeCommand:
    command = ResumeCommand.from_ticket(
        ticket, changes.pop("answer", fitting_answer(ticket)), Actor(id="U1"), T0
    )
    return command.model_copy(update=changes) if changes else command


def check(command: ResumeCommand, ticket: ResumeTicket | None, **loaded: Any) -> None:
    validate_resume(
        command,
        ticket,
        agent_version=loaded.get("agent_version", VERSION),
        catalog_fingerprint=loaded.get("catalog_fingerprint", FINGERPRINT),
    )


# --- construction ------------------------------------------------------------------------


def test_a_valid_ticket_builds_and_is_frozen() -> None:
    ticket = make_ticket()
    assert ticket.status is TicketStatus.OPEN
    assert ticket.call_id == "c1"
    assert make_ticket(PAUSE).call_id is None
    with pytest.raises(ValidationError):
        ticket.status = TicketStatus.DECIDED  # type: ignore[misc]


def test_open_ticket_cannot_carry_a_decision() -> None:
    with pytest.raises(ValidationError, match="open ticket"):
        make_ticket(decision=Allow())
    with pytest.raises(ValidationError, match="open ticket"):
        make_ticket(decided_by="U1")


def test_decided_ticket_needs_its_decision() -> None:
    with pytest.raises(ValidationError, match="decided ticket"):
        make_ticket(status=TicketStatus.DECIDED)
    decided = make_ticket(status=TicketStatus.DECIDED, decision=Allow(), decided_by="U1")
    assert decided.decision == Allow()


def test_deadline_cannot_precede_creation() -> None:
    with pytest.raises(ValidationError, match="deadline"):
        make_ticket(deadline=T0 - timedelta(seconds=1))
    assert make_ticket(deadline=T0).deadline == T0


def test_pause_ticket_has_no_approvers() -> None:
    with pytest.raises(ValidationError, match="pause"):
        make_ticket(PAUSE, approvers=("U2",))
    with pytest.raises(ValidationError, match="pause"):
        make_ticket(PAUSE, four_eyes=True)


def test_unknown_fields_and_kinds_are_refused() -> None:
    with pytest.raises(ValidationError):
        make_ticket(token="xoxb-credential")
    with pytest.raises(ValidationError):
        AWAIT_TARGET.validate_python({"kind": "child"})
    with pytest.raises(ValidationError):
        ANSWER.validate_python({"kind": "maybe"})
    with pytest.raises(ValidationError):
        ToolPermission(call_id="c", tool="t", args={}, extra=1)  # type: ignore[call-arg]


# --- round trips -------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.kind)
def test_await_target_round_trips(target: Any) -> None:
    as_json = AWAIT_TARGET.dump_json(target, by_alias=True)
    back = AWAIT_TARGET.validate_json(as_json)
    assert back == target
    assert type(back) is type(target)
    as_python = AWAIT_TARGET.dump_python(target, mode="json", by_alias=True)
    assert as_python["kind"] == target.kind
    assert AWAIT_TARGET.validate_python(as_python) == target


def test_remote_input_schema_uses_its_alias() -> None:
    dumped = AWAIT_TARGET.dump_python(INPUT, mode="json", by_alias=True)
    assert "schema" in dumped and "schema_" not in dumped
    assert dumped["schema"]["required"] == ["account"]


@pytest.mark.parametrize("answer", ANSWERS, ids=lambda a: a.kind)
def test_answer_round_trips(answer: Any) -> None:
    back = ANSWER.validate_json(ANSWER.dump_json(answer))
    assert back == answer
    assert type(back) is type(answer)


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.kind)
def test_ticket_round_trips(target: Any) -> None:
    ticket = make_ticket(target)
    back = ResumeTicket.model_validate_json(ticket.model_dump_json(by_alias=True))
    assert back == ticket


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.kind)
@pytest.mark.parametrize("answer", ANSWERS, ids=lambda a: a.kind)
def test_answer_fits_table(target: Any, answer: Any) -> None:
    assert answer_fits(target, answer) == (answer.kind in FITS[target.kind])


# --- who may decide ----------------------------------------------------------------------


def test_requester_decides_by_default() -> None:
    ticket = make_ticket()
    assert ticket.may_decide(Actor(id="U1"))
    assert not ticket.may_decide(Actor(id="U2"))
    assert "U1" in ticket.who_may_decide()


def test_without_approvers_the_requester_decides() -> None:
    ticket = make_ticket()
    assert ticket.may_decide(Actor(id="U1"))
    assert not ticket.may_decide(Actor(id="U2"))
    assert ticket.deciders() == ("U1",)
    assert ticket.who_may_decide() == "U1"


def test_approvers_replace_the_requester() -> None:
    ticket = make_ticket(approvers=("U2",))
    assert not ticket.may_decide(Actor(id="U1"))  # the requester is not listed
    assert ticket.may_decide(Actor(id="U2"))
    assert not ticket.may_decide(Actor(id="U3"))
    assert ticket.deciders() == ("U2",)


def test_a_requester_entry_lets_the_requester_decide_too() -> None:
    ticket = make_ticket(approvers=("requester", "U2"))
    assert ticket.may_decide(Actor(id="U1"))
    assert ticket.may_decide(Actor(id="U2"))
    assert not ticket.may_decide(Actor(id="U3"))
    assert ticket.deciders() == ("U1", "U2")
    assert ticket.who_may_decide() == "U1, U2"


def test_four_eyes_excludes_the_requester_even_when_listed() -> None:
    ticket = make_ticket(approvers=("requester", "group:finance", "*"), four_eyes=True)
    assert not ticket.may_decide(Actor(id="U1", groups=frozenset({"finance"}), operator=True))
    assert ticket.may_decide(Actor(id="U2"))
    assert ticket.deciders() == ("group:finance", "*")
    assert ticket.excluded == "U1"
    assert ticket.who_may_decide() == "members of finance, anyone (not the requester)"


def test_no_requester_and_no_approvers_leaves_operators() -> None:
    ticket = make_ticket(requester=None)
    assert not ticket.may_decide(Actor(id="U1"))
    assert ticket.may_decide(Actor(id="ops", operator=True))
    assert ticket.deciders() == ()
    assert ticket.who_may_decide() == "an operator"


def test_group_entries_match_verified_groups() -> None:
    ticket = make_ticket(approvers=("group:finance",))
    assert ticket.may_decide(Actor(id="U7", groups=frozenset({"finance"})))
    assert not ticket.may_decide(Actor(id="U7", groups=frozenset({"sales"})))
    assert not ticket.may_decide(Actor(id="finance"))


def test_a_user_id_never_matches_a_group_entry() -> None:
    # `group:<id>` entries are matched against verified groups only; a user whose id
    # happens to spell the entry is not a member.
    ticket = make_ticket(approvers=("group:finance",))
    assert not ticket.may_decide(Actor(id="group:finance"))


def test_star_lets_anyone_decide() -> None:
    ticket = make_ticket(approvers=("*",))
    assert ticket.may_decide(Actor(id="anyone"))


def test_four_eyes_forbids_the_requester_even_as_operator() -> None:
    ticket = make_ticket(approvers=("U2", "*"), four_eyes=True)
    assert not ticket.may_decide(Actor(id="U1"))
    assert not ticket.may_decide(Actor(id="U1", operator=True))
    assert ticket.may_decide(Actor(id="U2"))
    assert "not the requester" in ticket.who_may_decide()


def test_four_eyes_without_approvers_leaves_operators() -> None:
    ticket = make_ticket(four_eyes=True)
    assert not ticket.may_decide(Actor(id="U2"))
    assert ticket.may_decide(Actor(id="U2", operator=True))


def test_operator_may_decide_anything_else() -> None:
    ticket = make_ticket(approvers=("U2",))
    assert ticket.may_decide(Actor(id="ops", operator=True))


# --- validate_resume: one case per refusal --------------------------------------------------


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.kind)
def test_a_matching_command_is_accepted(target: Any) -> None:
    ticket = make_ticket(target)
    check(command_for(ticket), ticket)


def test_unknown_ticket_is_not_awaiting() -> None:
    ticket = make_ticket()
    with pytest.raises(NotAwaiting):
        check(command_for(ticket), None)


@pytest.mark.parametrize("status", [TicketStatus.DECIDED, TicketStatus.VOIDED])
def test_closed_ticket_is_not_awaiting(status: TicketStatus) -> None:
    extra: dict[str, Any] = {"decision": Allow(), "decided_by": "U1"} if status == "decided" else {}
    ticket = make_ticket(status=status, **extra)
    with pytest.raises(NotAwaiting, match=str(status)):
        check(command_for(make_ticket()), ticket)


def test_expired_status_is_expired() -> None:
    ticket = make_ticket(status=TicketStatus.EXPIRED, decided_at=DEADLINE)
    with pytest.raises(Expired):
        check(command_for(make_ticket()), ticket)


def test_tampered_correlation_is_not_awaiting() -> None:
    ticket = make_ticket()
    with pytest.raises(NotAwaiting, match="correlation"):
        check(command_for(ticket, correlation="forged"), ticket)


@pytest.mark.parametrize("forged", ["caf\u00e9", "\x80", "\u2603" * 8])
def test_non_ascii_correlation_is_not_awaiting(forged: str) -> None:
    # A forged token comes from a UI event; whatever it holds, the answer is a refusal,
    # never a crash.
    ticket = make_ticket()
    with pytest.raises(NotAwaiting, match="correlation"):
        check(command_for(ticket, correlation=forged), ticket)


@pytest.mark.parametrize("field", ["run_id", "thread_id"])
def test_wrong_run_or_thread_is_not_awaiting(field: str) -> None:
    ticket = make_ticket()
    with pytest.raises(NotAwaiting, match="another run or thread"):
        check(command_for(ticket, **{field: "other"}), ticket)


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.kind)
def test_misfit_answer_is_a_resolution_error(target: Any) -> None:
    ticket = make_ticket(target)
    for answer in ANSWERS:
        if answer.kind in FITS[target.kind]:
            continue
        with pytest.raises(ResolutionError) as info:
            check(command_for(ticket, answer=answer), ticket)
        assert type(info.value) is ResolutionError


def test_unauthorized_actor() -> None:
    ticket = make_ticket(approvers=("requester", "U2"))
    with pytest.raises(Unauthorized, match="U1, U2"):
        check(command_for(ticket, actor=Actor(id="U3")), ticket)


def test_deadline_passed_is_expired() -> None:
    ticket = make_ticket()
    check(command_for(ticket, at=DEADLINE - timedelta(microseconds=1)), ticket)
    with pytest.raises(Expired):
        check(command_for(ticket, at=DEADLINE), ticket)
    with pytest.raises(Expired):
        check(command_for(ticket, at=DEADLINE + timedelta(days=3)), ticket)


def test_changed_agent_version_is_stale() -> None:
    ticket = make_ticket()
    with pytest.raises(StaleTicket):
        check(command_for(ticket), ticket, agent_version="v2")


def test_changed_catalog_is_stale() -> None:
    ticket = make_ticket()
    with pytest.raises(StaleTicket):
        check(command_for(ticket), ticket, catalog_fingerprint="fp2")


def test_agent_not_loaded_is_stale() -> None:
    ticket = make_ticket()
    with pytest.raises(StaleTicket, match="not loaded"):
        check(command_for(ticket), ticket, agent_version=None, catalog_fingerprint=None)


def test_invalid_input_lists_every_field_error() -> None:
    ticket = make_ticket(INPUT)
    bad = InputData(data={"count": 0, "color": "red"})
    with pytest.raises(InvalidAnswer) as info:
        check(command_for(ticket, answer=bad), ticket)
    assert isinstance(info.value, ResolutionError)
    errors = info.value.errors
    assert all({"path", "message"} <= set(e) for e in errors)
    paths = {e["path"] for e in errors}
    assert "count" in paths  # below the minimum
    messages = " ".join(e["message"] for e in errors)
    assert "account" in messages  # missing required
    assert "color" in messages  # not allowed
    assert len(errors) == 3


def test_deny_of_input_skips_the_schema() -> None:
    ticket = make_ticket(INPUT)
    check(command_for(ticket, answer=Deny()), ticket)


def test_every_refusal_is_a_resume_error() -> None:
    for error in (NotAwaiting, Expired, Unauthorized, StaleTicket, ResolutionError, InvalidAnswer):
        assert issubclass(error, ResumeError)


def test_from_ticket_copies_identity() -> None:
    ticket = make_ticket()
    actor = Actor(id="U2", platform="slack")
    command = ResumeCommand.from_ticket(ticket, Deny(reason="no"), actor, T0)
    assert (command.ticket_id, command.correlation, command.run_id, command.thread_id) == (
        ticket.ticket_id,
        ticket.correlation,
        ticket.run_id,
        ticket.thread_id,
    )
    assert command.actor == actor
    assert command.at == T0


# --- properties ----------------------------------------------------------------------------

ACTOR_IDS = ["U1", "U2", "U3", "ops"]
actors = st.builds(
    Actor,
    id=st.sampled_from(ACTOR_IDS),
    groups=st.frozensets(st.sampled_from(["finance", "sales"]), max_size=2),
    operator=st.booleans(),
)
tickets = st.builds(
    make_ticket,
    target=st.sampled_from([PERMISSION, UNCERTAIN]),
    approvers=st.lists(
        st.sampled_from(["U2", "group:finance", "*", "nobody", "requester"]),
        max_size=3,
        unique=True,
    ).map(tuple),
    four_eyes=st.booleans(),
    deadline=st.one_of(st.none(), st.just(DEADLINE)),
)
answers = st.sampled_from(ANSWERS)
offsets = st.integers(min_value=-7200, max_value=7200).map(lambda s: timedelta(seconds=s))


def authorised(ticket: ResumeTicket, actor: Actor) -> bool:
    if ticket.four_eyes and actor.id == ticket.requester:
        return False
    if actor.operator:
        return True
    if not ticket.approvers:
        return actor.id == ticket.requester
    return (
        actor.id in ticket.approvers
        or "*" in ticket.approvers
        or ("requester" in ticket.approvers and actor.id == ticket.requester)
        or ("group:finance" in ticket.approvers and "finance" in actor.groups)
    )


@given(
    ticket=tickets,
    # Non-ASCII tokens have their own test (test_non_ascii_correlation_is_not_awaiting).
    correlation=st.one_of(
        st.just("secret-correlation"),
        st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=20),
    ),
    run_id=st.one_of(st.just("run_1"), st.sampled_from(["run_2", "", "RUN_1"])),
    thread_id=st.one_of(st.just("th_1"), st.sampled_from(["th_2", "", "TH_1"])),
    answer=answers,
    actor=actors,
    offset=offsets,
    version=st.sampled_from([VERSION, "v2", None]),
)
def test_validate_accepts_exactly_the_matching_commands(
    ticket: ResumeTicket,
    correlation: str,
    run_id: str,
    thread_id: str,
    answer: Any,
    actor: Actor,
    offset: timedelta,
    version: str | None,
) -> None:
    at = T0 + timedelta(minutes=30) + offset
    command = ResumeCommand(
        ticket_id=ticket.ticket_id,
        correlation=correlation,
        run_id=run_id,
        thread_id=thread_id,
        answer=answer,
        actor=actor,
        at=at,
    )
    before = ticket.model_dump()
    expected_ok = (
        correlation == ticket.correlation
        and run_id == ticket.run_id
        and thread_id == ticket.thread_id
        and answer.kind in FITS[ticket.target.kind]
        and authorised(ticket, actor)
        and (ticket.deadline is None or at < ticket.deadline)
        and version == VERSION
    )
    try:
        validate_resume(
            command,
            ticket,
            agent_version=version,
            catalog_fingerprint=FINGERPRINT if version is not None else None,
        )
    except ResumeError as refused:
        accepted = False
        # The refusal says why, in the order the checks run.
        if correlation != ticket.correlation or (run_id, thread_id) != ("run_1", "th_1"):
            assert isinstance(refused, NotAwaiting)
        elif not authorised(ticket, actor):
            assert isinstance(refused, Unauthorized)
        elif answer.kind not in FITS[ticket.target.kind]:
            assert type(refused) is ResolutionError
        elif ticket.deadline is not None and at >= ticket.deadline:
            assert isinstance(refused, Expired)
        else:
            assert isinstance(refused, StaleTicket)
    else:
        accepted = True
    assert accepted == expected_ok
    assert ticket.model_dump() == before


@given(
    ticket=tickets,
    status=st.sampled_from(list(TicketStatus)),
    answer=answers,
    actor=actors,
    offset=offsets,
)
def test_validate_never_accepts_a_closed_ticket_and_never_mutates(
    ticket: ResumeTicket, status: TicketStatus, answer: Any, actor: Actor, offset: timedelta
) -> None:
    if status is TicketStatus.DECIDED:
        ticket = ticket.model_copy(update={"status": status, "decision": Allow()})
    else:
        ticket = ticket.model_copy(update={"status": status})
    before = ticket.model_dump()
    command = ResumeCommand.from_ticket(ticket, answer, actor, T0 + offset)
    try:
        check(command, ticket)
    except ResumeError:
        accepted = False
    else:
        accepted = True
    if status is not TicketStatus.OPEN:
        assert not accepted
    assert ticket.model_dump() == before
    assert command.ticket_id == ticket.ticket_id


@given(data=st.dictionaries(st.sampled_from(["account", "count", "x"]), st.integers() | st.text()))
def test_input_is_accepted_exactly_when_it_fits_the_schema(data: dict[str, Any]) -> None:
    ticket = make_ticket(INPUT)
    fits = (
        set(data) <= {"account", "count"}
        and isinstance(data.get("account"), str)
        and ("count" not in data or (isinstance(data["count"], int) and data["count"] >= 1))
    )
    try:
        check(command_for(ticket, answer=InputData(data=data)), ticket)
    except InvalidAnswer as refused:
        assert refused.errors
        accepted = False
    else:
        accepted = True
    assert accepted == fits
