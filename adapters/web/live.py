"""Live text: a run's answer shown on its console page while the model writes it.

The engine reports each piece of a streamed answer as the ``model_text`` checkpoint
point (`runtime.ModelRequest.on_text`). `LiveText` observes the points of this process:
it keeps the text of each run's turn in progress, in memory, and passes every piece to
the viewers of that run's page, who follow

    GET /runs/{run_id}/stream    server-sent events (``text/event-stream``)

with the run page's own access check: a signed-out visitor gets 401, a person who may
not see the run 404, and neither any event. Events, each a JSON ``data`` line:

- ``reset`` ``{"text": ...}``: the turn's text so far (on connecting, and when a model
  call starts over); it replaces what the page shows;
- ``text`` ``{"text": ...}``: the next piece;
- ``committed`` ``{}``: the turn was recorded, or the run changed otherwise (its
  status, turns, tickets: read every 2 seconds, so on every replica): reload for the
  durable record;
- ``ended`` ``{}``: this process stopped driving the run, or is shutting down.

``?seen=`` is the state the page showed (`state_of`); a change since then is sent at
once as ``committed``. The run page follows the stream instead of refreshing itself
every 2 seconds (without scripts it still does).

The text is a preview, never a record: nothing of it is stored, a turn that fails or
is retried drops it, and the run page shows what was committed. Only the process
driving a run has its pieces; a viewer whose page another replica serves sees the
answer when the turn commits (the stream reads the run's state from the database).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from aiohttp import web

from runtime import Actor, RunNotFound, RunResult, Runtime

EventKind = Literal["reset", "text", "committed", "ended"]
Event = tuple[EventKind, str]


class Observer(Protocol):
    """An observer of the runtime's checkpoint points (``Runtime(checkpoint=...)``)."""

    def __call__(self, point: str, info: dict[str, Any]) -> None:
        """Take one point."""
        ...


KEEPALIVE_SECONDS = 15.0
"""Seconds between comments that keep an idle stream open through proxies."""
POLL_SECONDS = 2.0
"""Seconds between two reads of a watched run's state (its status, turns, tickets)."""


class Viewers(Protocol):
    """Who is signed in to the console (the console's session check)."""

    async def current(self, request: web.Request) -> tuple[Any, Actor | None]:
        """The request's session and its actor (None unless signed in)."""
        ...


@dataclass
class _Turn:
    turn: int
    attempt: int
    pieces: list[str] = field(default_factory=list)
    size: int = 0


class LiveText:
    """The text of the turns this process's models are writing, and who watches them.

    Args:
        max_chars: Characters kept per run; a longer preview stops growing (its
            viewers still get every piece).
        max_runs: Runs kept at once; the least recently written is forgotten first.
        max_queued: Events a slow viewer may fall behind by before its stream ends
            (with ``ended``: its page reloads).
    """

    def __init__(
        self, *, max_chars: int = 200_000, max_runs: int = 1_000, max_queued: int = 1_000
    ) -> None:
        self.max_chars = max_chars
        self.max_runs = max_runs
        self.max_queued = max_queued
        self._turns: OrderedDict[str, _Turn] = OrderedDict()
        self._viewers: dict[str, set[asyncio.Queue[Event]]] = {}
        self.closed = False

    # -- the runtime's points ------------------------------------------------------------
    def observing(self, inner: Observer | None) -> Observer:
        """A checkpoint observer that calls `inner` (if any), then `observe`."""

        def observe(point: str, info: dict[str, Any]) -> None:
            if inner is not None:
                inner(point, info)
            self.observe(point, info)

        return observe

    def observe(self, point: str, info: dict[str, Any]) -> None:
        """Take a runtime checkpoint point (``model_text``, ``model_call_committed``,
        ``run_driven``); others are ignored."""
        run_id = info.get("run_id")
        if not isinstance(run_id, str):
            return
        if point == "model_text":
            self._piece(run_id, info)
        elif point == "model_call_committed":
            self._turns.pop(run_id, None)
            self._publish(run_id, ("committed", "{}"))
        elif point == "run_driven":
            self._turns.pop(run_id, None)
            self._publish(run_id, ("ended", "{}"))

    def _piece(self, run_id: str, info: dict[str, Any]) -> None:
        text = str(info.get("text") or "")
        turn, attempt = int(info.get("turn") or 0), int(info.get("attempt") or 0)
        current = self._turns.get(run_id)
        if current is None or (current.turn, current.attempt) != (turn, attempt):
            current = _Turn(turn, attempt)
            self._turns[run_id] = current
            if len(self._turns) > self.max_runs:
                self._turns.popitem(last=False)
            self._publish(run_id, ("reset", json.dumps({"text": ""})))
        self._turns.move_to_end(run_id)
        if current.size < self.max_chars:
            kept = text[: self.max_chars - current.size]
            current.pieces.append(kept)
            current.size += len(kept)
        self._publish(run_id, ("text", json.dumps({"text": text})))

    def _publish(self, run_id: str, event: Event) -> None:
        for queue in list(self._viewers.get(run_id, ())):
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                # Too far behind: its stream ends and its page reloads.
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
                queue.put_nowait(("ended", "{}"))

    # -- viewers ------------------------------------------------------------------------
    def text_of(self, run_id: str) -> str:
        """The text of `run_id`'s turn in progress so far ('' when none)."""
        current = self._turns.get(run_id)
        return "".join(current.pieces) if current is not None else ""

    @property
    def watching(self) -> int:
        """Viewers connected now."""
        return sum(len(queues) for queues in self._viewers.values())

    @contextlib.contextmanager
    def watch(self, run_id: str) -> Iterator[asyncio.Queue[Event]]:
        """A queue of `run_id`'s events from now on, its first the text so far."""
        queue: asyncio.Queue[Event] = asyncio.Queue(self.max_queued)
        queue.put_nowait(("reset", json.dumps({"text": self.text_of(run_id)})))
        if self.closed:
            queue.put_nowait(("ended", "{}"))
        self._viewers.setdefault(run_id, set()).add(queue)
        try:
            yield queue
        finally:
            queues = self._viewers.get(run_id)
            if queues is not None:
                queues.discard(queue)
                if not queues:
                    del self._viewers[run_id]

    def close(self) -> None:
        """End every viewer's stream (the process is shutting down)."""
        self.closed = True
        for run_id in list(self._viewers):
            self._publish(run_id, ("ended", "{}"))


def state_of(run: RunResult) -> str:
    """What a run page shows changes only when this does (status, turns, tickets, saves)."""
    saved = run.updated_at.isoformat() if run.updated_at is not None else ""
    return f"{run.status.value}/{run.turns}/{len(run.pending)}/{saved}"


def add_live_routes(
    app: web.Application,
    runtime: Runtime,
    viewers: Viewers,
    live: LiveText,
    *,
    poll_seconds: float = POLL_SECONDS,
) -> None:
    """Add ``GET /runs/{run_id}/stream`` to `app` (see the module's description).

    Args:
        app: The console's application.
        runtime: Whose runs are shown (the access check).
        viewers: The console's sessions.
        live: This process's live text.
        poll_seconds: How often a stream reads its run's state from the database.
    """

    async def stream(request: web.Request) -> web.StreamResponse:
        _, actor = await viewers.current(request)
        if actor is None:
            raise web.HTTPUnauthorized(text="Sign in to the console first.")
        run_id = request.match_info["run_id"]
        try:
            shown = await runtime.get(run_id, viewer=actor)
        except RunNotFound:
            raise web.HTTPNotFound(text=f"There is no run {run_id!r}.") from None
        seen = request.query.get("seen") or state_of(shown)
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-store",
                "X-Accel-Buffering": "no",  # nginx: pass events on as they come
            }
        )
        await response.prepare(request)
        quiet = 0.0
        with live.watch(run_id) as queue:
            while True:
                try:
                    kind, data = await asyncio.wait_for(queue.get(), poll_seconds)
                except TimeoutError:
                    # Whichever replica drives the run: a recorded change reloads the page.
                    try:
                        now = state_of(await runtime.get(run_id, viewer=actor))
                    except RunNotFound:
                        now = ""
                    if now != seen:
                        kind, data = "committed", "{}"
                    else:
                        quiet += poll_seconds
                        if quiet >= KEEPALIVE_SECONDS:
                            quiet = 0.0
                            await response.write(b": keepalive\n\n")
                        continue
                quiet = 0.0
                await response.write(f"event: {kind}\ndata: {data}\n\n".encode())
                if kind in ("committed", "ended"):
                    break
        await response.write_eof()
        return response

    async def closing(_: web.Application) -> None:
        live.close()

    app.router.add_get("/runs/{run_id}/stream", stream)
    app.on_shutdown.append(closing)
