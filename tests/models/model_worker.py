"""A worker process for the model crash tests: one run on a real SDK model, killable.

Run by ``tests/models/test_model_crash.py``::

    python tests/models/model_worker.py --db PATH --ledger PATH --provider openai|anthropic \
        --base-url URL --api-key KEY --phase start|recover

``start`` starts a run of the ``crashy`` agent (the test SIGKILLs this process while the
fake provider holds a model call); ``recover`` waits until the dead worker's lease has
expired, recovers the run and prints one JSON line: the run and its flight recorder.
The ``lookup`` tool appends one fsynced JSON line to the ledger per real execution.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from adapters.models import AnthropicModel, OpenAIModel
from runtime import Agent, Model, Runtime, current_tool_context, tool
from runtime.store.sql import SQLStore

LEASE_SECONDS = 1.0


def build_agent(model: Model, ledger: Path) -> Agent:
    @tool(permission="allow", replay_policy="safe")
    async def lookup(order_id: str) -> dict[str, Any]:
        """Look an order up."""
        with ledger.open("a", encoding="utf-8") as handle:
            key = current_tool_context().execution_key
            handle.write(json.dumps({"order_id": order_id, "key": key}) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        return {"order_id": order_id, "total": 249.0}

    return Agent("crashy", "Look orders up.", model, tools=[lookup])


async def main(args: argparse.Namespace) -> None:
    model: OpenAIModel | AnthropicModel
    if args.provider == "openai":
        model = OpenAIModel("gpt-test", api_key=args.api_key, base_url=args.base_url, max_retries=0)
    else:
        model = AnthropicModel(
            "claude-test", api_key=args.api_key, base_url=args.base_url, max_retries=0
        )
    store = SQLStore.sqlite(Path(args.db))
    await store.migrate()
    runtime = Runtime(store, [build_agent(model, Path(args.ledger))], lease_seconds=LEASE_SECONDS)
    try:
        if args.phase == "start":
            await runtime.start("crashy", "Look order A1 up.", requester="U1")
            raise SystemExit("the start phase should have been killed during a model call")
        deadline = time.monotonic() + 30
        while not (results := await runtime.recover()):
            if time.monotonic() > deadline:
                raise SystemExit("nothing to recover")
            await asyncio.sleep(0.1)  # the dead worker's lease has not expired yet
        [result] = results
        events = await runtime.events(result.run_id)
        print(
            json.dumps(
                {
                    "status": result.status.value,
                    "text": result.text,
                    "turns": result.turns,
                    "prompt_tokens": result.prompt_tokens,
                    "completion_tokens": result.completion_tokens,
                    "usage_incomplete": result.usage_incomplete,
                    "events": [{"kind": e["kind"], "data": e["data"]} for e in events],
                }
            )
        )
    finally:
        await model.aclose()
        await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for name in ("--db", "--ledger", "--provider", "--base-url", "--api-key", "--phase"):
        parser.add_argument(name, required=True)
    asyncio.run(main(parser.parse_args()))
