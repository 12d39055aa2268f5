"""signoff approvals for the OpenAI Agents SDK (the client's ``openai-agents`` extra).

Tools declared with ``needs_approval`` interrupt the SDK's run; `SignoffRunner` turns each
interruption into a signoff approval (a card in Slack, Discord or the console), waits for
the decision, applies it to the run state (``state.approve`` / ``state.reject`` with the
reason the model then reads) and continues the run, until it ends. See
``docs/openai-agents.md``.

With a `StateStore`, the run state (``RunState.to_string()``) is saved before signoff is
asked: an agent process that restarts while a decision is pending calls `SignoffRunner.run`
again with the same ``run_id``, resumes the same run from the saved state, and asks signoff
again with the same idempotency keys, so no second card appears.

An approval with edited arguments: the SDK cannot run a call with arguments other than the
model's, so the call is refused with a message that gives the model the approved
arguments; when the model then calls the same tool with exactly those arguments, the
earlier approval covers that call once, without a second card.
"""

from __future__ import annotations

import inspect
import json
import os
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agents import Agent, RunConfig, Runner, RunResult, RunState, ToolApprovalItem
from agents.items import TResponseInputItem

from adapters.client.async_client import AsyncSignoffClient
from adapters.client.decision import ApprovalTimeout, Decision
from adapters.client.keys import derive_key
from adapters.client.tokens import args_digest

KEY_PREFIX = "openai-agents"
"""First part of every idempotency key this adapter derives (run id and call id follow)."""


class StateStore(Protocol):
    """Where run states wait for decisions: saved before signoff is asked, dropped at the end."""

    def load(self, run_id: str) -> str | None:
        """The saved state of `run_id`, or None."""
        ...

    def save(self, run_id: str, state: str) -> None:
        """Keep `state` for `run_id`, replacing what was there."""
        ...

    def delete(self, run_id: str) -> None:
        """Forget `run_id` (nothing happens if nothing is saved)."""
        ...


class FileStateStore:
    """Run states as files in a directory, one per run, each written atomically.

    Args:
        directory: Where the files go (created if missing).
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self._directory = Path(directory)
        self._directory.mkdir(parents=True, exist_ok=True)

    def load(self, run_id: str) -> str | None:
        """The saved state of `run_id`, or None."""
        try:
            return self._path(run_id).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def save(self, run_id: str, state: str) -> None:
        """Keep `state` for `run_id` (write to a temporary file, then rename over)."""
        fd, temporary = tempfile.mkstemp(dir=self._directory, prefix=".saving-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(state)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self._path(run_id))
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def delete(self, run_id: str) -> None:
        """Forget `run_id`."""
        self._path(run_id).unlink(missing_ok=True)

    def _path(self, run_id: str) -> Path:
        # Run ids come from the caller: hash them rather than trust them as file names.
        return self._directory / f"{derive_key(KEY_PREFIX, run_id)}.json"


@dataclass(frozen=True)
class _Authorised:
    """An approval allowed with edits: it covers one later call with exactly its arguments."""

    approval_id: str
    tool: str
    digest: str


@dataclass
class SignoffRunner:
    """Runs an OpenAI Agents SDK agent whose approval-gated tools ask signoff.

    Example::

        runner = SignoffRunner(client, agent="billing", store=FileStateStore("runs"))
        result = await runner.run(billing_agent, "Refund order A-1", run_id="conv-42")

    Attributes:
        client: The signoff client.
        agent: The signoff agent (source) name the approvals are requested for.
        store: Where run states are saved while a decision is pending; without one, a
            restart of the process starts the run again.
        timeout: Seconds to wait for each decision; None waits until decided. When it
            runs out, `ApprovalTimeout` is raised and the saved state stays: calling
            `run` again later with the same ``run_id`` carries on.
        description: Gives the card's "why" for an interruption.
        on_pending: Called with each approval signoff did not decide at once, before
            waiting for it (to tell the user who is asked, say).
        run_config: Passed to every ``Runner.run``.
    """

    client: AsyncSignoffClient
    agent: str
    store: StateStore | None = None
    timeout: float | None = None
    description: Callable[[ToolApprovalItem], str | None] | None = None
    on_pending: Callable[[Decision], Awaitable[None] | None] | None = None
    run_config: RunConfig | None = None

    async def run(
        self,
        starting_agent: Agent[Any],
        input: str | list[TResponseInputItem],
        *,
        run_id: str,
        session_id: str | None = None,
        context: Any = None,
        max_turns: int | None = None,
    ) -> RunResult:
        """Run `starting_agent` to its end, every gated tool call decided in signoff.

        Args:
            starting_agent: The agent to run.
            input: Its input; ignored when a saved state of `run_id` is resumed.
            run_id: Your id for this run (a conversation or job id): it keys the saved
                state and the idempotency keys of its approvals.
            session_id: signoff's session for the approvals (grants of scope ``run``
                cover it); `run_id` by default.
            context: The run context (a mapping, so it survives in the saved state).
            max_turns: As for ``Runner.run``.

        Returns:
            The SDK's result of the finished run.

        Raises:
            ApprovalTimeout: A decision was still pending after `timeout`.
            ApprovalRequestError: signoff refused an approval request.
            SignoffUnavailable: signoff could not be reached for too long.
        """
        session = session_id if session_id is not None else run_id
        options: dict[str, Any] = {"run_config": self.run_config}
        if max_turns is not None:
            options["max_turns"] = max_turns
        authorised: list[_Authorised] = []
        saved = self.store.load(run_id) if self.store is not None else None
        if saved is not None:
            state, authorised = await _restore(starting_agent, saved, context)
        else:
            result = await Runner.run(starting_agent, input, context=context, **options)
            if not result.interruptions:
                return result
            state = result.to_state()
        while True:
            self._save(run_id, state, authorised)
            authorised = await self._decide(state, run_id, session, authorised)
            result = await Runner.run(starting_agent, state, **options)
            if not result.interruptions:
                if self.store is not None:
                    self.store.delete(run_id)
                return result
            state = result.to_state()

    async def _decide(
        self, state: RunState[Any], run_id: str, session: str, authorised: list[_Authorised]
    ) -> list[_Authorised]:
        """Ask signoff about every interruption (all cards at once), then apply each answer."""
        left = list(authorised)
        asked: list[tuple[ToolApprovalItem, Decision]] = []
        for item in state.get_interruptions():
            tool, arguments = _call_of(item)
            earlier = _covering(left, tool, arguments)
            if earlier is not None:
                left.remove(earlier)
                state.approve(item)
                continue
            decision = await self.client.request_approval(
                agent=self.agent,
                tool=tool,
                arguments=arguments,
                session_id=session,
                idempotency_key=derive_key(KEY_PREFIX, run_id, item.call_id or ""),
                description=self.description(item) if self.description else None,
                wait=False,
            )
            asked.append((item, decision))
            if decision.pending and self.on_pending is not None:
                told = self.on_pending(decision)
                if inspect.isawaitable(told):
                    await told
        for item, first in asked:
            decision = first
            if decision.pending:
                decision = await self.client.wait(decision.approval_id, timeout=self.timeout)
            if decision.pending:
                raise ApprovalTimeout(decision)
            if decision.denied:
                state.reject(item, rejection_message=_denial(decision))
            elif decision.edited:
                state.reject(item, rejection_message=_edited(decision))
                left.append(
                    _Authorised(
                        decision.approval_id, decision.tool, args_digest(decision.arguments)
                    )
                )
            else:
                state.approve(item)
        return left

    def _save(self, run_id: str, state: RunState[Any], authorised: list[_Authorised]) -> None:
        if self.store is None:
            return
        payload = {
            "state": state.to_json(),
            "authorised": [vars(entry) for entry in authorised],
        }
        self.store.save(run_id, json.dumps(payload))


async def _restore(
    starting_agent: Agent[Any], saved: str, context: Any
) -> tuple[RunState[Any], list[_Authorised]]:
    payload = json.loads(saved)
    state = await RunState.from_json(starting_agent, payload["state"], context_override=context)
    authorised = [_Authorised(**entry) for entry in payload.get("authorised", [])]
    return state, authorised


def _call_of(item: ToolApprovalItem) -> tuple[str, dict[str, Any]]:
    """The tool's name and arguments (a JSON object) as signoff is asked about them."""
    tool = item.qualified_name or item.name or "tool"
    raw = item.arguments
    try:
        parsed = json.loads(raw) if raw is not None else {}
    except ValueError:
        parsed = raw
    return tool, parsed if isinstance(parsed, dict) else {"input": parsed}


def _covering(
    authorised: list[_Authorised], tool: str, arguments: dict[str, Any]
) -> _Authorised | None:
    try:
        digest = args_digest(arguments)
    except ValueError:
        return None
    return next((a for a in authorised if a.tool == tool and a.digest == digest), None)


def _denial(decision: Decision) -> str:
    reason = f": {decision.reason}" if decision.reason else "."
    return f"signoff denied this call to {decision.tool}{reason} Do not retry it as is."


def _edited(decision: Decision) -> str:
    arguments = json.dumps(decision.arguments, sort_keys=True, ensure_ascii=False)
    who = f" by {decision.decided_by}" if decision.decided_by else ""
    return (
        f"signoff approved this call to {decision.tool}{who} only with these arguments: "
        f"{arguments}. It did not run. Call {decision.tool} again with exactly these "
        "arguments to run it as approved."
    )
