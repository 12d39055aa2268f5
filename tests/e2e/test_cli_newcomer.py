"""A newcomer's first commands: help for a bare group, exit codes that match the docs,
Ctrl-C and a failing model in ``signoff demo``, run as real subprocesses (the helpers of
`test_cli`)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fake_llm import FakeLLM

from bot.cli import EXIT_CODES
from tests.e2e.test_cli import REPO, Env

CLI_PAGE = REPO / "docs" / "cli.md"


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


@pytest.mark.parametrize("group", [[], ["runs"], ["grants"]], ids=lambda g: " ".join(g) or "-")
def test_a_group_without_its_command_prints_its_help(env: Env, group: list[str]) -> None:
    done = env.signoff(*group)

    assert done.code == 2  # as click does for a group named without a command
    assert done.out == ""
    lines = done.err.splitlines()
    assert lines[0].startswith(f"Usage: signoff {' '.join(group)}".rstrip() + " [OPTIONS]")
    assert "Commands:" in lines
    assert "signoff: usage" not in done.err


def _documented_exit_codes() -> dict[int, str]:
    table = CLI_PAGE.read_text().split("\n## Exit codes\n", 1)[1]
    return {int(code): text for code, text in re.findall(r"^\| (\d+) \| (.*) \|$", table, re.M)}


def test_the_help_and_the_docs_agree_on_the_exit_codes(env: Env) -> None:
    documented = _documented_exit_codes()

    assert sorted(documented) == sorted(EXIT_CODES)
    for text in (documented[2], EXIT_CODES[2]):
        assert "no answer" in text
    for text in (documented[130], EXIT_CODES[130]):
        assert "no answer" not in text and "prompt" not in text
    # And the behaviour: no answer at the demo's prompt is a usage error.
    assert env.signoff("demo").code == 2


# The console script, with Ctrl-C raising KeyboardInterrupt as in a terminal even when
# the test itself runs with SIGINT ignored (a background job).
CONSOLE = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'signoff'; from bot.cli import main; main()"
)


def test_the_first_ctrl_c_at_the_demo_prompt_stops_it(env: Env) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", CONSOLE, "demo"],
        cwd=REPO,
        env=env.vars,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as demo:
        assert demo.stdout is not None and demo.stderr is not None
        shown = b""
        while not shown.endswith(b"Allow? [y/n/r=deny with reason] "):
            chunk = demo.stdout.read1(4096)
            assert chunk, f"the demo ended before asking: {shown!r}"
            shown += chunk
        demo.send_signal(signal.SIGINT)
        try:
            code = demo.wait(timeout=60)
        except subprocess.TimeoutExpired:
            demo.kill()
            raise AssertionError("the demo went on after one Ctrl-C") from None
        err = demo.stderr.read().decode()
        assert demo.stdin is not None
        demo.stdin.close()

    assert code == 130, err
    assert err.strip() == "signoff: interrupted: stopped before finishing"
    assert "Traceback" not in err


async def test_a_failing_model_makes_the_demo_fail(env: Env) -> None:
    llm = FakeLLM()
    await llm.start()
    try:
        demo = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot",
            "demo",
            "--yes",
            cwd=REPO,
            env={
                **env.vars,
                "SIGNOFF_MODEL": "openai:gpt-4.1-mini",
                "SIGNOFF_OPENAI_API_KEY": "sk-not-the-right-key",
                "SIGNOFF_OPENAI_BASE_URL": llm.openai_base_url,
                **{k: "" for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY") if k in os.environ},
            },
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(demo.communicate(), 60)
    finally:
        await llm.stop()

    assert demo.returncode == 11, err.decode()
    assert "No call needed a decision" not in out.decode()
    assert "The run failed: model call failed" in out.decode()
    [line] = err.decode().strip().splitlines()
    assert line.startswith("signoff: run failed: model call failed (openai")
    assert len(llm.requests) == 1
