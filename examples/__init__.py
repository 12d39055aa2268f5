"""Example agents to copy: refunds, deploys and on-call, each on a scripted model.

`demo_agents` is the default ``SIGNOFF_APP`` (``examples:demo_agents``), so a fresh
install has something to run. The models are `runtime.ScriptedModel` instances replaying
canned OpenAI-shaped replies that read the tool results (a denied refund is reported as
not done): no network, no API key. With ``SIGNOFF_MODEL`` (e.g. ``openai:gpt-4.1-mini``)
and its key set, `signoff serve` and the CLI run the same agents on that model instead.

- `examples.refunds`: a permission rule over the arguments, an idempotent tool that uses
  the execution key.
- `examples.deploys`: typed input (`runtime.InputRequest`), four-eyes approvals, a
  decision deadline.
- `examples.oncall`: an ``ask`` tool with the ``manual`` replay policy (uncertain after a
  crash).
"""

from __future__ import annotations

from runtime import Agent


def demo_agents() -> list[Agent]:
    """Fresh instances of the three example agents."""
    from examples import deploys, oncall, refunds

    return [refunds.build_agent(), deploys.build_agent(), oncall.build_agent()]


__all__ = ["demo_agents"]
