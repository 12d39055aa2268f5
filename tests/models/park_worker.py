"""A worker process for the park-and-resume tests: a run on a reasoning model, killable.

Run by ``tests/models/test_model_park_resume.py``::

    python tests/models/park_worker.py --db PATH --ledger PATH --provider responses|anthropic \
        --base-url URL --api-key KEY --phase start|decide

``start`` starts a run of the ``bank`` agent, which parks on an approval; it prints one
JSON line (the run and its pending call) and then waits to be killed, holding nothing.
``decide`` is another process: it approves the open ticket, resumes the run to its end
and prints one JSON line. The ``transfer`` tool appends one fsynced JSON line to the
ledger per real execution.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from adapters.models import AnthropicModel, OpenAIResponsesModel
from runtime import Agent, Model, Runtime, tool
from runtime.store.sql import SQLStore


def build_agent(model: Model, ledger: Path) -> Agent:
    @tool(permission="ask")
    async def transfer(account: str, amount: float) -> dict[str, Any]:
        """Move money to an account."""
        with ledger.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"account": account, "amount": amount}) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        return {"transferred": amount, "to": account}

    return Agent("bank", "You move money carefully.", model, tools=[transfer])


async def main(args: argparse.Namespace) -> None:
    model: OpenAIResponsesModel | AnthropicModel
    if args.provider == "responses":
        model = OpenAIResponsesModel(
            "gpt-test",
            api_key=args.api_key,
            base_url=args.base_url,
            max_retries=0,
            reasoning_effort="high",
            reasoning_summary="auto",
            strict_tools=True,
        )
    else:
        model = AnthropicModel(
            "claude-test",
            api_key=args.api_key,
            base_url=args.base_url,
            max_retries=0,
            max_tokens=8192,
            thinking_budget=2048,
        )
    store = SQLStore.sqlite(Path(args.db))
    await store.migrate()
    runtime = Runtime(store, [build_agent(model, Path(args.ledger))])
    try:
        if args.phase == "start":
            run = await runtime.start("bank", "Pay the ACME invoice.", requester="U1")
            [entry] = run.pending
            line = {"run_id": run.run_id, "status": run.status.value, "prompt": entry.prompt}
            print(json.dumps(line), flush=True)
            await asyncio.Event().wait()  # parked: the test kills this process now
        [entry] = await runtime.open_tickets()
        done = await runtime.approve(entry, actor="U1", resume=True)
        print(json.dumps({"run_id": done.run_id, "status": done.status.value, "text": done.text}))
    finally:
        await model.aclose()
        await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for name in ("--db", "--ledger", "--provider", "--base-url", "--api-key", "--phase"):
        parser.add_argument(name, required=True)
    asyncio.run(main(parser.parse_args()))
