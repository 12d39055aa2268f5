"""`LiveText`: the text of turns being written, kept per run and passed to its viewers."""

from __future__ import annotations

import asyncio
import json

from adapters.web.live import Event, LiveText


def piece(live: LiveText, run_id: str, text: str, turn: int = 1, attempt: int = 1) -> None:
    live.observe("model_text", {"run_id": run_id, "turn": turn, "attempt": attempt, "text": text})


def drained(queue: asyncio.Queue[Event]) -> list[tuple[str, str]]:
    found = []
    while not queue.empty():
        kind, data = queue.get_nowait()
        found.append((kind, json.loads(data).get("text", "")))
    return found


async def test_a_viewer_gets_the_text_so_far_then_each_piece_then_the_commit() -> None:
    live = LiveText()
    piece(live, "r1", "Hello")
    piece(live, "r2", "other run")
    with live.watch("r1") as queue:
        piece(live, "r1", ", world")
        live.observe("model_call_committed", {"run_id": "r1"})
        assert drained(queue) == [("reset", "Hello"), ("text", ", world"), ("committed", "")]
    assert live.text_of("r1") == "" and live.text_of("r2") == "other run"
    assert live.watching == 0


async def test_a_new_attempt_starts_the_preview_over() -> None:
    live = LiveText()
    piece(live, "r1", "Half an ans")
    with live.watch("r1") as queue:
        piece(live, "r1", "A whole", attempt=2)
        assert drained(queue) == [("reset", "Half an ans"), ("reset", ""), ("text", "A whole")]
    assert live.text_of("r1") == "A whole"


async def test_a_run_driven_to_its_end_is_forgotten_and_its_viewers_told() -> None:
    live = LiveText()
    piece(live, "r1", "partial")
    with live.watch("r1") as queue:
        live.observe("run_driven", {"run_id": "r1", "status": "failed"})
        assert drained(queue)[-1] == ("ended", "")
    assert live.text_of("r1") == ""


async def test_bounds_on_text_runs_and_slow_viewers() -> None:
    live = LiveText(max_chars=10, max_runs=2, max_queued=3)
    piece(live, "r1", "0123456789abc")
    assert live.text_of("r1") == "0123456789"
    piece(live, "r2", "two")
    piece(live, "r3", "three")
    assert live.text_of("r1") == "" and live.text_of("r3") == "three"
    with live.watch("r3") as queue:
        for _ in range(5):
            piece(live, "r3", ".")
        assert ("ended", "") in drained(queue)


async def test_closing_ends_every_stream_and_points_without_a_run_are_ignored() -> None:
    live = LiveText()
    live.observe("model_text", {"text": "no run"})
    live.observe("tool_returned", {"run_id": "r1"})
    assert live.text_of("r1") == ""
    with live.watch("r1") as first, live.watch("r2") as second:
        live.close()
        assert drained(first)[-1] == ("ended", "") and drained(second)[-1] == ("ended", "")
    with live.watch("r1") as late:
        assert drained(late)[-1] == ("ended", "")
