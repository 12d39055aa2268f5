"""`signoff serve` as a real process at its boundaries: slow and idle clients are cut off,
no log level reveals a secret argument or a token, and configuration mistakes are one
line with exit code 3."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.e2e.secret_app import SECRET_VALUE

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "boundary-operator-token-0123456789"

pytestmark = pytest.mark.timeout(90)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIGNOFF_", "SLACK_"))}
    env.update(
        {
            "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}",
            "SIGNOFF_PORT": "0",
            **extra,
        }
    )
    return env


class Serving:
    """A `signoff serve` subprocess with stdout and stderr kept for inspection."""

    def __init__(self, env: dict[str, str], tmp_path: Path) -> None:
        self.out_path = tmp_path / "stdout.txt"
        self.err_path = tmp_path / "stderr.txt"
        self._out = self.out_path.open("w")
        self._err = self.err_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bot", "serve"],
            cwd=ROOT,
            env=env,
            stdout=self._out,
            stderr=self._err,
            stdin=subprocess.DEVNULL,
        )
        self.url = ""

    def wait_ready(self) -> str:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for line in self.out_path.read_text().splitlines():
                if line.startswith("signoff serving at "):
                    self.url = line.split("signoff serving at ", 1)[1].strip()
                    return self.url
            if self.process.poll() is not None:
                raise AssertionError(f"serve exited: {self.err_path.read_text()}")
            time.sleep(0.05)
        raise AssertionError("serve did not start")

    def stop(self) -> tuple[str, str]:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        self._out.close()
        self._err.close()
        return self.out_path.read_text(), self.err_path.read_text()


@pytest.fixture
def serving(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Serving]:
    extra: dict[str, str] = getattr(request, "param", {})
    served = Serving(_env(tmp_path, **extra), tmp_path)
    try:
        served.wait_ready()
        yield served
    finally:
        served.stop()


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def _closed_by_server(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


# -- slow and idle clients ----------------------------------------------------------------


@pytest.mark.parametrize(
    "serving",
    [{"SIGNOFF_HTTP_IDLE_TIMEOUT_SECONDS": "1", "SIGNOFF_HTTP_BODY_TIMEOUT_SECONDS": "1"}],
    indirect=True,
)
def test_idle_and_trickling_connections_are_closed(serving: Serving) -> None:
    address = _address(serving.url)
    idle = [socket.create_connection(address) for _ in range(25)]
    trickling = [socket.create_connection(address) for _ in range(25)]
    try:
        for sock in trickling:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        started = time.monotonic()
        # The server closes them; nothing here waits on a guess of how long it takes.
        assert all(_closed_by_server(sock, within=15) for sock in idle + trickling)
        assert time.monotonic() - started < 15
    finally:
        for sock in idle + trickling:
            sock.close()


@pytest.mark.parametrize(
    "serving",
    [{"SIGNOFF_HTTP_IDLE_TIMEOUT_SECONDS": "5", "SIGNOFF_HTTP_BODY_TIMEOUT_SECONDS": "1"}],
    indirect=True,
)
@pytest.mark.parametrize("path", ["/api/runs", "/hooks/anything", "/login"])
def test_a_body_that_never_finishes_is_408(serving: Serving, path: str) -> None:
    with socket.create_connection(_address(serving.url)) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Length: 100\r\n\r\n{{".encode()
        )
        sock.settimeout(15)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
        status_line = answer.split(b"\r\n", 1)[0]
        if path == "/hooks/anything":
            # An unknown hook is refused before its body is read.
            assert status_line.endswith(b"404 Not Found"), answer
        else:
            assert b" 408 " in status_line, answer
        assert _closed_by_server(sock, within=15)


# -- secrets and logs ---------------------------------------------------------------------


async def _approve_one(url: str, token: str) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.post(f"{url}/api/runs", json={"agent": "billing", "input": "go"}) as r:
            assert r.status == 202, await r.text()
            run_id = (await r.json())["run_id"]
        for _ in range(400):
            async with http.get(f"{url}/api/runs/{run_id}") as r:
                run = await r.json()
            if run["pending"]:
                break
            await asyncio.sleep(0.05)
        assert run["pending"][0]["arguments"]["api_key"] != SECRET_VALUE
        ticket = run["pending"][0]["ticket_id"]
        async with http.post(
            f"{url}/api/tickets/{ticket}/decision", json={"decision": "allow"}
        ) as r:
            assert r.status == 200, await r.text()
        for _ in range(400):
            async with http.get(f"{url}/api/runs/{run_id}") as r:
                run = await r.json()
            if run["status"] == "done":
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"the run did not finish: {run}")


@pytest.mark.parametrize(
    "serving",
    [
        {
            "SIGNOFF_APP": "tests.e2e.secret_app:agents",
            "SIGNOFF_LOG_LEVEL": "DEBUG",
            "SIGNOFF_OPERATOR_TOKEN": TOKEN,
        }
    ],
    indirect=True,
)
async def test_debug_logs_reveal_no_secret_argument_and_no_token(serving: Serving) -> None:
    await _approve_one(serving.url, TOKEN)
    out, err = serving.stop()
    assert '"level": "debug"' in err or "DEBUG" in err  # the level really was DEBUG
    assert len(err.splitlines()) > 3
    assert SECRET_VALUE not in err and SECRET_VALUE not in out
    assert TOKEN not in err and TOKEN not in out


@pytest.mark.parametrize("serving", [{"SIGNOFF_LOG_LEVEL": "INFO"}], indirect=True)
def test_a_made_up_operator_token_is_printed_once_and_never_logged(serving: Serving) -> None:
    out, err = serving.stop()
    [line] = [line for line in out.splitlines() if "sign-in token:" in line]
    token = line.split("sign-in token:", 1)[1].strip()
    assert len(token) >= 16
    assert out.count(token) == 1
    assert token not in err
    assert "made up a console sign-in token" in err


# -- configuration errors -----------------------------------------------------------------


def _signoff(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        cwd=ROOT,
        env=_env(tmp_path, **extra),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        (
            "SIGNOFF_API_TOKENS",
            '[{"token": ',
            "SIGNOFF_API_TOKENS: not valid JSON (Expecting value at line 1 column 12)",
        ),
        (
            "SIGNOFF_HOOKS",
            "{x",
            "SIGNOFF_HOOKS: not valid JSON (Expecting property name enclosed in double quotes "
            "at line 1 column 2)",
        ),
        (
            "SIGNOFF_DISCORD_APPROVER_ROLES",
            "nope",
            "SIGNOFF_DISCORD_APPROVER_ROLES: not valid JSON (Expecting value at line 1 column 1)",
        ),
        (
            "SIGNOFF_OPERATOR_TOKEN",
            "short",
            "SIGNOFF_OPERATOR_TOKEN: must be at least 16 characters long (got 5)",
        ),
        (
            "SIGNOFF_COOKIE_SECRET",
            "too-short",
            "SIGNOFF_COOKIE_SECRET: must be at least 32 characters long (got 9)",
        ),
    ],
)
def test_malformed_settings_name_the_setting_and_exit_3(
    tmp_path: Path, name: str, value: str, expected: str
) -> None:
    result = _signoff(tmp_path, "serve", **{name: value})
    assert result.returncode == 3
    assert _one_line(result) == f"signoff: configuration: {expected}"


def test_a_port_in_use_names_the_address_and_exits_3(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _signoff(tmp_path, "serve", SIGNOFF_PORT=str(port))
    assert result.returncode == 3
    assert _one_line(result) == (
        f"signoff: configuration: SIGNOFF_PORT: 127.0.0.1:{port} is already in use "
        "(set SIGNOFF_PORT to a free port, or 0 for any)"
    )


def test_socket_mode_that_cannot_reach_slack_is_one_line_and_exit_3(tmp_path: Path) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connections are refused
        result = _signoff(
            tmp_path,
            "serve",
            SIGNOFF_SLACK_MODE="socket",
            SIGNOFF_SLACK_BOT_TOKEN="xoxb-test",
            SIGNOFF_SLACK_APP_TOKEN="xapp-test",
            SIGNOFF_SLACK_API_BASE_URL=f"http://127.0.0.1:{port}/api/",
        )
    assert result.returncode == 3
    line = _one_line(result)
    assert line.startswith(
        f"signoff: configuration: cannot reach Slack at http://127.0.0.1:{port}/api/ "
        "to open a Socket Mode connection"
    )
    assert "Unclosed" not in result.stderr


def test_version(tmp_path: Path) -> None:
    result = _signoff(tmp_path, "--version")
    assert result.returncode == 0
    assert result.stdout.strip() == "signoff 0.1.0"


def test_the_command_line_at_debug_does_not_echo_sql(tmp_path: Path) -> None:
    result = _signoff(tmp_path, "runs", "list", SIGNOFF_LOG_LEVEL="DEBUG")
    assert result.returncode == 0
    # aiosqlite and SQLAlchemy log every statement with its parameters at DEBUG.
    assert "aiosqlite" not in result.stderr and "sqlalchemy" not in result.stderr
