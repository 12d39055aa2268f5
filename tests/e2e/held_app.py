"""`serve_app`'s agents in a `signoff serve` that stores decisions and never applies them.

Loaded with ``SIGNOFF_APP=tests.e2e.held_app:agents`` by the tests that SIGKILL a serve
process between answering a click and applying it: the click is checked and stored as
usual (the platform gets its answer only after the commit), and the worker leaves every
stored decision pending, so the kill always lands in that window. The next process runs
the plain `serve_app` and applies what was stored.
"""

from __future__ import annotations

from runtime import Agent, Runtime
from runtime.services.inbox import ReceivedOutcome
from tests.e2e.serve_app import agents as serve_agents


async def _hold(self: Runtime, limit: int = 20) -> list[ReceivedOutcome]:
    return []


def agents() -> list[Agent]:
    """The agents of `serve_app`, in a process that holds every stored decision."""
    Runtime.apply_received = _hold  # type: ignore[method-assign]
    return serve_agents()
