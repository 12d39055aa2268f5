"""How a signoff process starts: it imports no platform SDK it was not configured for, and
no Alembic unless the schema must change; the garbage collector is back on once it runs,
and tuned for serving once `signoff serve` listens.

Each check runs a fresh interpreter and lists the top-level packages in its `sys.modules`.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from runtime.store.sql import SQLStore

ROOT = Path(__file__).resolve().parents[2]

LAZY = frozenset(
    {"alembic", "mako", "slack_bolt", "slack_sdk", "discord", "openai", "anthropic", "mcp"}
)
"""Loaded only by the process that needs them: a migration, or a configured edge or model."""

EDGES = ("adapters.slack", "adapters.discord", "adapters.mcp", "bot.discord_wiring")
"""Our own modules of the chat edges and MCP: imported only when the settings use them."""

# `signoff serve`'s own start (`bot.serve.build_service` and `Service.start`), one
# `/readyz`, a graceful stop; then the packages the process had loaded.
SERVE_ONCE = """
import asyncio, json, sys
from urllib import request

from bot.serve import build_service
from bot.settings import load_settings

def get(url):
    opener = request.build_opener(request.ProxyHandler({}))
    with opener.open(url, timeout=30) as answer:
        return answer.status, json.loads(answer.read())

async def main():
    service = await build_service(load_settings())
    url = await service.start()
    try:
        status, body = await asyncio.to_thread(get, url + "/readyz")
    finally:
        await service.stop()
    return status, body

status, body = asyncio.run(main())
print(json.dumps({
    "status": status,
    "state": body.get("schema", {}).get("state"),
    "packages": sorted({name.split(".")[0] for name in sys.modules}),
    "ours": sorted(name for name in sys.modules if name.split(".")[0] in ("adapters", "bot")),
}))
"""


def python(code: str, env: dict[str, str]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        base.pop(proxy, None)
    base.update(
        {
            "PYTHONPATH": str(ROOT),
            "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'start.db'}",
            "SIGNOFF_APP": "tests.e2e.serve_app:agents",
            "SIGNOFF_PORT": "0",
            "SIGNOFF_OPERATOR_TOKEN": "operator-token-for-tests",
            "SIGNOFF_TEST_LEDGER": str(tmp_path / "ledger.jsonl"),
        }
    )
    return base


def migrate(url: str) -> None:
    async def body() -> None:
        store = SQLStore.from_url(url)
        try:
            await store.migrate()
        finally:
            await store.close()

    asyncio.run(body())


def test_importing_the_command_line_loads_none_of_them(env: dict[str, str]) -> None:
    code = (
        "import json, sys; import bot.cli, bot.serve, bot.app; "
        "print(json.dumps({'packages': sorted({m.split('.')[0] for m in sys.modules})}))"
    )
    packages = python(code, env)["packages"]
    assert isinstance(packages, list) and "click" in packages and "sqlalchemy" in packages
    assert LAZY.intersection(packages) == set()


@pytest.mark.parametrize("auto_migrate", ["true", "false"])
def test_serving_a_current_database_loads_none_of_them(
    env: dict[str, str], auto_migrate: str
) -> None:
    migrate(env["SIGNOFF_DATABASE_URL"])
    env["SIGNOFF_AUTO_MIGRATE"] = auto_migrate
    found = python(SERVE_ONCE, env)
    assert (found["status"], found["state"]) == (200, "current")
    packages, ours = found["packages"], found["ours"]
    assert isinstance(packages, list) and "aiohttp" in packages
    assert LAZY.intersection(packages) == set()
    assert isinstance(ours, list) and "adapters.web.console" in ours
    assert [name for name in ours if name.startswith(EDGES)] == []


def test_a_database_to_migrate_loads_alembic(env: dict[str, str]) -> None:
    # The other side of the checks above: a new database is migrated at start, with Alembic.
    found = python(SERVE_ONCE, env)
    assert (found["status"], found["state"]) == (200, "current")
    packages = found["packages"]
    assert isinstance(packages, list)
    assert LAZY.intersection(packages) == {"alembic", "mako"}


def test_the_command_line_runs_with_the_collector_on_and_its_modules_frozen(
    env: dict[str, str],
) -> None:
    code = (
        "import atexit, gc, json, sys\n"
        "atexit.register(lambda: print(json.dumps("
        "{'enabled': gc.isenabled(), 'frozen': gc.get_freeze_count()})))\n"
        "sys.argv = ['signoff', '--version']\n"
        "from bot.__main__ import main\n"
        "main()\n"
    )
    found = python(code, env)
    assert found["enabled"] is True
    # Everything the command line imported (click, SQLAlchemy, pydantic, the runtime ...).
    assert isinstance(found["frozen"], int) and found["frozen"] > 50_000


# `signoff serve` itself (`bot.serve.serve`) until it tunes the collector, then SIGTERM.
SERVE_UNTIL_TUNED = """
import asyncio, gc, json, os, signal
from bot.serve import serve
from bot.settings import load_settings

default = gc.get_threshold()
frozen = gc.get_freeze_count()

async def tuned():
    while gc.get_threshold() == default:
        await asyncio.sleep(0.01)

async def main():
    serving = asyncio.ensure_future(serve(load_settings()))
    waiting = asyncio.ensure_future(tuned())
    await asyncio.wait([serving, waiting], return_when=asyncio.FIRST_COMPLETED, timeout=60)
    waiting.cancel()
    tuned_to = gc.get_threshold()
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.wait_for(serving, 60)
    return tuned_to

tuned_to = asyncio.run(main())
print(json.dumps({"default": default, "threshold": tuned_to,
                  "frozen": gc.get_freeze_count() - frozen}))
"""


def test_serve_tunes_the_collector_once_it_serves(env: dict[str, str]) -> None:
    from bot.collector import YOUNG_THRESHOLD

    found = python(SERVE_UNTIL_TUNED, env)
    default, threshold = found["default"], found["threshold"]
    assert isinstance(default, list) and isinstance(threshold, list)
    assert threshold == [YOUNG_THRESHOLD, *default[1:]] != default
    # What start-up built (the application, the store, the agents) is frozen.
    assert isinstance(found["frozen"], int) and found["frozen"] > 10_000


def test_the_console_script_is_that_entry_point() -> None:
    (script,) = entry_points(group="console_scripts", name="signoff")
    assert script.value == "bot.__main__:main"
