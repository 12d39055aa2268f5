"""What the external approval tests share: agents declared in an agents file as signoff
serve loads them, and the type of the runtime factory fixture."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

from bot.agents_file import load_agents_file
from runtime import Agent, Runtime

RuntimeFactory = Callable[..., Runtime]
"""The `runtime_factory` fixture: runtimes over the test's store (another is a restart)."""

AGENTS_TOML = """
[agents.billing]
external = true
description = "The billing assistant"
overrides = ["approvers", "deadline"]

[agents.billing.rules."lookup_*"]
permission = "allow"

[agents.billing.rules.refund]
permission = "ask"
allow_if = [{ amount = { le = 10 } }]
deny_if = [{ amount = { gt = 1000 } }]
secret = ["card"]
grants = ["run", "thread"]

[agents.billing.rules.drop_db]
permission = "deny"

[agents.billing.rules.wire]
permission = "allow"
ask_if = [{ currency = { ne = "EUR" } }]

[agents.billing.rules.close_account]
four_eyes = true

[agents.billing.rules.void]
deadline = 60
on_expiry = "cancel"

[agents.billing.rules.pay]
deadline = 60
editable = ["amount"]

[agents.strict]
external = true
approvers = ["carol"]
"""


def load_agents(tmp_path: Path, text: str = AGENTS_TOML) -> list[Agent]:
    """The agents of `text`, written to an agents file and loaded."""
    path = tmp_path / "agents.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return load_agents_file(path).agents
