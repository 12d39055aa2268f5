"""The documentation keeps every name it ever documented, and its links lead somewhere.

Outside tests and scripts read the names the README documented (settings, routes,
commands, flags, headers, JSON fields, exit codes, file names), so moving text between
`README.md` and `docs/` must never lose or rename one. `tests/golden/docs/readme_names.txt`
holds them, as the README documented them before it became a front page.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NAMES = REPO / "tests" / "golden" / "docs" / "readme_names.txt"
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    """The README and every page under docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def documented_text() -> str:
    """Every page's text, whitespace collapsed so a name may wrap across lines."""
    return " ".join(" ".join(page.read_text(encoding="utf-8").split()) for page in pages())


def expected_names() -> list[tuple[str, str]]:
    lines = NAMES.read_text(encoding="utf-8").splitlines()
    rows = [line.split("\t", 1) for line in lines if line and not line.startswith("#")]
    return [(kind, text) for kind, text in rows]


def test_the_name_list_holds_every_kind_of_name() -> None:
    kinds = Counter(kind for kind, _ in expected_names())

    assert set(kinds) == {"setting", "flag", "exit", "code"}
    assert kinds["setting"] >= 50 and kinds["exit"] == 13 and kinds["code"] >= 700


@pytest.mark.parametrize("kind", ["setting", "flag", "code"])
def test_every_name_the_readme_documented_is_still_documented(kind: str) -> None:
    text = documented_text()

    missing = [name for k, name in expected_names() if k == kind and name not in text]

    assert not missing, f"no longer documented anywhere in README.md or docs/: {missing}"


def test_every_exit_code_keeps_its_row() -> None:
    rows = {
        line.strip()
        for page in pages()
        for line in page.read_text(encoding="utf-8").splitlines()
        if line.startswith("| ")
    }

    missing = [row for kind, row in expected_names() if kind == "exit" and row not in rows]

    assert not missing, f"exit code rows changed or gone: {missing}"


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation gone, spaces as dashes."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: Counter[str] = Counter()
    found = set()
    for match in re.finditer(r"^#{1,6} (.+)$", FENCE.sub("", page.read_text()), re.M):
        base = slug(match.group(1))
        found.add(f"{base}-{seen[base]}" if seen[base] else base)
        seen[base] += 1
    return found


def links(page: Path) -> list[str]:
    """The relative link targets of a page, outside code blocks and code spans."""
    prose = re.sub(r"`[^`]*`", "", FENCE.sub("", page.read_text(encoding="utf-8")))
    return [
        target
        for target in LINK.findall(prose)
        if not re.match(r"[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto: ...
    ]


def test_the_slug_is_the_one_github_makes() -> None:
    assert slug("Serving: `signoff serve`") == "serving-signoff-serve"
    assert slug("Edits and batch decisions") == "edits-and-batch-decisions"
    assert slug("Sub-agents (delegation)") == "sub-agents-delegation"


def test_every_relative_link_resolves() -> None:
    broken = []
    for page in pages():
        for target in links(page):
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")

    assert not broken, "\n".join(broken)


def test_every_setting_has_a_row_in_the_settings_page() -> None:
    from bot.settings import ENV_PREFIX, Settings

    page = (REPO / "docs" / "settings.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `(SIGNOFF_[A-Z0-9_]+)` \|", page, re.M))
    variables = {ENV_PREFIX + field.upper() for field in Settings.model_fields}

    assert variables - rows == set(), "settings without a row in docs/settings.md"
    assert f"{ENV_PREFIX}CONFIG" in rows


def documented_value(value: object) -> str:
    """A setting's default as the settings page writes it."""
    match value:
        case bool():
            return str(value).lower()
        case float() if value.is_integer():
            return str(int(value))
        case dict() | list():
            return json.dumps(value)
        case _:
            return str(value)


def test_the_settings_page_gives_every_default_as_the_code_has_it() -> None:
    from bot.settings import ENV_PREFIX, Settings

    page = (REPO / "docs" / "settings.md").read_text(encoding="utf-8")
    defaults = dict(re.findall(r"^\| `(SIGNOFF_[A-Z0-9_]+)` \| ([^|]*) \|", page, re.M))
    wrong = []
    for name, field in Settings.model_fields.items():
        value = field.get_default(call_default_factory=True)
        written = defaults[ENV_PREFIX + name.upper()]
        if value is None:  # unset: the page says what happens instead, in words
            continue
        if not written.startswith(f"`{documented_value(value)}`"):
            wrong.append(f"{ENV_PREFIX}{name.upper()}: documented {written}, code {value!r}")

    assert not wrong, "\n".join(wrong)


def test_every_page_is_in_the_index_and_on_the_front_page() -> None:
    docs = REPO / "docs"
    pages_there = {page.name for page in docs.glob("*.md")} - {"README.md"}
    index = {target.partition("#")[0] for target in links(docs / "README.md")}
    front = {target.partition("#")[0] for target in links(REPO / "README.md")}

    assert pages_there - index == set(), "pages missing from docs/README.md"
    assert {f"docs/{name}" for name in pages_there} - front == set(), "pages missing from README"


def test_every_command_and_option_of_the_cli_is_documented() -> None:
    import click

    from bot.cli import cli

    text = documented_text()
    missing = []

    def walk(command: click.Command, path: str) -> None:
        if f"`{path}" not in text:
            missing.append(path)
        for param in command.params:
            missing.extend(
                f"{path} {opt}"
                for opt in (*param.opts, *param.secondary_opts)
                if opt.startswith("--")
                and opt != "--help"
                and not re.search(rf"(?<![\w-]){opt}(?![\w-])", text)
            )
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, f"{path} {name}")

    walk(cli, "signoff")

    assert not missing, f"not documented in README.md or docs/: {missing}"


def test_the_front_page_stays_a_front_page() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()

    assert len(lines) < 300, "README.md is the front page: move details to docs/"
