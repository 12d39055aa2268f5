"""Durable deferral: signoff resumes a headless Claude Code session once its deferred call
is decided.

A ``claude -p`` run whose hook answered ``defer`` stops with stop reason
``tool_deferred``, and nothing waits for the decision. When the agent's ``resume`` is
configured (the agents file) and the hook asks for it, the approval is requested with a
resume destination (platform `PLATFORM`, the session's directory) and, once the hook's
wait is over, deferred (`runtime.Runtime.defer_approval`). When the approval is decided,
the runtime queues an outbox item to that destination; `ResumeNotifier` starts one run of
the *resume agent* ``<agent>.resume`` (keyed by the approval, so a retried delivery starts
nothing new) and a worker drives it: its one tool, ``resume_session``, runs the resume
command (``claude -p --resume <session id> --output-format json``) in the session's
directory. The resumed Claude Code asks its hook again about the deferred call, gets the
decision at once (the same approval), and goes on.

The tool's replay policy is ``manual``: a worker that dies while Claude Code runs leaves an
uncertain call for a person to reconcile (resume again, or not), never a second resume on
its own. Only directories matching the agent's ``workdirs`` are resumed in: a session's
directory holds its own Claude Code settings, hooks included, which the resume runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import json
import os
import re
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime import (
    Agent,
    ConfigurationError,
    ModelRequest,
    ModelResponse,
    Runtime,
    SignoffError,
    Tool,
    ToolCallRequest,
)
from runtime.edges import ApprovalCallback, Delivery, DeliveryError, Notification

PLATFORM = "claude_code_resume"
"""The platform of resume destinations, and of `ResumeNotifier` in the outbox."""
DEFAULT_COMMAND = ("claude", "-p", "--resume", "{session_id}", "--output-format", "json")
"""The resume command; ``{session_id}`` is replaced by the session's id."""
DEFAULT_TIMEOUT_SECONDS = 3600.0
TOOL = "resume_session"
IDEMPOTENCY_SCOPE = "claude-code-resume"
_SESSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")
_SHOWN = 2000


@dataclass(frozen=True)
class ResumeConfig:
    """How an agent's deferred Claude Code sessions are resumed.

    Attributes:
        workdirs: Glob patterns (``fnmatch``, ``*`` crosses ``/``) of the absolute
            directories a session may be resumed in; a session elsewhere is not.
        command: The command and its arguments (no shell); ``{session_id}`` is replaced.
        timeout_seconds: How long one resume may run before it is stopped.
        env: Variables added to the resumed process's environment (signoff's own is
            inherited).
    """

    workdirs: tuple[str, ...]
    command: tuple[str, ...] = DEFAULT_COMMAND
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.workdirs or not all(
            isinstance(p, str) and p.startswith("/") for p in self.workdirs
        ):
            raise ConfigurationError("resume.workdirs: one or more absolute directory patterns")
        if not self.command or not any("{session_id}" in part for part in self.command):
            raise ConfigurationError("resume.command must contain {session_id}")
        if self.timeout_seconds <= 0:
            raise ConfigurationError("resume.timeout must be positive")

    def refusal(self, cwd: object) -> str | None:
        """Why a session in `cwd` may not be resumed (None: it may)."""
        if not isinstance(cwd, str) or not cwd.startswith("/"):
            return "the session's directory (cwd) must be an absolute path"
        if os.path.normpath(cwd) != cwd:
            return f"the session's directory {cwd!r} is not a normalised path"
        for path in (cwd, os.path.realpath(cwd)):
            if not any(fnmatch.fnmatchcase(path, pattern) for pattern in self.workdirs):
                return (
                    f"sessions in {path!r} are not resumed: it matches none of resume.workdirs "
                    f"({', '.join(self.workdirs)})"
                )
        return None

    def argv(self, session_id: str) -> list[str]:
        """The resume command for `session_id`."""
        return [part.replace("{session_id}", session_id) for part in self.command]


def check_session(session_id: object) -> str:
    """`session_id` if it may be given to the resume command (it may not look like an
    option), else `ValueError`."""
    if not isinstance(session_id, str) or not _SESSION.fullmatch(session_id):
        raise ValueError("a session id is 1-200 letters, digits, '_', '.' or '-'")
    return session_id


def destination(cwd: str) -> dict[str, Any]:
    """The resume destination of a session in `cwd` (`runtime.ApprovalRequest.resume`)."""
    return {"platform": PLATFORM, "cwd": cwd}


def resume_agent_name(agent: str) -> str:
    """The name of the agent whose runs resume `agent`'s deferred sessions."""
    return f"{agent}.resume"


class ResumeModel:
    """The resume agent's deterministic model: call ``resume_session`` with the run's
    input (a JSON object), then end the run with what it returned."""

    name = "signoff:resume"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Propose the resume, then end with its result."""
        users = [m for m in request.messages if m.get("role") == "user"]
        asked = str(users[-1].get("content") or "") if users else ""
        results = [m for m in request.messages if m.get("role") == "tool"]
        if results:
            return ModelResponse(text=str(results[-1].get("content") or "")[:_SHOWN])
        return ModelResponse(
            text=None, tool_calls=(ToolCallRequest(id="resume_1", name=TOOL, arguments=asked),)
        )


_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approval_id": {"type": "string", "minLength": 1, "maxLength": 200},
        "session_id": {"type": "string", "minLength": 1, "maxLength": 200},
        "cwd": {"type": "string", "minLength": 1, "maxLength": 4096},
    },
    "required": ["approval_id", "session_id", "cwd"],
    "additionalProperties": False,
}


def _summary(stdout: bytes) -> str:
    text = stdout.decode("utf-8", "replace").strip()
    try:
        result = json.loads(text)
    except ValueError:
        return f"Resumed: {text[-_SHOWN:]}" if text else "Resumed."
    if not isinstance(result, dict):
        return f"Resumed: {text[-_SHOWN:]}"
    stop = result.get("stop_reason") or result.get("subtype") or "done"
    said = str(result.get("result") or "")
    more = f": {said[:_SHOWN]}" if said else ""
    session = result.get("session_id")
    named = f" {session}" if session else ""
    return f"Resumed Claude Code session{named} ({stop}){more}"


async def run_resume(config: ResumeConfig, session_id: str, cwd: str) -> str:
    """Run the resume command for `session_id` in `cwd`; what it printed, summarised.

    Raises:
        RuntimeError: The directory is refused, or the command failed, could not start
            or ran past its timeout (then it is stopped, with its process group).
    """
    problem = config.refusal(cwd)
    if problem is not None:
        raise RuntimeError(problem)
    argv = config.argv(check_session(session_id))
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env={**os.environ, **config.env},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise RuntimeError(f"the resume command {argv[0]!r} could not start: {exc}") from None
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), config.timeout_seconds)
    except TimeoutError:
        raise RuntimeError(
            f"the resumed session did not finish within {config.timeout_seconds:g} s; stopped"
        ) from None
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
    if process.returncode != 0:
        tail = stderr.decode("utf-8", "replace").strip()[-_SHOWN:]
        raise RuntimeError(f"the resume command exited with {process.returncode}: {tail}")
    return _summary(stdout)


class ResumeAgent(Agent):
    """A resume agent (`resume_agent`)."""

    internal = True
    """Started by signoff itself, never by a person: the edges neither offer it nor start
    it by hand."""


def resume_agent(source: Agent, config: ResumeConfig) -> Agent:
    """The agent whose runs resume `source`'s deferred sessions under `config`.

    Its approvers are `source`'s: they reconcile a resume left uncertain by a crash.
    Register it with the runtime in every process whose worker may drive it.
    """

    async def invoke(arguments: dict[str, Any]) -> str:
        return await run_resume(config, arguments["session_id"], arguments["cwd"])

    resume = Tool.from_schema(
        TOOL,
        "Resume a deferred Claude Code session once its call was decided.",
        _SCHEMA,
        invoke,
        permission="allow",
        replay_policy="manual",
        approvers=source.approvers or None,
        grants=(),
    )
    return ResumeAgent(
        resume_agent_name(source.name),
        "",
        ResumeModel(),
        [resume],
        approvers=source.approvers,
        max_turns=2,
        description=f"Resumes the deferred Claude Code sessions of {source.name}",
    )


class ResumeNotifier:
    """Starts the resume of a deferred session once its approval is decided (the
    `runtime.services.delivery.Notifier` of platform `PLATFORM`).

    Args:
        runtime: The runtime that holds the approvals and drives the resume runs.
        configs: Resume settings by external agent name.
        wake: Wakes the worker after a resume run was queued.
    """

    def __init__(
        self, runtime: Runtime, configs: Mapping[str, ResumeConfig], wake: Callable[[], None]
    ) -> None:
        self._runtime = runtime
        self._configs = dict(configs)
        self._wake = wake

    async def deliver(self, note: Notification, delivery: Delivery) -> dict[str, Any] | None:
        """Queue the resume run of the approval `note` stands for, if its caller deferred.

        Returns:
            ``{"resume_run_id": ...}``, or ``{"resumed": False, ...}`` when the caller
            did not defer (it had its answer in time).

        Raises:
            DeliveryError: Permanent when the approval cannot be read, its agent has no
                resume configured, or the session may not be resumed where it is.
        """
        if not isinstance(note, ApprovalCallback):
            raise DeliveryError(
                f"outbox item {delivery.outbox_id} ({note.kind}) is not an approval's end",
                permanent=True,
            )
        try:
            approval = await self._runtime.approval(note.run_id, viewer=None)
        except SignoffError as exc:
            raise DeliveryError(
                f"approval {note.run_id} cannot be read: {exc}", permanent=True
            ) from exc
        if not approval.deferred:
            return {"resumed": False, "why": "the caller did not defer"}
        config = self._configs.get(approval.agent)
        if config is None:
            raise DeliveryError(
                f"approval {note.run_id}: agent {approval.agent!r} has no resume configured",
                permanent=True,
            )
        cwd = delivery.destination.get("cwd")
        problem = config.refusal(cwd)
        if problem is None and approval.session_id is None:
            problem = "the approval has no session to resume"
        if problem is not None:
            raise DeliveryError(f"approval {note.run_id}: {problem}", permanent=True)
        asked = json.dumps(
            {"approval_id": approval.approval_id, "session_id": approval.session_id, "cwd": cwd},
            sort_keys=True,
        )
        source = self._runtime.agents.get(approval.agent)
        origin = dict(getattr(source, "approvals", None) or {"platform": "console"})
        started = await self._runtime.start(
            resume_agent_name(approval.agent),
            asked,
            requester=approval.requester,
            origin=origin,
            wait=False,
            idempotency=(IDEMPOTENCY_SCOPE, approval.approval_id, asked),
        )
        self._wake()
        return {"resume_run_id": started.run_id}


def resume_agents(agents: Sequence[Agent], configs: Mapping[str, ResumeConfig]) -> list[Agent]:
    """The resume agents of the `agents` that have a resume config."""
    return [resume_agent(agent, configs[agent.name]) for agent in agents if agent.name in configs]
