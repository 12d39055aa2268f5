"""The docs' examples that no other test runs, run as printed.

The README's short example parks a refund and finishes it once allowed; the sub-agent
example of docs/agents-and-tools.md registers its sub-agent; the settings exported in
docs/console.md and docs/slack.md are read by signoff's own settings as they say.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from adapters.models import ModelOptions, ModelResolver
from runtime import MemoryStore, Runtime

REPO = Path(__file__).resolve().parents[2]


def block(page: str, language: str, starts: str) -> str:
    """The one block of `page` in `language` whose code starts with `starts`."""
    text = (REPO / page).read_text(encoding="utf-8")
    found = [
        code
        for code in re.findall(rf"^```{language}\n(.*?)^```$", text, re.S | re.M)
        if code.startswith(starts)
    ]
    assert len(found) == 1, f"{page}: {len(found)} {language} blocks start with {starts!r}"
    return str(found[0])


def test_the_front_page_example_parks_the_refund_and_finishes_it_once_allowed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = block("README.md", "python", "import asyncio")

    exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})

    assert capsys.readouterr().out.splitlines() == [
        "awaiting refund",
        "done Refunded 249.00 on A1001.",
    ]


async def test_the_sub_agent_example_registers_its_sub_agent() -> None:
    scope: dict[str, Any] = {}
    code = block("docs/agents-and-tools.md", "python", "from examples import refunds")
    exec(compile(code, "docs/agents-and-tools.md", "exec"), scope)
    resolver = ModelResolver(ModelOptions(openai_api_key="sk-for-the-docs-example"))
    try:
        runtime = Runtime(MemoryStore(), [scope["support"]], model_resolver=resolver)

        assert set(runtime.agents) == {"support", "refunds"}
        assert "delegate_to_refunds" in runtime.agents["support"].tools
    finally:
        await resolver.aclose()


def exported_settings(exports: str) -> dict[str, Any]:
    """What signoff's settings read after the shell block `exports` ran."""
    show = (
        "import json; from bot.settings import Settings; "
        "print(Settings().model_dump_json(exclude_unset=True))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    done = subprocess.run(
        ["bash", "-euc", f'{exports}\nexec "$PYTHON" -c "$SHOW"'],
        env={**env, "PYTHON": sys.executable, "SHOW": show},
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    settings: dict[str, Any] = json.loads(done.stdout)
    return settings


def test_the_console_tokens_example_gives_alice_and_grace_their_tokens() -> None:
    settings = exported_settings(
        block("docs/console.md", "sh", "export SIGNOFF_OPERATOR_TOKEN=change-me")
    )

    tokens = {token["actor"]: token for token in settings["api_tokens"]}
    assert tokens["U024BE7LH"]["name"] == "Alice"
    assert tokens["U0G9QF9C6"]["groups"] == ["release-managers"]
    assert settings["operator_token"] == "**********"


def test_the_slack_approver_groups_example_maps_group_names_to_ids() -> None:
    settings = exported_settings(
        block("docs/slack.md", "sh", "export SIGNOFF_SLACK_APPROVER_GROUPS")
    )

    assert settings["slack_approver_groups"] == {
        "release-managers": ["S0614TZR7"],
        "oncall": ["C0123ABCD"],
    }
