"""The operator console against a real server, a real SQLite store and a real worker."""

from __future__ import annotations

import re
from typing import Any

import pytest
from aiohttp import ClientSession, CookieJar
from aiohttp.test_utils import TestClient, TestServer

from runtime import Actor, Allow, RunStatus, Runtime

pytestmark = pytest.mark.timeout(60)


async def page(service: Any, path: str, status: int = 200) -> str:
    response = await service.client.get(path)
    text = await response.text()
    assert response.status == status, text
    return text


async def post(service: Any, path: str, data: dict[str, str], status: int = 303) -> Any:
    response = await service.client.post(path, data=data, allow_redirects=False)
    assert response.status == status, await response.text()
    return response


# -- sign-in -------------------------------------------------------------------------------


async def test_pages_need_sign_in(service: Any) -> None:
    for path in ("/", "/runs", "/runs/run_x", "/tickets", "/start"):
        response = await service.client.get(path, allow_redirects=False)
        assert response.status == 303, path
        assert response.headers["Location"].startswith("/login?next=")


async def test_login_sets_an_http_only_session_and_logout_ends_it(service: Any) -> None:
    csrf = await service.csrf_of("/login")
    response = await post(service, "/login", {"csrf": csrf, "token": "wrong"}, status=401)
    assert "That token is not valid." in await response.text()

    response = await post(service, "/login", {"csrf": csrf, "token": "tok-u1", "next": "/tickets"})
    assert response.headers["Location"] == "/tickets"
    cookie = response.headers["Set-Cookie"]
    assert "signoff_session=" in cookie
    assert "HttpOnly" in cookie
    assert "SameSite=Lax" in cookie
    assert "Secure" not in cookie
    assert "tok-u1" not in cookie

    html = await page(service, "/runs")
    assert "Uma" in html
    new_csrf = re.search(r'name="csrf" value="([^"]+)"', html)
    assert new_csrf and new_csrf.group(1) != csrf  # a fresh CSRF token after sign-in

    await post(service, "/logout", {"csrf": new_csrf.group(1)})
    response = await service.client.get("/runs", allow_redirects=False)
    assert response.status == 303


async def test_login_refuses_an_offsite_next(service: Any) -> None:
    csrf = await service.csrf_of("/login")
    response = await post(
        service, "/login", {"csrf": csrf, "token": "tok-u1", "next": "//evil.example/x"}
    )
    assert response.headers["Location"] == "/runs"


async def test_a_cookie_captured_before_sign_out_is_refused_after_it(
    service: Any, tmp_path: Any
) -> None:
    csrf = await service.login("tok-u1")
    jar = service.client.session.cookie_jar
    captured = next(c.value for c in jar if c.key == "signoff_session")
    await post(service, "/logout", {"csrf": csrf})

    # Replayed as is: the session was revoked on the server, not only forgotten by the
    # browser. Every page and form refuses it.
    jar.clear()
    jar.update_cookies({"signoff_session": captured}, service.client.make_url("/"))
    for path in ("/runs", "/tickets", "/start"):
        response = await service.client.get(path, allow_redirects=False)
        assert response.status == 303, path
        assert response.headers["Location"].startswith("/login")
    response = await service.client.post(
        "/start", data={"csrf": csrf, "agent": "bank", "input": "pay"}, allow_redirects=False
    )
    assert response.status == 303 and response.headers["Location"] == "/login"
    assert await service.runtime.list_runs() == []

    # Another process on the same database (a replica, or this one restarted) agrees.
    other = Runtime(service.store, service.agents, clock=service.clock)
    app = service.console_app(other)
    async with TestClient(TestServer(app, host="127.0.0.1", port=0)) as replica:
        replica.session.cookie_jar.update_cookies(
            {"signoff_session": captured}, replica.make_url("/")
        )
        response = await replica.get("/runs", allow_redirects=False)
        assert response.status == 303


async def test_signing_in_again_gives_a_session_that_works(service: Any) -> None:
    csrf = await service.login("tok-u1")
    await post(service, "/logout", {"csrf": csrf})
    await service.login("tok-u1")
    assert "Uma" in await page(service, "/runs")


@pytest.mark.parametrize(
    "target",
    [
        "//evil.example/x",
        "/\t/evil.example/",
        "/\\evil.example",
        "\\\\evil.example",
        "/\n/evil.example",
        "/runs\r\nSet-Cookie: x=1",
        "https://evil.example/",
        "/ok//evil",
        "runs",
        "/\x7f",
    ],
)
async def test_login_refuses_every_offsite_or_malformed_next(service: Any, target: str) -> None:
    csrf = await service.csrf_of("/login")
    response = await post(service, "/login", {"csrf": csrf, "token": "tok-u1", "next": target})
    assert response.headers["Location"] == "/runs"
    # The sign-in page given such a target links back to the default too, never crashes.
    response = await service.client.get("/login", params={"next": target}, allow_redirects=False)
    assert response.status == 303
    assert response.headers["Location"] == "/runs"


async def test_login_keeps_a_local_next(service: Any) -> None:
    csrf = await service.csrf_of("/login")
    response = await post(
        service, "/login", {"csrf": csrf, "token": "tok-u1", "next": "/runs?status=awaiting"}
    )
    assert response.headers["Location"] == "/runs?status=awaiting"


async def test_a_forged_session_cookie_is_ignored(service: Any) -> None:
    await service.login()
    jar = service.client.session.cookie_jar
    value = next(c.value for c in jar if c.key == "signoff_session")
    body, mac = value.split(".")
    jar.clear()
    forged = {"signoff_session": body + "." + mac[::-1]}
    jar.update_cookies(forged, service.client.make_url("/"))
    assert [c.value for c in jar] == [forged["signoff_session"]]
    response = await service.client.get("/runs", allow_redirects=False)
    assert response.status == 303


# -- CSRF ------------------------------------------------------------------------------------


async def test_posts_without_the_right_csrf_token_are_refused_and_change_nothing(
    service: Any,
) -> None:
    parked = await service.park("bank")
    ticket_id = parked.pending[0].ticket_id
    csrf = await service.login()
    before = await service.snapshot(parked.run_id)
    other_session_csrf = await _csrf_of_another_session(service)
    for forged in ({}, {"csrf": ""}, {"csrf": csrf[:-1] + "x"}, {"csrf": other_session_csrf}):
        for path, data in (
            (f"/tickets/{ticket_id}/decide", {"action": "allow"}),
            (f"/runs/{parked.run_id}/cancel", {}),
            ("/start", {"agent": "bank", "input": "pay"}),
            ("/logout", {}),
        ):
            response = await post(service, path, {**data, **forged}, status=403)
            assert "security token is missing or wrong" in await response.text()
    assert await service.snapshot(parked.run_id) == before
    async with service.store.transaction() as tx:
        assert len(await tx.list_runs()) == 1
    # Still signed in (the refused logout did nothing).
    await page(service, "/runs")


async def _csrf_of_another_session(service: Any) -> str:
    async with (
        ClientSession(cookie_jar=CookieJar(unsafe=True)) as other,
        other.get(service.client.make_url("/login")) as response,
    ):
        html = await response.text()
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found
    return found.group(1)


async def test_login_form_needs_its_csrf_token(service: Any) -> None:
    await service.csrf_of("/login")
    await post(service, "/login", {"token": "tok-u1"}, status=403)
    response = await service.client.get("/runs", allow_redirects=False)
    assert response.status == 303


# -- runs ------------------------------------------------------------------------------------


async def test_start_a_run_from_the_console(service: Any) -> None:
    csrf = await service.login("tok-u2")
    html = await page(service, "/start")
    assert "bank" in html and "Pays invoices (asks first)" in html

    response = await post(service, "/start", {"csrf": csrf, "agent": "nobody", "input": "x"}, 422)
    assert "Choose one of the loaded agents." in await response.text()

    response = await post(service, "/start", {"csrf": csrf, "agent": "bank", "input": "pay"})
    run_id = response.headers["Location"].removeprefix("/runs/")
    result = await service.runtime.get(run_id)
    assert result.requester == "U2"
    parked = await service.wait_status(run_id, RunStatus.AWAITING)

    html = await page(service, f"/runs/{run_id}")
    assert "Started a run of bank." in html
    assert "Approve transfer?" in html
    assert "ACME-1" in html
    assert "••••••" in html
    assert "sk-live" not in html
    assert parked.pending[0].ticket_id in html
    assert 'http-equiv="refresh"' not in html  # parked: no auto-refresh over the forms


async def test_runs_page_filters_by_status(service: Any) -> None:
    parked = await service.park("bank")
    done = await service.park("bank")
    await service.runtime.decide(done.pending[0].ticket_id, Allow(), Actor(id="U1"))
    service.worker.wake()
    await service.finished(done.run_id)
    await service.login()

    html = await page(service, "/runs")
    assert parked.run_id in html and done.run_id in html
    html = await page(service, "/runs?status=awaiting")
    assert parked.run_id in html and done.run_id not in html
    html = await page(service, "/runs?status=done")
    assert done.run_id in html and parked.run_id not in html
    for status in ("queued", "running", "paused", "failed", "cancelled"):
        assert f'href="/runs?status={status}"' in html
    await page(service, "/runs?status=sleeping", status=400)


async def test_an_active_run_page_refreshes_itself(service: Any) -> None:
    run_id = await service.crashed()
    await service.login()
    html = await page(service, f"/runs/{run_id}")
    assert 'id="run-status">running<' in html
    assert f'<meta http-equiv="refresh" content="2;url=/runs/{run_id}">' in html
    assert "refreshes itself" in html
    html = await page(service, "/runs")
    assert 'http-equiv="refresh"' in html


async def test_run_page_shows_the_timeline(service: Any) -> None:
    parked = await service.park("bank")
    ticket_id = parked.pending[0].ticket_id
    csrf = await service.login()
    await post(
        service,
        f"/tickets/{ticket_id}/decide",
        {"csrf": csrf, "action": "allow", "next": f"/runs/{parked.run_id}"},
    )
    await service.finished(parked.run_id)
    html = await page(service, f"/runs/{parked.run_id}")
    assert 'id="run-status">done<' in html
    assert "Run of bank started by U1" in html
    assert "Model call, turn 1 (scripted): 12 prompt + 6 completion tokens" in html
    assert "Tool call transfer proposed (permission: ask)" in html
    assert "who may decide: U1" in html
    assert "Allow: transfer by Uma via console" in html
    assert "Tool transfer completed" in html
    assert "&#34;transferred&#34;: 250.0" in html
    # Times for people, the exact one kept for the machine; the arguments once on the
    # call's card and once where the timeline says the call was proposed.
    assert re.search(
        r'<time datetime="[^"]+" data-local>\d+ \w{3} \d{4}, [\d:]{8} UTC</time>', html
    )
    assert "+00:00</span>" not in html
    assert html.count("&#34;account&#34;: &#34;ACME-1&#34;") == 2
    assert 'id="call-' in html and "Allowed by Uma via console" in html
    assert 'id="final-text">Finished. {&#34;transferred&#34;: 250.0' in html
    assert "sk-live" not in html
    assert 'http-equiv="refresh"' not in html


async def test_console_cancels_a_run(service: Any) -> None:
    parked = await service.park("bank")
    csrf = await service.login()
    response = await post(service, f"/runs/{parked.run_id}/cancel", {"csrf": csrf})
    assert response.headers["Location"] == f"/runs/{parked.run_id}"
    assert (await service.runtime.get(parked.run_id)).status is RunStatus.CANCELLED
    html = await page(service, f"/runs/{parked.run_id}")
    assert "Cancelled the run." in html


# -- decisions -----------------------------------------------------------------------------


async def test_deny_with_a_reason(service: Any) -> None:
    parked = await service.park("bank")
    ticket_id = parked.pending[0].ticket_id
    csrf = await service.login()
    html = await page(service, "/tickets")
    assert f'action="/tickets/{ticket_id}/decide"' in html
    assert "Deny with reason" in html

    response = await post(
        service,
        f"/tickets/{ticket_id}/decide",
        {"csrf": csrf, "action": "deny", "reason": "wrong <account>", "next": "/tickets"},
    )
    assert response.headers["Location"] == "/tickets"
    html = await page(service, "/tickets")
    assert "Denied transfer." in html
    assert "Nothing is waiting for a decision." in html

    done = await service.finished(parked.run_id)
    assert done.text == "Finished. Permission denied: wrong <account>"
    assert service.ledger == []
    html = await page(service, f"/runs/{parked.run_id}")
    assert "Deny: transfer by Uma via console" in html
    assert "wrong &lt;account&gt;" in html  # escaped, never raw HTML
    assert "wrong <account>" not in html


async def test_refusals_are_shown_on_the_page(service: Any) -> None:
    parked = await service.park("bank")
    ticket_id = parked.pending[0].ticket_id
    here = f"/runs/{parked.run_id}"

    # A stranger: the ticket does not exist for them.
    csrf = await service.login("tok-u2")
    before = await service.snapshot(parked.run_id)
    response = await post(
        service,
        f"/tickets/{ticket_id}/decide",
        {"csrf": csrf, "action": "allow", "next": here},
        status=404,
    )
    assert "There is no ticket" in await response.text()
    assert await service.snapshot(parked.run_id) == before
    await post(service, "/logout", {"csrf": csrf})

    # The requester of a four-eyes call sees it but may not decide it.
    deploy = await service.park("deployer")
    csrf = await service.login("tok-u1")
    response = await post(
        service,
        f"/tickets/{deploy.pending[0].ticket_id}/decide",
        {"csrf": csrf, "action": "allow", "next": f"/runs/{deploy.run_id}"},
        status=403,
    )
    html = await response.text()
    assert "You may not decide this: who may: U2 (not the requester)" in html
    assert "Approve deploy?" in html  # the run page, still with its forms
    await post(service, "/logout", {"csrf": csrf})

    csrf = await service.login("tok-u1")
    await post(service, f"/tickets/{ticket_id}/decide", {"csrf": csrf, "action": "allow"})
    response = await post(
        service,
        f"/tickets/{ticket_id}/decide",
        {"csrf": csrf, "action": "deny", "next": "/tickets"},
        status=409,
    )
    assert "Already decided by U1" in await response.text()
    await service.finished(parked.run_id)
    assert len(service.ledger) == 1

    response = await post(
        service, "/tickets/tk_nope/decide", {"csrf": csrf, "action": "allow"}, status=404
    )
    assert "There is no ticket" in await response.text()


async def test_input_form_with_validation_errors_then_a_valid_answer(service: Any) -> None:
    parked = await service.park("release")
    ticket_id = parked.pending[0].ticket_id
    here = f"/runs/{parked.run_id}"
    csrf = await service.login()

    html = await page(service, here)
    assert "How do we roll checkout back?" in html
    assert 'name="field.previous_version"' in html
    assert '<select id="field.strategy" name="field.strategy" required>' in html
    assert '<option value="disable_feature_flag"' in html
    assert 'type="number" step="1" name="field.max_minutes" value="15"' in html
    assert 'type="checkbox" name="field.notify_team"' in html
    assert html.count('class="req"') == 2  # previous_version and strategy are required
    assert "The version to go back to." in html

    decide = f"/tickets/{ticket_id}/decide"
    form = {
        "csrf": csrf,
        "action": "input",
        "next": here,
        "field.previous_version": "2.4.0",
        "field.strategy": "redeploy_previous",
    }
    before = await service.snapshot(parked.run_id)

    # Conversion problems are caught before anything is submitted.
    response = await post(service, decide, {**form, "field.max_minutes": "soon"}, status=422)
    html = await response.text()
    assert '<div class="error" data-field="max_minutes">Enter a whole number.</div>' in html
    assert 'value="soon"' in html  # what was typed is kept

    # The runtime's schema validation: errors next to the fields they are about.
    response = await post(
        service,
        decide,
        {**form, "field.previous_version": "", "field.max_minutes": "999"},
        status=422,
    )
    html = await response.text()
    assert 'data-field="previous_version">This field is required.' in html
    response = await post(service, decide, {**form, "field.max_minutes": "999"}, status=422)
    html = await response.text()
    assert '<div class="error" data-field="max_minutes">999 is greater than the maximum' in html
    assert "input does not match the requested form" in html
    assert await service.snapshot(parked.run_id) == before

    response = await post(
        service, decide, {**form, "field.max_minutes": "30", "field.notify_team": "true"}
    )
    assert response.headers["Location"] == here
    done = await service.finished(parked.run_id)
    assert done.status is RunStatus.DONE
    answer = {
        "previous_version": "2.4.0",
        "strategy": "redeploy_previous",
        "max_minutes": 30,
        "notify_team": True,
    }
    assert service.ledger == [("rollback_plan", answer)]
    assert "Answered rollback_plan." in await page(service, here)


async def test_uncertain_resolution_form(service: Any) -> None:
    parked = await service.uncertain()
    ticket_id = parked.pending[0].ticket_id
    here = f"/runs/{parked.run_id}"
    csrf = await service.login()
    html = await page(service, here)
    assert "Did page happen?" in html
    assert "Record verified result" in html
    assert "Retry (it may run twice)" in html
    assert "Abort" in html
    assert "Outcome of page unknown after 1 attempt(s)" in html

    decide = f"/tickets/{ticket_id}/decide"
    before = await service.snapshot(parked.run_id)
    response = await post(
        service,
        decide,
        {"csrf": csrf, "action": "resolve", "result": "paged by phone", "next": here},
        status=422,
    )
    html = await response.text()
    assert 'data-field="result">Enter the verified result as JSON' in html
    assert ">paged by phone</textarea>" in html
    assert await service.snapshot(parked.run_id) == before

    await post(
        service,
        decide,
        {"csrf": csrf, "action": "resolve", "result": '{"paged": "grace", "via": "phone"}'},
    )
    done = await service.finished(parked.run_id)
    assert done.text == 'Finished. {"paged": "grace", "via": "phone"}'
    assert service.ledger == []  # the tool was not run again


@pytest.mark.parametrize(("action", "ran"), [("retry", 1), ("abort", 0)])
async def test_uncertain_retry_and_abort_buttons(service: Any, action: str, ran: int) -> None:
    parked = await service.uncertain()
    csrf = await service.login()
    await post(
        service,
        f"/tickets/{parked.pending[0].ticket_id}/decide",
        {"csrf": csrf, "action": action, "reason": "checked the pager log"},
    )
    done = await service.finished(parked.run_id)
    assert done.status is RunStatus.DONE
    assert len(service.ledger) == ran
