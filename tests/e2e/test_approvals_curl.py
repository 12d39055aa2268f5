"""docs/approvals-api.md's walk-through and examples/approvals/curl.sh, run for real.

A real `signoff serve` (a SQLite file, the page's agents file and tokens) answers the
script; while the script long-polls, the server is SIGKILLed and started again on the
same database and port, and the page's approver decides through the API. The script
finishes with the decision, one ticket exists for the request, asking again with the
same key gives the same approval without running the call twice, and the outcome is
recorded. The page's curl commands and its Python check of a decision token run too.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.clients.serving import Server, server_env, signing_key

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.crash,
    # As for Chromium: under CI a missing curl fails instead of skipping.
    pytest.mark.skipif(
        shutil.which("curl") is None and not os.environ.get("CI"),
        reason="curl is not installed (apt-get install curl)",
    ),
]

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "approvals-api.md"
SCRIPT = REPO / "examples" / "approvals" / "curl.sh"
RUN_MARKER = "<!-- run: tests/e2e/test_approvals_curl.py -->\n"
STRANGER = "stranger-token-0123456789"
REQUESTED = {"order": "A-1001", "amount": 80}
"""The arguments of the page's request (its curl command's and its curl.sh command's)."""
SESSION = "conversation-7"
TOOL = """\
import json, sys
with open(sys.argv[1], "a", encoding="utf-8") as ledger:
    ledger.write(sys.argv[2] + "\\n")
arguments = json.loads(sys.argv[2])
print(f"refunded {arguments['amount']} on {arguments['order']}")
"""


def page_block(language: str, starts: str) -> str:
    """The one block of the page in `language`, marked as run by this module, that
    starts with `starts`."""
    text = PAGE.read_text(encoding="utf-8")
    found = [
        match.group(1)
        for match in re.finditer(rf"^```{language}\n(.*?)^```$", text, re.S | re.M)
        if text[: match.start()].endswith(RUN_MARKER) and match.group(1).startswith(starts)
    ]
    assert len(found) == 1, f"{PAGE.name}: {len(found)} {language} blocks start with {starts!r}"
    return found[0]


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without signoff's settings or proxies, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("SIGNOFF_")}
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        env.pop(proxy, None)
    return env | extra


class Setup:
    """The page's agents file and tokens, and a `signoff serve` environment with them."""

    def __init__(self, directory: Path, key: Ed25519PrivateKey) -> None:
        docs = directory / "docs"
        docs.mkdir()
        (docs / "agents.toml").write_text(page_block("toml", "[agents."), encoding="utf-8")
        exports = page_block("bash", "export SIGNOFF_AGENTS=")
        show = (
            "import json, os; print(json.dumps({k: os.environ[k] "
            "for k in ('SIGNOFF_AGENTS', 'SIGNOFF_API_TOKENS')}))"
        )
        done = subprocess.run(
            ["bash", "-euc", f'{exports}\nexec "$PYTHON" -c "$SHOW"'],
            env=clean_env(PYTHON=sys.executable, SHOW=show),
            cwd=docs,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        exported = json.loads(done.stdout)
        tokens = json.loads(exported["SIGNOFF_API_TOKENS"])
        by_actor = {entry["actor"]: entry["token"] for entry in tokens}
        self.agent_token = by_actor["svc:billing-bot"]
        self.approver_token = by_actor["U-carol"]
        tokens.append({"token": STRANGER, "actor": "U-mallory"})
        self.env = server_env(
            directory,
            key,
            SIGNOFF_AGENTS=str(docs / exported["SIGNOFF_AGENTS"]),
            SIGNOFF_API_TOKENS=json.dumps(tokens),
        )


class Script:
    """examples/approvals/curl.sh started as the page starts it, its output read as it
    comes."""

    def __init__(self, env: dict[str, str], stderr: Path) -> None:
        self._stderr = stderr.open("w", encoding="utf-8")
        self.stderr_path = stderr
        self.process = subprocess.Popen(
            ["bash", "-c", page_block("bash", "SIGNOFF_TOKEN=")],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def line(self, seconds: float = 60) -> str:
        """The next line it prints."""
        try:
            found = self._lines.get(timeout=seconds)
        except queue.Empty:
            raise AssertionError(f"curl.sh printed nothing in {seconds} s") from None
        assert found is not None, f"curl.sh ended early: {self.stderr()}"
        return found

    def finish(self, seconds: float = 90) -> tuple[int, list[str]]:
        """Its exit status and the lines it printed since the last `line`."""
        code = self.process.wait(timeout=seconds)
        self._reader.join(timeout=30)
        lines = []
        while (found := self._lines.get_nowait()) is not None:
            lines.append(found)
        self.close()
        return code, lines

    def stderr(self) -> str:
        """What it wrote to stderr (its retries and errors)."""
        return self.stderr_path.read_text(encoding="utf-8")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self._reader.join(timeout=30)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._stderr.close()


def until(check: Callable[[], bool], what: str, seconds: float = 60) -> None:
    """Poll `check` until it holds."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"never saw {what}")
        time.sleep(0.02)


def long_poll_connected(approval_id: str, port: int) -> bool:
    """Whether a curl process holds an open connection to `port` for a long poll of
    `approval_id` (read from /proc: its command line, its sockets, the TCP table)."""
    wanted = f"/api/approvals/{approval_id}?wait=".encode()
    sockets: set[str] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if Path(argv[0].decode(errors="replace")).name != "curl":
                continue
            if not any(wanted in arg for arg in argv):
                continue
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    sockets.add(target.removeprefix("socket:[").rstrip("]"))
        except OSError:  # the process ended meanwhile
            continue
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text(encoding="ascii").splitlines()[1:]:
            fields = row.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if fields[3] == "01" and remote_port == port and fields[9] in sockets:
                return True
    return False


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return signing_key()


@pytest.fixture
def setup(tmp_path: Path, key: Ed25519PrivateKey) -> Setup:
    return Setup(tmp_path, key)


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    """Every server a test starts; each is stopped at the end (a killed one already is)."""
    started: list[Server] = []
    yield started
    for server in started:
        if server.process.poll() is None:
            server.terminate()


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    """Where the tool the script runs writes the arguments it ran with, one line a run."""
    return tmp_path / "ledger.jsonl"


def script_env(tmp_path: Path, url: str, ledger: Path) -> dict[str, str]:
    """The environment of curl.sh besides what the page's command sets: signoff's
    address, and a tool that writes down what it ran with."""
    tool = tmp_path / "refund_tool.py"
    tool.write_text(TOOL, encoding="utf-8")
    command = shlex.join([sys.executable, str(tool), str(ledger)])
    return clean_env(
        SIGNOFF_URL=url,
        PYTHON=sys.executable,
        TOOL_COMMAND=command,
        WAIT_SECONDS="30",
        GIVE_UP_SECONDS="90",
    )


def ran(ledger: Path) -> list[dict[str, Any]]:
    """The arguments the tool ran with, one entry a run."""
    if not ledger.exists():
        return []
    return [json.loads(line) for line in ledger.read_text(encoding="utf-8").splitlines()]


def kill_during_long_poll(
    setup: Setup, servers: list[Server], tmp_path: Path, script: Script
) -> tuple[Server, str, str]:
    """Wait for the script's long poll, SIGKILL the server, start it again on the same
    database and port; the approval's and its ticket's ids."""
    first = servers[0]
    pending = script.line().split()
    assert pending[0] == "pending", pending
    approval_id, ticket_id = pending[1], pending[2]
    port = urlsplit(first.url).port
    assert port is not None
    until(lambda: long_poll_connected(approval_id, port), "curl.sh's long poll connected")
    first.kill()
    second = Server(setup.env, tmp_path / "second.log")
    servers.append(second)
    assert second.url == first.url
    return second, approval_id, ticket_id


def assert_cut_off_and_asked_again(script: Script) -> None:
    retries = [line for line in script.stderr().splitlines() if "asking again" in line]
    assert retries, script.stderr()
    assert re.search(r"did not answer \(curl exit (52|56)\)", retries[0]), retries


def assert_one_approval(
    server: Server, setup: Setup, session: str, approval_id: str, ticket_id: str
) -> dict[str, Any]:
    """The session holds this one approval, whose run opened this one ticket, now
    decided; the approval is returned."""
    status, page = server.call(
        "GET", f"/api/approvals?session_id={session}", token=setup.agent_token
    )
    assert status == 200, page
    assert [(a["approval_id"], a["ticket_id"]) for a in page["approvals"]] == [
        (approval_id, ticket_id)
    ]
    assert page["next_cursor"] is None
    status, tickets = server.call("GET", "/api/tickets", token=setup.approver_token)
    assert status == 200 and tickets["tickets"] == [], tickets
    status, recorded = server.call(
        "GET", f"/api/runs/{approval_id}/events", token=setup.approver_token
    )
    assert status == 200, recorded
    opened = [e for e in recorded["events"] if e["kind"] == "ticket_opened"]
    assert len(opened) == 1 and ticket_id in json.dumps(opened[0]), opened
    return dict(page["approvals"][0])


def test_curl_sh_outlives_a_killed_server_and_runs_the_call_once_allowed(
    setup: Setup, servers: list[Server], tmp_path: Path, ledger: Path
) -> None:
    servers.append(Server(setup.env, tmp_path / "first.log"))
    env = script_env(tmp_path, servers[0].url, ledger)
    script = Script(env, tmp_path / "curl-1.err")
    try:
        server, approval_id, ticket_id = kill_during_long_poll(setup, servers, tmp_path, script)
        status, tickets = server.call("GET", "/api/tickets", token=setup.approver_token)
        assert status == 200
        assert [(t["ticket_id"], t["run_id"]) for t in tickets["tickets"]] == [
            (ticket_id, approval_id)
        ]
        status, decided = server.call(
            "POST",
            f"/api/tickets/{ticket_id}/decision",
            {"decision": "allow"},
            token=setup.approver_token,
        )
        assert status == 200, decided

        code, lines = script.finish()
    finally:
        script.close()

    assert code == 0, script.stderr()
    assert lines[0] == "allowed by U-carol (no reason given)"
    assert json.loads(lines[1].removeprefix("arguments: ")) == REQUESTED
    assert lines[2].startswith("decision_token: ey")
    assert lines[3:] == ["outcome: succeeded"]
    assert_cut_off_and_asked_again(script)
    assert ran(ledger) == [REQUESTED]
    approval = assert_one_approval(server, setup, SESSION, approval_id, ticket_id)
    assert approval["status"] == "allowed" and approval["decided_via"] == "api"
    assert approval["outcome"]["status"] == "succeeded"
    assert approval["outcome"]["summary"] == "refunded 80 on A-1001"
    assert approval["outcome"]["reported_by"] == "svc:billing-bot"
    status, hidden = server.call("GET", f"/api/approvals/{approval_id}", token=STRANGER)
    assert (status, hidden["error"]) == (404, "not_found")

    again = Script(env, tmp_path / "curl-2.err")
    try:
        code, rerun = again.finish()
    finally:
        again.close()

    assert code == 0, again.stderr()
    assert rerun == [*lines[:3], "outcome: succeeded (reported before)"]
    assert ran(ledger) == [REQUESTED], "the call ran a second time"
    assert_one_approval(server, setup, SESSION, approval_id, ticket_id)


def test_curl_sh_outlives_a_killed_server_and_stops_when_denied(
    setup: Setup, servers: list[Server], tmp_path: Path, ledger: Path
) -> None:
    servers.append(Server(setup.env, tmp_path / "first.log"))
    env = script_env(tmp_path, servers[0].url, ledger)
    script = Script(env, tmp_path / "curl-1.err")
    try:
        server, approval_id, ticket_id = kill_during_long_poll(setup, servers, tmp_path, script)
        status, decided = server.call(
            "POST",
            f"/api/tickets/{ticket_id}/decision",
            {"decision": "deny", "reason": "refunded already"},
            token=setup.approver_token,
        )
        assert status == 200, decided

        code, lines = script.finish()
    finally:
        script.close()

    assert code == 1, script.stderr()
    assert lines[0] == "denied by U-carol (refunded already)"
    assert len(lines) == 3 and lines[2].startswith("decision_token: ey")
    assert_cut_off_and_asked_again(script)
    assert ran(ledger) == []
    approval = assert_one_approval(server, setup, SESSION, approval_id, ticket_id)
    assert approval["status"] == "denied" and approval["outcome"] is None

    again = Script(env, tmp_path / "curl-2.err")
    try:
        code, rerun = again.finish()
    finally:
        again.close()

    assert (code, rerun) == (1, lines)
    assert_one_approval(server, setup, SESSION, approval_id, ticket_id)

    # The same key with other arguments is refused: the script stops with exit 2.
    other = {
        "SIGNOFF_TOKEN": setup.agent_token,
        "IDEMPOTENCY_KEY": "conversation-7-call-1",
        "SESSION_ID": SESSION,
        "ARGUMENTS": json.dumps(REQUESTED | {"amount": 81}),
    }
    refused = subprocess.run(
        [str(SCRIPT)],
        env=env | other,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=90,
    )
    assert refused.returncode == 2, refused.stderr
    assert "signoff answered 409" in refused.stderr
    assert '"idempotency_conflict"' in refused.stderr
    assert_one_approval(server, setup, SESSION, approval_id, ticket_id)


def shell(block: str, env: dict[str, str]) -> dict[str, Any]:
    """Run one of the page's curl commands; its JSON answer."""
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=90,
    )
    return dict(json.loads(done.stdout))


def test_the_walk_through_allows_with_edits_and_curl_sh_runs_the_edited_call(
    setup: Setup, servers: list[Server], tmp_path: Path, ledger: Path
) -> None:
    server = Server(setup.env, tmp_path / "server.log")
    servers.append(server)
    env = clean_env(SIGNOFF_URL=server.url)
    ask = page_block("bash", 'curl --silent --request POST "$SIGNOFF_URL/api/approvals" ')
    asked = shell(ask, env)
    assert asked["status"] == "pending" and asked["ticket_id"] is not None
    assert shell(ask, env)["approval_id"] == asked["approval_id"]
    env |= {"APPROVAL_ID": asked["approval_id"], "TICKET_ID": asked["ticket_id"]}
    # The agent restarted: the script asks with the same key and body (those of the
    # page's request) and gets the same approval.
    script = Script(script_env(tmp_path, server.url, ledger), tmp_path / "curl.err")
    poll = subprocess.Popen(
        ["bash", "-euc", page_block("bash", 'curl --silent "$SIGNOFF_URL/api/approvals/')],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert script.line().split() == ["pending", asked["approval_id"], asked["ticket_id"]]
        decide = page_block("bash", 'curl --silent --request POST "$SIGNOFF_URL/api/tickets/')
        assert shell(decide, env)["decision"] == "allow"

        polled, _ = poll.communicate(timeout=90)
        code, lines = script.finish()
    finally:
        if poll.poll() is None:
            poll.kill()
            poll.communicate(timeout=10)
        script.close()

    edited = {"order": "A-1001", "amount": 60}
    answer = json.loads(polled)
    assert (answer["status"], answer["basis"], answer["decided_by"]) == (
        "allowed",
        "decision",
        "U-carol",
    )
    assert answer["arguments"] == edited
    assert answer["requested_arguments"] == REQUESTED
    assert code == 0, script.stderr()
    assert lines[0] == "allowed by U-carol (no reason given)"
    assert json.loads(lines[1].removeprefix("arguments: ")) == edited
    assert lines[2] == f"decision_token: {answer['decision_token']}"
    assert ran(ledger) == [edited]

    scope: dict[str, Any] = {}
    exec(compile(page_block("python", "import hashlib"), PAGE.name, "exec"), scope)
    status, jwks = server.call("GET", "/.well-known/jwks.json")
    assert status == 200
    verify = scope["verify_decision"]
    claims = verify(answer["decision_token"], jwks, "billing-bot", "refund", edited)
    assert claims["sub"] == asked["approval_id"] and claims["ticket_id"] == asked["ticket_id"]
    requested = answer["requested_arguments"]
    with pytest.raises(ValueError, match="other arguments"):
        verify(answer["decision_token"], jwks, "billing-bot", "refund", requested)

    # The script reported what its tool printed; the page's report is the same one
    # again, which answers the approval as it stands and records nothing more.
    report = page_block("bash", 'curl --silent --request POST "$SIGNOFF_URL/api/approvals/$')
    outcome = shell(report, env)["outcome"]
    assert (outcome["status"], outcome["summary"]) == ("succeeded", "refunded 60 on A-1001")
    assert outcome["reported_by"] == "svc:billing-bot"


def section(title: str) -> str:
    """The page's text under the heading `## <title>`, up to the next one."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_page_names_every_route_field_and_claim_as_the_code_does() -> None:
    from adapters.web.approval_models import ApprovalAnswer, ApprovalBody, OutcomeAnswer
    from adapters.web.decision_tokens import DecisionClaims, DecisionSigner
    from adapters.web.openapi import openapi_document

    page = PAGE.read_text(encoding="utf-8")
    routes = [
        f"`{method.upper()} {path}"
        for path, operations in openapi_document()["paths"].items()
        if path.startswith(("/api/approvals", "/.well-known/")) or path == "/api/openapi.json"
        for method in operations
    ]
    asked = section("Asking: `POST /api/approvals`")
    answered = section("The approval")
    claims = DecisionSigner(Ed25519PrivateKey.generate()).claims(
        DecisionClaims("a", None, "b", "c", {}, "allowed", None, None, datetime.now(UTC))
    )

    assert [route for route in routes if route not in page] == []
    assert [
        name
        for name, field in ApprovalBody.model_fields.items()
        if f"| `{field.alias or name}` |" not in asked
    ] == []
    assert [name for name in ApprovalAnswer.model_fields if f"`{name}`" not in answered] == []
    assert [name for name in OutcomeAnswer.model_fields if f"`{name}`" not in answered] == []
    assert [name for name in claims if f"`{name}`" not in section("Decision tokens")] == []
