"""Make docs/images/approval-card.png: the refunds example's approval card in the console.

Runs `signoff serve` on 127.0.0.1 with a throwaway SQLite file, starts the refunds
example through the JSON API, signs in to the console in headless Chromium (Debian's
`chromium` package) and photographs the card of the parked refund. From the checkout:
`.venv/bin/python docs/images/approval_card.py`.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from playwright.async_api import async_playwright

HERE = Path(__file__).resolve().parent
TOKEN = "operator-token-for-the-screenshot"
MESSAGE = "Order A1001 was charged twice. Please refund the duplicate charge."


def call(url: str, body: dict[str, str] | None = None) -> dict[str, object]:
    """GET `url`, or POST `body` to it, as the operator; the JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        result: dict[str, object] = json.load(answer)
        return result


def wait_for(check: Callable[[], bool], what: str) -> None:
    """Poll `check` until it holds (this is a tool, not a test: polling is fine here)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


async def photograph(url: str, run_id: str, out: Path) -> None:
    async with async_playwright() as p:
        browser = await p.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        page = await browser.new_page(viewport={"width": 900, "height": 900})
        await page.goto(url + "/login")
        await page.fill("#token", TOKEN)
        await page.click("button[type='submit']")
        await page.goto(f"{url}/runs/{run_id}")
        await page.locator("section.ticket").first.screenshot(path=str(out))
        await browser.close()


def main() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
        env.update(
            SIGNOFF_DATABASE_URL=f"sqlite+aiosqlite:///{tmp}/signoff.db",
            SIGNOFF_PORT=str(port),
            SIGNOFF_OPERATOR_TOKEN=TOKEN,
            SIGNOFF_APP="examples:demo_agents",
        )
        serve = subprocess.Popen(
            [sys.executable, "-m", "bot", "serve"], env=env, stdout=subprocess.DEVNULL
        )
        try:
            wait_for(lambda: call(url + "/healthz") is not None, "signoff serve")
            run = call(url + "/api/runs", {"agent": "refunds", "input": MESSAGE})
            run_url = f"{url}/api/runs/{run['run_id']}"
            wait_for(lambda: call(run_url)["status"] == "awaiting", "the run to park")
            asyncio.run(photograph(url, str(run["run_id"]), HERE / "approval-card.png"))
        finally:
            serve.terminate()
            serve.wait(30)


if __name__ == "__main__":
    main()
