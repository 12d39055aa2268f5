"""The docs' agent example is honest: it reports success only when the tool ran."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from runtime import RunStatus, Runtime
from runtime.store.memory import MemoryStore

PAGE = Path(__file__).resolve().parents[2] / "docs" / "agents-and-tools.md"


def example_namespace() -> dict[str, Any]:
    code = re.search(r"```python\n(.*?)```", PAGE.read_text(), re.DOTALL)
    assert code, "the page has a Python example"
    source = code.group(1).replace("asyncio.run(main())", "")
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(source, str(PAGE), "exec"), namespace)
    return namespace


async def test_the_example_runs_as_printed(capsys: Any) -> None:
    namespace = example_namespace()
    await namespace["main"]()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("awaiting refund tk_")
    assert lines[1] == "done Refunded 249.00 on A1001."


async def test_the_example_says_so_after_a_denial() -> None:
    namespace = example_namespace()
    runtime = Runtime(MemoryStore(), [namespace["agent"]])
    result = await runtime.start("refunds", "refund A1001", requester="U1")
    assert result.pending[0].prompt == "A1001 was charged twice; refunding the duplicate."
    result = await runtime.decline(result.pending[0], actor="U1", reason="over budget", resume=True)
    assert result.status is RunStatus.DONE
    assert result.text == "I did not refund A1001. Permission denied: over budget."
    assert "Refunded" not in (result.text or "")
