"""Live text on the console: a run's answer reaches its page while the model writes it.

A served signoff (the in-process service, a real SDK model streaming from the fake
provider) drives a run whose answer the fake holds after its first piece. The run's
viewer, signed in to the console, follows ``GET /runs/{id}/stream`` over HTTP and gets
the text so far while nothing of the turn is recorded yet; once the fake goes on, the
stream says ``committed`` and the run page shows the recorded answer. A stranger and a
signed-out visitor get no event. With ``SIGNOFF_STREAM_TEXT=false`` a model built from
its spec is not asked to stream and there is no such route. A second replica on the same database
has none of the pieces (the driving process has them); its stream says ``committed``
once the turn is recorded, and its page then shows the answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer
from fake_llm import API_KEY, FakeLLM, Protocol, Turn
from fake_llm_stream import StreamScript

from adapters.web import ApiToken, TokenAuth
from bot.bootstrap import Parts, Service, build_service
from bot.settings import Settings
from runtime import Agent, Model, RunStatus, Runtime
from runtime.store.sql import SQLStore

ModelFactory = Callable[..., Any]  # the `models` fixture

pytestmark = pytest.mark.timeout(60)

OWNER = "tok-owner-0123456789"
STRANGER = "tok-stranger-0123456789"
ANSWER = "The duplicate charge on A1001 was refunded; the customer was told by e-mail."
PARTS = Parts(listen=False, outbox=False, deadlines=False, wake_ups=False)


def settings_for(path: Path, **values: Any) -> Settings:
    return Settings.model_validate(
        {
            "database_url": f"sqlite+aiosqlite:///{path}",
            "operator_token": "live-operator-0123456789",
            "cookie_secret": "c" * 32,
            "poll_seconds": 0.05,
            **values,
        }
    )


@dataclass
class Replica:
    service: Service
    client: TestClient[Any, Any]

    @property
    def runtime(self) -> Runtime:
        return self.service.runtime

    async def sign_in(self, token: str) -> None:
        page = await self.client.get("/login")
        found = re.search(r'name="csrf" value="([^"]+)"', await page.text())
        assert found
        response = await self.client.post(
            "/login", data={"csrf": found.group(1), "token": token}, allow_redirects=False
        )
        assert response.status == 303, await response.text()


class Bed:
    """Replicas of a served signoff on one SQLite file, each with its own client."""

    def __init__(self, path: Path, model: Model | str) -> None:
        self.path = path
        self.model = model
        self.store = SQLStore.sqlite(path)
        self.replicas: list[Replica] = []

    async def replica(self, parts: Parts = PARTS, **values: Any) -> Replica:
        service = await build_service(
            settings_for(self.path, **values),
            agents=[Agent("writer", "You write short answers.", self.model)],
            store=self.store,
            auth=TokenAuth([ApiToken(OWNER, "U1", name="Uma"), ApiToken(STRANGER, "U9")]),
            parts=parts,
        )
        client: TestClient[Any, Any] = TestClient(TestServer(service.app, host="127.0.0.1", port=0))
        await client.start_server()
        await service.start()
        replica = Replica(service, client)
        self.replicas.append(replica)
        return replica

    async def close(self) -> None:
        for replica in reversed(self.replicas):
            await replica.service.stop(grace_seconds=5)
            await replica.client.close()
        await self.store.close()


@pytest.fixture
async def bed(tmp_path: Path, models: ModelFactory, provider: Protocol) -> AsyncIterator[Bed]:
    path = tmp_path / "signoff.db"
    bed = Bed(path, models(provider))
    await bed.store.migrate()
    try:
        yield bed
    finally:
        await bed.close()


@pytest.fixture(params=["openai", "anthropic", "responses"])
def provider(request: pytest.FixtureRequest) -> Protocol:
    value: Protocol = request.param
    return value


class Events:
    """A server-sent event stream read as (event, data) pairs."""

    def __init__(self, response: ClientResponse) -> None:
        self.response = response
        self.text = ""

    async def next(self) -> tuple[str, dict[str, Any]]:
        kind, data = "message", ""
        while True:
            raw = await asyncio.wait_for(self.response.content.readline(), 20)
            if not raw:
                raise AssertionError("the stream ended")
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[len("event: ") :]
            elif line.startswith("data: "):
                data = line[len("data: ") :]
            elif line == "" and data:
                return kind, json.loads(data)

    async def until(self, done: Callable[[str, str], bool]) -> tuple[str, list[str]]:
        """Read events until `done(kind, text so far)`; the text and the kinds seen."""
        kinds = []
        while True:
            kind, data = await self.next()
            kinds.append(kind)
            if kind == "reset":
                self.text = data["text"]
            elif kind == "text":
                self.text += data["text"]
            if done(kind, self.text):
                return self.text, kinds


async def held_run(bed: Bed, fake: FakeLLM, owner: Replica) -> tuple[str, asyncio.Event]:
    """A run of the owner whose answer the fake holds after its first piece."""
    gate = asyncio.Event()
    fake.script(replace(Turn.say(ANSWER), streaming=StreamScript(gate=gate, piece=8)))
    started = await owner.runtime.start(
        "writer", "Tell me about A1001.", requester="U1", wait=False
    )
    return started.run_id, gate


async def test_the_viewer_sees_the_answer_while_it_is_written_then_the_record(
    bed: Bed, fake: FakeLLM
) -> None:
    owner = await bed.replica()
    await owner.sign_in(OWNER)
    run_id, gate = await held_run(bed, fake, owner)

    page = await owner.client.get(f"/runs/{run_id}")
    html = await page.text()
    assert f'new EventSource("/runs/{run_id}/stream?seen=' in html
    assert '<noscript><meta http-equiv="refresh"' in html
    async with owner.client.get(f"/runs/{run_id}/stream") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        events = Events(response)
        text, _ = await events.until(lambda kind, text: bool(text))
        assert ANSWER.startswith(text) and text != ANSWER
        # Nothing of the turn is recorded while it is being written.
        held = await owner.runtime.get(run_id)
        assert held.status is RunStatus.RUNNING and held.text is None
        assert not any(e["kind"] == "model_call" for e in await owner.runtime.events(run_id))

        gate.set()
        text, kinds = await events.until(lambda kind, _: kind == "committed")
        assert text == ANSWER
        assert "text" in kinds
    assert fake.requests[-1].body["stream"] is True

    done = await owner.runtime.get(run_id)
    assert done.status is RunStatus.DONE and done.text == ANSWER
    page = await owner.client.get(f"/runs/{run_id}")
    html = await page.text()
    assert ANSWER in html and "EventSource" not in html


async def test_a_late_viewer_gets_the_text_so_far(bed: Bed, fake: FakeLLM) -> None:
    owner = await bed.replica()
    await owner.sign_in(OWNER)
    run_id, gate = await held_run(bed, fake, owner)
    async with owner.client.get(f"/runs/{run_id}/stream") as first:
        await Events(first).until(lambda kind, text: bool(text))
        async with owner.client.get(f"/runs/{run_id}/stream") as late:
            events = Events(late)
            kind, data = await events.next()
            assert kind == "reset" and data["text"] and ANSWER.startswith(data["text"])
            events.text = data["text"]
            gate.set()
            text, _ = await events.until(lambda kind, _: kind == "committed")
            assert text == ANSWER


async def test_strangers_and_signed_out_visitors_get_nothing(bed: Bed, fake: FakeLLM) -> None:
    owner = await bed.replica()
    run_id, gate = await held_run(bed, fake, owner)
    await fake.wait_requests(1)
    anonymous = await owner.client.get(f"/runs/{run_id}/stream")
    assert anonymous.status == 401
    assert "event:" not in await anonymous.text()

    await owner.sign_in(STRANGER)
    page = await owner.client.get(f"/runs/{run_id}")
    assert page.status == 404
    refused = await owner.client.get(f"/runs/{run_id}/stream")
    assert refused.status == 404
    body = await refused.text()
    assert "event:" not in body and ANSWER[:8] not in body
    missing = await owner.client.get("/runs/no-such-run/stream")
    assert missing.status == 404
    gate.set()


async def test_a_stream_cut_midway_fails_the_turn_and_keeps_nothing_of_it(
    bed: Bed, fake: FakeLLM
) -> None:
    owner = await bed.replica()
    await owner.sign_in(OWNER)
    gate = asyncio.Event()
    cut = StreamScript(gate=gate, piece=8, cut_after=6)
    fake.script(replace(Turn.say(ANSWER), streaming=cut))
    started = await owner.runtime.start("writer", "About A1001?", requester="U1", wait=False)
    async with owner.client.get(f"/runs/{started.run_id}/stream") as response:
        events = Events(response)
        await events.until(lambda kind, text: bool(text))
        gate.set()
        _, kinds = await events.until(lambda kind, _: kind in ("committed", "ended"))
        assert kinds[-1] == "ended"
    failed = await owner.runtime.get(started.run_id)
    assert failed.status is RunStatus.FAILED and failed.text is None
    assert failed.error is not None and "connection" in failed.error
    assert "stream broke off" in failed.error
    recorded = await owner.runtime.events(started.run_id)
    assert [e["data"]["failure"] for e in recorded if e["kind"] == "model_failed"] == ["connection"]
    assert not any(e["kind"] == "model_call" for e in recorded)


SPECS = {
    "openai": "openai:gpt-test",
    "responses": "openai-responses:gpt-test",
    "anthropic": "anthropic:claude-test",
}


async def test_turned_off_the_model_does_not_stream_and_there_is_no_stream(
    bed: Bed, fake: FakeLLM, provider: Protocol
) -> None:
    bed.model = SPECS[provider]  # built from the settings
    owner = await bed.replica(
        stream_text=False,
        openai_api_key=API_KEY,
        openai_base_url=fake.openai_base_url,
        anthropic_api_key=API_KEY,
        anthropic_base_url=fake.anthropic_base_url,
        model_max_retries=0,
    )
    await owner.sign_in(OWNER)
    fake.script(Turn.say(ANSWER))
    started = await owner.runtime.start("writer", "Tell me.", requester="U1", wait=True)
    assert started.text == ANSWER
    assert "stream" not in fake.requests[-1].body
    assert (await owner.client.get(f"/runs/{started.run_id}/stream")).status == 404


async def test_a_viewer_on_another_replica_sees_the_answer_once_it_is_recorded(
    bed: Bed, fake: FakeLLM
) -> None:
    driving = await bed.replica()
    viewing = await bed.replica(parts=replace(PARTS, worker=False))
    await driving.sign_in(OWNER)
    await viewing.sign_in(OWNER)
    run_id, gate = await held_run(bed, fake, driving)
    async with driving.client.get(f"/runs/{run_id}/stream") as here:
        await Events(here).until(lambda kind, text: bool(text))
        # The other replica has no piece of it; its stream reads the run's state instead.
        async with viewing.client.get(f"/runs/{run_id}/stream") as there:
            elsewhere = Events(there)
            assert await elsewhere.next() == ("reset", {"text": ""})
            page = await (await viewing.client.get(f"/runs/{run_id}")).text()
            assert "EventSource" in page and ANSWER not in page
            gate.set()
            await Events(here).until(lambda kind, _: kind == "committed")
            text, kinds = await elsewhere.until(lambda kind, _: kind == "committed")
            assert text == "" and kinds == ["committed"]
    page = await (await viewing.client.get(f"/runs/{run_id}")).text()
    assert ANSWER in page


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]


@pytest.mark.skipif(
    not Path(CHROMIUM).exists() and not os.environ.get("CI"),
    reason=f"Debian's chromium is not installed at {CHROMIUM} (apt-get install chromium)",
)
@pytest.mark.parametrize("provider", ["anthropic"], indirect=True)
async def test_a_browser_shows_the_text_being_written_then_the_recorded_answer(
    bed: Bed, fake: FakeLLM
) -> None:
    from playwright.async_api import async_playwright, expect

    owner = await bed.replica()
    url = str(owner.client.make_url("")).rstrip("/")
    run_id, gate = await held_run(bed, fake, owner)
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            # The console's own content security policy applies (no bypass).
            page = await browser.new_page()
            page.set_default_timeout(15_000)
            await page.goto(f"{url}/runs/{run_id}")
            await page.fill("#token", OWNER)
            await page.click("button:has-text('Sign in')")
            await expect(page).to_have_url(f"{url}/runs/{run_id}")
            preview = page.locator("#live-text")
            await expect(preview).to_have_text(re.compile(r"^The dupl"))
            assert (await owner.runtime.get(run_id)).text is None
            await expect(page.locator("#final-text")).to_have_count(0)

            gate.set()
            await expect(page.locator("#final-text")).to_have_text(ANSWER)
            await expect(page.locator("#live")).to_have_count(0)
        finally:
            await browser.close()
