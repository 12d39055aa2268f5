"""What a plain user sees and may do with ``--as USER --no-operator``: every command that
takes ``--as``, against a SQLite file (the helpers of `test_cli`). Someone else's run does
not exist for a stranger; someone who sees a run without having started it may not pause,
cancel or resume it; neither changes anything.

The commands run in this process, through `bot.cli.run`, the function the ``signoff``
console script exits with: a fresh process per command would cost a second of imports
each, forty times over. The runs are started in a separate process, and each test runs one
command as a real ``python -m bot`` process too, which must answer exactly as the
in-process call does.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bot.cli import run as command_line
from bot.logs import QUIET_LIBRARIES
from tests.e2e.test_cli import PAGE, REFUND, Env, Result

STRANGER = ("--as", "U9", "--no-operator")


@contextmanager
def _logging_kept() -> Iterator[None]:
    # The command line sets up logging for its process (the root logger's handlers and
    # levels); in this process that is pytest's, so put it back afterwards.
    loggers = [logging.getLogger(), *(logging.getLogger(name) for name in QUIET_LIBRARIES)]
    handlers = list(loggers[0].handlers)
    levels = [logger.level for logger in loggers]
    try:
        yield
    finally:
        root = loggers[0]
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


class InProcess(Env):
    """`Env` whose ``signoff`` commands run in this process (`process` spawns one)."""

    def __init__(
        self, tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        super().__init__(tmp)
        self._capsys = capsys
        for name in [n for n in os.environ if n.startswith("SIGNOFF_")]:
            monkeypatch.delenv(name)
        for name, value in self.vars.items():
            if name.startswith("SIGNOFF_"):
                monkeypatch.setenv(name, value)

    def signoff(self, *args: str, input: str | None = None, **env: str) -> Result:
        assert input is None and not env, "only the process takes input or more settings"
        self._capsys.readouterr()
        with _logging_kept():
            code = command_line(args)
        out, err = self._capsys.readouterr()
        return Result(code, out, err)

    def process(self, *args: str) -> Result:
        """Run ``python -m bot ARGS`` in a process of its own."""
        return super().signoff(*args)


@pytest.fixture
def env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> InProcess:
    return InProcess(tmp_path, monkeypatch, capsys)


def _recorded(env: InProcess, run: str) -> list[str]:
    done = env.signoff("runs", "show", run, "--jsonl")
    assert done.code == 0, done.err
    return [json.loads(line)["kind"] for line in done.out.splitlines()]


def test_a_stranger_neither_sees_nor_changes_someone_elses_runs(env: InProcess) -> None:
    started = env.start(REFUND, ("granted", "refunds", "Order A1001 was charged twice"))
    run, ticket = started["refund"]["run"], started["refund"]["tickets"][0]
    other = started["granted"]["tickets"][0]
    given = env.signoff(
        "approve", other, "--grant", "run", "--no-resume", "--as", "U1", "--no-operator"
    )
    assert given.code == 0, given.err
    [grant] = json.loads(env.signoff("grants", "list", "--json").out)
    before = (env.runs(), env.tickets(), _recorded(env, run))

    for args in (("runs", "show", run), ("runs", "show", run, "--jsonl")):
        hidden = env.signoff(*args, *STRANGER)
        assert hidden.code == 4, hidden.err
        assert hidden.error_line() == f"signoff: not found: no run '{run}'"
    alone = env.process("runs", "show", run, *STRANGER)
    assert alone == env.signoff("runs", "show", run, *STRANGER)
    for args, empty in (
        (("runs", "list", "--json"), "[]"),
        (("tickets", "--json"), "[]"),
        (("grants", "list", "--json"), "[]"),
        (("runs", "list"), "no runs"),
        (("tickets",), "no open tickets"),
    ):
        listed = env.signoff(*args, *STRANGER)
        assert listed.code == 0, listed.err
        assert listed.out.strip() == empty, args

    for args in (
        ("approve", ticket),
        ("deny", ticket, "--reason", "no"),
        ("answer", ticket, "--data", "{}"),
        ("resolve", ticket, "--retry"),
    ):
        refused = env.signoff(*args, *STRANGER)
        assert refused.code == 7, (args, refused.err)
        assert refused.error_line().startswith("signoff: not allowed: U9 may not decide")
    batch = env.signoff("batch", "allow", ticket, *STRANGER)
    assert batch.code == 4
    assert "allowed 0 of 1 as U9" in batch.out

    for args, unknown in (
        (("pause", run), "run"),
        (("cancel", run, "--reason", "mine now"), "run"),
        (("resume", run), "run or thread"),
    ):
        refused = env.signoff(*args, *STRANGER)
        assert refused.code == 4, (args, refused.out, refused.err)
        assert refused.error_line() == f"signoff: not found: no {unknown} '{run}'"
    revoke = env.signoff("grants", "revoke", grant["grant_id"], *STRANGER)
    assert revoke.code == 4
    assert revoke.error_line() == f"signoff: not found: no grant '{grant['grant_id']}'"

    assert (env.runs(), env.tickets(), _recorded(env, run)) == before
    assert [g["state"] for g in json.loads(env.signoff("grants", "list", "--json").out)] == [
        "active"
    ]


def test_only_an_operator_or_the_requester_controls_a_run(env: InProcess) -> None:
    run, ticket = (lambda s: (s["run"], s["tickets"][0]))(env.start(PAGE)["page"])
    # ops:alice decides the page, so she sees the run from then on, as a plain user too.
    decided = env.signoff("approve", ticket, "--no-resume", "--as", "ops:alice")
    assert decided.code == 0, decided.err
    alice = ("--as", "ops:alice", "--no-operator")
    shown = env.signoff("runs", "show", run, *alice)
    assert shown.code == 0, shown.err
    assert "status     queued" in shown.out
    before = _recorded(env, run)

    for action in ("pause", "cancel", "resume"):
        refused = env.signoff(action, run, *alice)
        assert refused.code == 7, (action, refused.out, refused.err)
        assert refused.error_line() == (
            f"signoff: not allowed: only an operator or the requester (U1) may {action} run "
            f"{run}; ops:alice is neither (nothing was changed)"
        )
        assert refused.out == ""
    alone = env.process("pause", run, *alice)
    assert alone == env.signoff("pause", run, *alice)
    assert _recorded(env, run) == before
    assert [r["status"] for r in env.runs()] == ["queued"]

    # The requester controls their own run without operator authority.
    requester = ("--as", "U1", "--no-operator")
    paused = env.signoff("pause", run, *requester)
    assert paused.code == 0, paused.err
    assert "is paused" in paused.out
    resumed = env.signoff("resume", run, *requester)
    assert resumed.code == 0, resumed.err
    assert f"run {run} is done" in resumed.out
