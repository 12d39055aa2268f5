"""`signoff serve` on its embedded defaults keeps the console's sign-in token and cookie key
in the data directory: a restart prints the same token and keeps people signed in; a
configured token wins; a normal start logs nothing at WARNING."""

from __future__ import annotations

import json
import os
import re
import stat
from http.cookiejar import CookieJar
from pathlib import Path
from urllib import request as urlrequest
from urllib.error import HTTPError
from urllib.parse import urlencode

import pytest

from tests.e2e.test_serve_process import ROOT, Server

pytestmark = pytest.mark.timeout(120)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        base.pop(proxy, None)
    base.update(
        {
            "PYTHONPATH": str(ROOT),
            "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'data' / 'signoff.db'}",
            "SIGNOFF_APP": "tests.e2e.serve_app:agents",
            "SIGNOFF_PORT": "0",
        }
    )
    base.update(extra)
    (tmp_path / "data").mkdir(exist_ok=True)
    return base


def _start(env: dict[str, str]) -> tuple[Server, str | None]:
    """A server and the sign-in token it printed (None: it printed none)."""
    server = Server(env)
    assert server.process.stdout is not None
    console = server.process.stdout.readline()
    assert console.startswith("  console: "), console
    if "SIGNOFF_OPERATOR_TOKEN" in env:
        return server, None
    line = server.process.stdout.readline()
    assert line.startswith("  sign-in token: "), line
    return server, line.split(":", 1)[1].strip()


def _stop(server: Server) -> str:
    """Stop `server` with SIGTERM; what it logged."""
    assert server.process.stderr is not None
    server.process.terminate()
    _out, err = server.process.communicate(timeout=30)
    assert server.process.returncode == 0, err
    return err


def _opener(jar: CookieJar) -> urlrequest.OpenerDirector:
    return urlrequest.build_opener(urlrequest.ProxyHandler({}), urlrequest.HTTPCookieProcessor(jar))


def _sign_in(url: str, token: str, jar: CookieJar) -> int:
    """Sign in with `token`; the status of the page it ends on."""
    opener = _opener(jar)
    with opener.open(f"{url}/login", timeout=10) as page:
        html = page.read().decode()
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, html
    form = urlencode({"csrf": found.group(1), "token": token, "next": "/runs"}).encode()
    try:
        with opener.open(f"{url}/login", data=form, timeout=10) as answer:
            assert answer.url.endswith("/runs"), answer.url
            return int(answer.status)
    except HTTPError as exc:
        return exc.code


def _runs_page(url: str, jar: CookieJar) -> tuple[int, str]:
    """GET /runs with the cookies of `jar`, redirects not followed: status and location."""

    class NoRedirect(urlrequest.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    opener = urlrequest.build_opener(
        urlrequest.ProxyHandler({}), urlrequest.HTTPCookieProcessor(jar), NoRedirect()
    )
    try:
        with opener.open(f"{url}/runs", timeout=10) as answer:
            return answer.status, ""
    except HTTPError as exc:
        return exc.code, exc.headers.get("Location", "")


def test_a_restart_keeps_the_token_and_the_console_sessions(tmp_path: Path) -> None:
    env = _env(tmp_path, SIGNOFF_LOG_LEVEL="INFO")
    first, token = _start(env)
    assert token is not None and len(token) >= 16
    kept = tmp_path / "data" / "signoff.db-console.json"
    try:
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
        jar = CookieJar()
        assert _sign_in(first.url, token, jar) == 200
        assert _runs_page(first.url, jar) == (200, "")
        written = kept.read_text()
    finally:
        first_log = _stop(first)
    assert "made up a console sign-in token" in first_log and token not in first_log

    second, again = _start(env)
    try:
        assert again == token
        # The cookie the first process signed is still good.
        assert _runs_page(second.url, jar) == (200, "")
        assert _runs_page(second.url, CookieJar())[0] == 303
    finally:
        second_log = _stop(second)
    assert "read from" in second_log and token not in second_log
    assert kept.read_text() == written  # made once, then only read
    assert set(json.loads(written)) == {"operator_token", "cookie_secret"}


def test_a_configured_token_and_key_win_over_the_kept_ones(tmp_path: Path) -> None:
    first, token = _start(_env(tmp_path))
    try:
        assert token is not None
    finally:
        _stop(first)
    configured = "configured-operator-token-0123"
    env = _env(
        tmp_path,
        SIGNOFF_OPERATOR_TOKEN=configured,
        SIGNOFF_COOKIE_SECRET="c" * 40,
    )
    second, printed = _start(env)
    try:
        assert printed is None  # a configured token is never printed
        jar = CookieJar()
        assert _sign_in(second.url, configured, jar) == 200
        assert _runs_page(second.url, jar) == (200, "")
        assert _sign_in(second.url, token, CookieJar()) == 401
    finally:
        _stop(second)


def test_a_normal_start_and_stop_log_nothing_at_warning(tmp_path: Path) -> None:
    server, _token = _start(_env(tmp_path))  # the default level: WARNING
    err = _stop(server)
    assert err == ""


def test_an_unreadable_kept_file_is_a_clear_error_and_is_left_alone(tmp_path: Path) -> None:
    env = _env(tmp_path)
    kept = tmp_path / "data" / "signoff.db-console.json"
    kept.write_text("not json")
    server = None
    try:
        with pytest.raises(AssertionError, match="is not the console's kept sign-in token"):
            server = Server(env)
    finally:
        if server is not None:
            _stop(server)
    assert kept.read_text() == "not json"
