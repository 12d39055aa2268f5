"""Images in MCP tool results are recorded (up to ``max_image_bytes``, else a note), from a
real MCP server (``annotated_mcp_server.py``) over stdio."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

import pytest
from testkit import echo_model

from adapters.mcp import Binding, StdioServer
from adapters.mcp.hub import McpHub
from runtime import Agent

pytestmark = pytest.mark.timeout(120)

SERVER = Path(__file__).with_name("annotated_mcp_server.py")


async def snapshot(tmp_path: Path, args: dict[str, Any], **options: Any) -> Any:
    server = StdioServer(
        "ann",
        sys.executable,
        (str(SERVER),),
        env={"ANNOTATED_STATE": str(tmp_path)},
        connect_timeout=60.0,
        **options,
    )
    ops = Agent("ops", "Operate.", echo_model())
    hub = McpHub([server], [Binding(ops, ("ann",))])
    await hub.start()
    try:
        return await hub.connections["ann"].call("snapshot", args, "key-1")
    finally:
        await hub.stop()


async def test_images_and_embedded_images_are_kept(tmp_path: Path) -> None:
    result = await snapshot(tmp_path, {"size": 300, "embedded": True})

    text, image, embedded = result
    assert text == {"type": "text", "text": "the dashboard"}
    assert image["type"] == "image" and image["mimeType"] == "image/png"
    assert base64.b64decode(image["data"]).startswith(b"\x89PNG")
    assert len(base64.b64decode(image["data"])) == 300
    assert embedded == {**image, "uri": "file:///chart.png"}


async def test_an_image_over_the_limit_is_a_note(tmp_path: Path) -> None:
    result = await snapshot(tmp_path, {"size": 3000, "embedded": True}, max_image_bytes=2048)

    assert result == [
        {"type": "text", "text": "the dashboard"},
        *[
            {
                "type": "text",
                "text": "[image image/png, 3 KB: not kept, over the 2 KB limit (max_image_bytes)]",
            }
        ]
        * 2,
    ]


async def test_the_run_page_shows_the_image_to_who_may_see_the_run(
    make_bed: Any, tmp_path: Path
) -> None:
    from adapters.mcp import ToolKnobs
    from runtime import Permission

    cam = Agent("cam", "Look.", echo_model(("snapshot", {"size": 120})))
    server = StdioServer(
        "ann",
        sys.executable,
        (str(SERVER),),
        env={"ANNOTATED_STATE": str(tmp_path)},
        connect_timeout=60.0,
    )
    allow = ToolKnobs("ann.snapshot", where="rule", permission=Permission.ALLOW)
    bed = await make_bed([cam], [server], [Binding(cam, ("ann",), (allow,))])
    mine = await bed.start("cam", requester="U1")
    theirs = await bed.start("cam", requester="U2")
    for run_id in (mine, theirs):
        await bed.finished(run_id)
    [completed] = await bed.events(mine, "tool_completed")
    data = completed["data"]["result"][1]["data"]

    await bed.login()
    page = await bed.client.get(f"/runs/{mine}")
    html = await page.text()
    assert page.status == 200
    assert f'<img class="tool-image" src="data:image/png;base64,{data}"' in html
    assert "&lt;image 1, 0 KB, shown below&gt;" not in html  # at least 1 KB
    assert "image 1, 1 KB, shown below" in html.replace("&lt;", "<").replace("&gt;", ">")
    assert "img-src data:" in page.headers["Content-Security-Policy"]
    stranger = await bed.client.get(f"/runs/{theirs}")
    assert stranger.status == 404
    assert "data:image/png" not in await stranger.text()


async def test_the_gateway_gives_its_mcp_client_the_image_as_an_image(
    tmp_path: Path,
) -> None:
    import asyncio
    import os

    import mcp_types
    from mcp import Client, StdioServerParameters
    from testkit import ROOT

    path = tmp_path / "agents.toml"
    path.write_text(
        f"""
[servers.ann]
command = "{sys.executable}"
args = ["{SERVER}"]
env = {{ ANNOTATED_STATE = "{tmp_path}" }}
connect_timeout = 60

[agents.cam]
instructions = "Look."
model = "examples.mcp:infra_model"
servers = ["ann"]

[agents.cam.rules."ann.snapshot"]
permission = "allow"
"""
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env.update(
        SIGNOFF_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}",
        SIGNOFF_AGENTS=str(path),
        SIGNOFF_LOG_LEVEL="ERROR",
    )
    migrate = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "migrate", cwd=ROOT, env=env
    )
    assert await migrate.wait() == 0
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bot", "mcp", "cam", "--as", "U1", "--no-operator"],
        env=env,
        cwd=str(ROOT),
    )
    async with Client(params) as client:
        result = await client.call_tool("snapshot", {"size": 64})
    assert not result.is_error
    text, image = result.content
    assert isinstance(text, mcp_types.TextContent) and text.text == "the dashboard"
    assert isinstance(image, mcp_types.ImageContent) and image.mime_type == "image/png"
    assert len(base64.b64decode(image.data)) == 64
