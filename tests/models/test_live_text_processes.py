"""Live text across processes: two `signoff serve` processes on one SQLite file.

The ``all`` process drives the bundled examples' run on ``SIGNOFF_MODEL`` (the fake
provider, which holds the answer after its first piece); a ``web`` process serves the
same console. The run's viewer on the driving process gets the pieces before the turn
is recorded; the viewer on the web process gets none, then ``committed`` once the turn
is recorded, and its run page shows the answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest
from fake_llm import API_KEY, FakeLLM, Turn
from fake_llm_stream import StreamScript
from testkit import ROOT, Served

pytestmark = pytest.mark.timeout(120)

TOKEN = "api-token-for-live-text"
ANSWER = "Order A1001 was charged once; nothing to refund, and the customer was told."


def environment(tmp_path: Path, fake: FakeLLM, **settings: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.upper().startswith(("SIGNOFF_", "OPENAI_", "ANTHROPIC_"))
        and not k.upper().endswith("_PROXY")
    }
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'serve.db'}",
            "SIGNOFF_PORT": "0",
            "SIGNOFF_API_TOKENS": json.dumps([{"token": TOKEN, "actor": "U-ops"}]),
            "SIGNOFF_COOKIE_SECRET": "k" * 32,
            "SIGNOFF_MODEL": "openai:gpt-4.1-mini",
            "SIGNOFF_OPENAI_API_KEY": API_KEY,
            "SIGNOFF_OPENAI_BASE_URL": fake.openai_base_url,
            "SIGNOFF_MODEL_MAX_RETRIES": "0",
            "SIGNOFF_POLL_SECONDS": "0.1",
        }
    )
    env.update(settings)
    return env


class Viewer:
    """A console session on one process (its own cookie jar)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = aiohttp.ClientSession(
            cookie_jar=aiohttp.CookieJar(unsafe=True), trust_env=False
        )

    async def sign_in(self) -> None:
        async with self.http.get(self.url + "/login") as page:
            found = re.search(r'name="csrf" value="([^"]+)"', await page.text())
        assert found
        async with self.http.post(
            self.url + "/login",
            data={"csrf": found.group(1), "token": TOKEN},
            allow_redirects=False,
        ) as response:
            assert response.status == 303, await response.text()

    async def page(self, path: str) -> str:
        async with self.http.get(self.url + path) as response:
            assert response.status == 200
            return await response.text()


async def events_until(
    response: aiohttp.ClientResponse, last: str, text: str = ""
) -> tuple[str, list[str]]:
    """Read server-sent events until one of kind `last`; the text and the kinds seen."""
    kinds: list[str] = []
    kind, data = "message", ""
    while True:
        raw = await asyncio.wait_for(response.content.readline(), 30)
        assert raw, "the stream ended"
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            kind = line[len("event: ") :]
        elif line.startswith("data: "):
            data = line[len("data: ") :]
        elif line == "" and data:
            kinds.append(kind)
            value = json.loads(data)
            text = value["text"] if kind == "reset" else text + value.get("text", "")
            data = ""
            if kind == last or (last == "piece" and text):
                return text, kinds


@pytest.fixture
async def processes(tmp_path: Path, fake: FakeLLM) -> AsyncIterator[tuple[Served, Served]]:
    driving = await Served.start(environment(tmp_path, fake))
    try:
        viewing = await Served.start(environment(tmp_path, fake, SIGNOFF_ROLE="web"))
        try:
            yield driving, viewing
        finally:
            await viewing.stop()
    finally:
        await driving.stop()


async def test_pieces_on_the_driving_process_and_the_record_on_the_other(
    fake: FakeLLM, processes: tuple[Served, Served]
) -> None:
    driving, viewing = processes
    gate = asyncio.Event()
    fake.script(replace(Turn.say(ANSWER), streaming=StreamScript(gate=gate, piece=8)))
    here, there = Viewer(driving.url), Viewer(viewing.url)
    try:
        await here.sign_in()
        await there.sign_in()
        async with here.http.post(
            driving.url + "/api/runs",
            json={"agent": "refunds", "input": "Was A1001 charged twice?"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        ) as response:
            assert response.status == 202, await response.text()
            run_id = (await response.json())["run_id"]
        await fake.wait_requests(1)

        async with here.http.get(f"{driving.url}/runs/{run_id}/stream") as near:
            assert near.status == 200
            text, _ = await events_until(near, "piece")
            assert ANSWER.startswith(text) and text != ANSWER
            async with there.http.get(f"{viewing.url}/runs/{run_id}/stream") as far:
                assert far.status == 200
                shown, kinds = await events_until(far, "reset")
                assert (shown, kinds) == ("", ["reset"])
                assert ANSWER not in await there.page(f"/runs/{run_id}")

                gate.set()
                text, _ = await events_until(near, "committed", text)
                assert text == ANSWER
                shown, kinds = await events_until(far, "committed")
                assert (shown, kinds) == ("", ["committed"])
        assert ANSWER in await there.page(f"/runs/{run_id}")
        assert fake.requests[-1].body["stream"] is True
    finally:
        await here.http.close()
        await there.http.close()
