"""Rego's ``time.*`` built-ins: the in-process engine (regopy 1.5.2) can abort the whole
process inside some of them, so a policy calling one is refused when it is loaded, and a
policy file changed to call one fails every call closed with a ``policy_failed`` event
saying why (on SQLite and PostgreSQL) while the process goes on deciding calls."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.policies import load_policy
from bot.agents_file import load_agents_file
from runtime import ConfigurationError, RunStatus
from runtime.edges import PolicyError
from tests.policies.test_policy_runs import Ops, RuntimeFactory, write

HOURS = """\
package signoff

import rego.v1

default decision := "ask"

# Not time.clock(time.now_ns()): the call's own hour, which replays see too.
decision := "allow" if {
    input.hour_utc >= 0
    input.weekday_utc != "time.weekday(0)"
}
"""

TIME_BUILTINS = """\
package signoff

import rego.v1

default decision := "ask"

decision := "allow" if {
    time.weekday(time.now_ns()) != "Sunday"
    time.clock([time.now_ns(), "Europe/Berlin"])[0] >= 8
}
"""


def test_a_policy_calling_time_builtins_is_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as refused:
        load_policy("rego", write(tmp_path, "t.rego", TIME_BUILTINS), policy_id="t")
    message = str(refused.value)
    assert "time.clock, time.now_ns, time.weekday" in message
    assert "input.hour_utc" in message and "input.weekday_utc" in message


def test_the_agents_file_names_the_policy_that_calls_them(tmp_path: Path) -> None:
    write(tmp_path, "t.rego", TIME_BUILTINS)
    agents = write(
        tmp_path,
        "agents.toml",
        '[policies.window]\nengine = "rego"\nfile = "t.rego"\n\n'
        '[agents.ops]\nexternal = true\npolicy = "window"\n',
    )
    with pytest.raises(ConfigurationError, match=r"policies\.window.*time\.now_ns"):
        load_agents_file(agents)


def test_mentions_in_comments_and_strings_are_not_calls(tmp_path: Path) -> None:
    policy = load_policy("rego", write(tmp_path, "h.rego", HOURS), policy_id="h")
    assert policy.id == "h"


async def test_a_file_changed_to_call_them_fails_closed_until_fixed(
    runtime_factory: RuntimeFactory, tmp_path: Path
) -> None:
    path = write(tmp_path, "h.rego", HOURS)
    policy = load_policy("rego", path, policy_id="window")
    ops = Ops(runtime_factory, policy, ("deploy", {"service": "api", "env": "staging"}))
    done = await ops.start()
    assert done.status is RunStatus.DONE and len(ops.ran) == 1

    path.write_text(TIME_BUILTINS + "\n", encoding="utf-8")
    parked = await ops.start()
    assert parked.status is RunStatus.AWAITING and len(ops.ran) == 1
    [failed] = await ops.events(parked.run_id, "policy_failed")
    assert failed["data"]["id"] == "window" and failed["data"]["answer"] == "ask"
    assert "time.now_ns" in failed["data"]["error"]
    assert "input.hour_utc" in failed["data"]["error"]

    path.write_text(HOURS + "\n", encoding="utf-8")
    again = await ops.start()
    assert again.status is RunStatus.DONE and len(ops.ran) == 2
    assert await ops.events(again.run_id, "policy_failed") == []
