"""Every code block in the docs says whether it runs, and the runnable ones are run.

A fenced block in `README.md` or `docs/` is one of:

- output or a picture: a language such as ``text`` or ``mermaid``, never run;
- a block the suite runs: an HTML comment right before it, ``<!-- run: tests/... -->``,
  names the test module that reads it from that page;
- a block not meant to run as it is (it needs a network, a key, a server of your own, or
  is a fragment): ``<!-- not run: why -->`` right before it.

Whatever the marker, every Python block compiles, every TOML block parses and every
shell block is valid bash.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOT_CODE = {"text", "mermaid"}
BLOCK = re.compile(r"^```(?P<language>[^\n`]*)\n(?P<code>.*?)^```$", re.S | re.M)
MARKER = re.compile(r"<!-- (?P<kind>run|not run): (?P<what>.+?) -->\n$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int
    language: str
    code: str
    marker: tuple[str, str] | None

    def __str__(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line} ({self.language or 'no language'})"


def blocks() -> list[Block]:
    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            before = text[: match.start()]
            marker = MARKER.search(before)
            found.append(
                Block(
                    page,
                    before.count("\n") + 1,
                    match.group("language").strip(),
                    match.group("code"),
                    (marker.group("kind"), marker.group("what")) if marker else None,
                )
            )
    return found


def test_the_docs_have_blocks_of_every_kind() -> None:
    kinds = {block.marker[0] if block.marker else block.language for block in blocks()}

    assert {"run", "not run", "text"} <= kinds


def test_every_block_says_whether_it_runs() -> None:
    unmarked = [
        str(block) for block in blocks() if block.language not in NOT_CODE and not block.marker
    ]

    assert not unmarked, "blocks without a language such as text, or a run/not run comment"


def test_every_run_marker_names_a_test_that_reads_its_page() -> None:
    wrong = []
    for block in blocks():
        if block.marker is None or block.marker[0] != "run":
            continue
        test = REPO / block.marker[1]
        page = str(block.page.relative_to(REPO))
        source = test.read_text(encoding="utf-8") if test.is_file() else ""
        if block.page.name not in source:
            wrong.append(f"{block}: {block.marker[1]} does not read {page}")

    assert not wrong, "\n".join(wrong)


def test_every_python_block_compiles() -> None:
    for block in blocks():
        if block.language == "python":
            compile(block.code, str(block), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def test_every_toml_block_parses() -> None:
    for block in blocks():
        if block.language == "toml":
            tomllib.loads(block.code)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_every_shell_block_is_valid_bash() -> None:
    for block in blocks():
        if block.language in ("sh", "bash", "shell"):
            checked = subprocess.run(
                ["bash", "-n"], input=block.code, capture_output=True, text=True, check=False
            )
            assert checked.returncode == 0, f"{block}: {checked.stderr}"
