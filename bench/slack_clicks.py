"""Signed Slack button clicks against ``POST /slack/events``: clicks/s, p50/p99 to ack and apply.

Usage::

    python bench/slack_clicks.py                            # 300 clicks at 1, 10, 100 clickers
    python bench/slack_clicks.py --clicks 1000 --levels 10,100 --synchronous normal
    python bench/slack_clicks.py --card-edits 20            # click -> card edited, one channel
    python bench/slack_clicks.py --event-loop asyncio       # the server on asyncio's own loop

One process holds the server: `signoff serve`'s own process (`bot.bootstrap.build_service`)
on a SQLite file store, its worker (which applies received clicks and drives the runs they
make ready) and its HTTP application (every route and middleware, the real slack-bolt app
at ``/slack/events``) listening on 127.0.0.1, with the garbage collector tuned as
`signoff serve` tunes it once it listens. The Slack Web API is
the tests' fake (`tests/adapters/slack/fake_slack.py`; bolt calls only ``auth.test``,
once). Before each level, `--clicks` runs of a one-``ask``-tool agent (scripted model, no
network) are parked; then `--clicks` Allow clicks, one per ticket, each signed like Slack
signs them (``v0`` HMAC-SHA256, form-encoded ``payload=``), are sent by `level`
concurrent clickers in another process (aiohttp, each sending its next click when the
previous one is answered).

Figures per level:

* ``clicks/s``: clicks answered per second of wall clock (first sent to last answered);
* ``ack p50/p99``: from sending a click to its HTTP 200 (the signature verified, the
  runtime checked the decision and stored it durably, then acknowledged);
* ``ack p99 after the first wave`` and ``first wave max``: every clicker sends its first
  click at the same moment, on a new connection; the p99 of the other clicks, and the
  slowest ack of that first burst;
* ``applied p50/p99``: from sending a click to its decision being committed by the
  worker (the run is then ready to continue);
* ``all applied``: seconds from the first click until every decision was applied;
* ``all done``: seconds from the first click until every run finished (tool run, model
  answered), with how many did;
* ``server CPU ms/click``, ``clicks per fsync``, ``collector ms`` (time in the cyclic
  garbage collector during the clicks).

The clickers share the machine's CPUs with the server; the SQLite store commits with
``synchronous=full`` unless told otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import os
import platform
import statistics
import sys
import tempfile
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "adapters" / "slack"))

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402
from fake_slack import (  # noqa: E402
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlack,
    click_payload,
    interaction_body,
    signed_headers,
)

from adapters.slack import ChannelLimiter, blocks  # noqa: E402
from bot import collector, event_loop  # noqa: E402
from bot.bootstrap import Parts, build_service  # noqa: E402
from bot.settings import Settings, load_settings  # noqa: E402
from runtime import (  # noqa: E402
    Agent,
    RunStatus,
    ScriptedModel,
    final_reply,
    tool,
    tool_call_reply,
)
from runtime.store.sql import SQLStore  # noqa: E402


def build_agent() -> Agent:
    """One ``ask`` tool; the model calls it, then answers."""

    @tool(permission="ask", approvers=["*"])
    async def refund(order_id: str, amount: float) -> dict[str, Any]:
        """Refund an order."""
        return {"order_id": order_id, "amount": amount}

    def reply(request: Any) -> dict[str, Any]:
        if any(m.get("role") == "tool" for m in request.messages):
            return final_reply("Refunded.")
        return tool_call_reply(("refund", {"order_id": "A-1", "amount": 249.0}))

    return Agent("refunds", "Refund orders.", ScriptedModel(reply), tools=[refund])


def serve_settings(db: Path, api: str, workers: int, **values: Any) -> Settings:
    """`signoff serve`'s settings: Slack over HTTP at the fake, on a free port of 127.0.0.1."""
    return load_settings(
        overrides={
            "database_url": f"sqlite+aiosqlite:///{db}",
            "bind_host": "127.0.0.1",
            "port": 0,
            "workers": workers,
            "poll_seconds": 0.05,
            "slack_mode": "http",
            "slack_bot_token": BOT_TOKEN,
            "slack_signing_secret": SIGNING_SECRET,
            "slack_api_base_url": api,
            **values,
        }
    )


async def serve_on_localhost(app: web.Application) -> tuple[web.AppRunner, str]:
    """Serve `app` on a free port of 127.0.0.1: its runner and the events URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/slack/events"


class CollectorClock:
    """Wall time spent in the cyclic garbage collector while it is `running`."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.running = False
        self._began = 0.0
        gc.callbacks.append(self._observe)

    def _observe(self, phase: str, info: dict[str, Any]) -> None:
        if not self.running:
            return
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._began

    def measure(self) -> None:
        """Start counting from zero."""
        self.seconds, self.running = 0.0, True

    def stop(self) -> float:
        """Stop counting: the milliseconds counted."""
        self.running = False
        return self.seconds * 1000


COLLECTOR = CollectorClock()


def ack_figures(sent: dict[str, float], acks: dict[str, float], level: int) -> dict[str, float]:
    """p50/p99 of the acks, and p99 without the first wave (each clicker's first click).

    All `level` clickers send their first click at the same moment, on new connections:
    that wave is a burst of `level` clicks, the rest a steady closed loop.
    """
    order = sorted(sent, key=sent.__getitem__)
    later = [acks[t] for t in order[level:]] or [float("nan")]
    values = list(acks.values())
    return {
        "ack_p50": percentile(values, 0.5) * 1000,
        "ack_p99": percentile(values, 0.99) * 1000,
        "ack_p99_later": percentile(later, 0.99) * 1000,
        "first_wave_max": max(acks[t] for t in order[:level]) * 1000,
        "mean_ack": statistics.fmean(values) * 1000,
    }


def percentile(values: list[float], q: float) -> float:
    """The `q` quantile (0..1) of `values`, nearest rank."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def send_clicks(
    url: str, bodies: list[tuple[str, str]], level: int
) -> tuple[dict[str, float], dict[str, float], float, float]:
    """Entry point of the clickers' process: post every body with `level` clickers.

    Returns when each click was sent and its ack's seconds (by ticket), and the clock at
    the first click and at the last ack (``time.perf_counter``: the same clock in every
    process of this machine).
    """
    return asyncio.run(_send_clicks(url, bodies, level))


async def _send_clicks(
    url: str, bodies: list[tuple[str, str]], level: int
) -> tuple[dict[str, float], dict[str, float], float, float]:
    sent: dict[str, float] = {}
    acks: dict[str, float] = {}
    queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    for item in bodies:
        queue.put_nowait(item)
    connector = aiohttp.TCPConnector(limit=level)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def clicker() -> None:
            while not queue.empty():
                ticket_id, body = queue.get_nowait()
                headers = signed_headers(body)
                started = time.perf_counter()
                sent[ticket_id] = started
                async with http.post(url, data=body, headers=headers) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"click answered {resp.status}")
                acks[ticket_id] = time.perf_counter() - started

        first = time.perf_counter()
        await asyncio.gather(*(clicker() for _ in range(level)))
        last_ack = time.perf_counter()
    return sent, acks, first, last_ack


async def floor_level(level: int, clicks: int, generator: Executor) -> dict[str, float]:
    """The same clicks against an aiohttp handler that only reads the body and answers.

    What this machine's HTTP stack alone allows: the floor under the `one_level` figures.
    """

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/slack/events", answer)
    runner, url = await serve_on_localhost(app)
    bodies = [
        (
            f"tk_{n}",
            interaction_body(
                click_payload(blocks.ACTION_ALLOW, blocks.button_value(f"tk_{n}", "c" * 22))
            ),
        )
        for n in range(clicks)
    ]
    try:
        cpu0 = time.process_time()
        COLLECTOR.measure()
        loop = asyncio.get_running_loop()
        sent, acks, first, last_ack = await loop.run_in_executor(
            generator, send_clicks, url, bodies, level
        )
        cpu = time.process_time() - cpu0
        collected = COLLECTOR.stop()
    finally:
        await runner.cleanup()
    nan = float("nan")
    return {
        "clicks": float(clicks),
        "clicks_per_s": clicks / (last_ack - first),
        **ack_figures(sent, acks, level),
        "applied_p50": nan,
        "applied_p99": nan,
        "all_applied": nan,
        "all_done": nan,
        "applied": 0.0,
        "done": 0.0,
        "cpu_per_click": cpu / clicks * 1000,
        "clicks_per_sync": nan,
        "collector_ms": collected,
    }


async def one_level(
    level: int,
    clicks: int,
    synchronous: str,
    workers: int,
    generator: Executor,
    *,
    apply: bool = True,
    profile: str | None = None,
) -> dict[str, float]:
    """Park `clicks` runs, click Allow on each with `level` concurrent clickers.

    The clickers run in the `generator` process, so the server's event loop holds only
    the server's work. With `apply` False no worker runs: the clicks are only accepted
    (checked and stored), which isolates the path to the acknowledgement. With `profile`
    the server's work during the clicks is profiled (cProfile) into that file.
    """
    fake = FakeSlack()
    api = await fake.start()
    applied: dict[str, float] = {}
    all_in = asyncio.Event()

    def observe(point: str, info: dict[str, Any]) -> None:
        if point == "decision_committed":
            applied[str(info["ticket_id"])] = time.perf_counter()
            if len(applied) >= clicks:
                all_in.set()

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        store = SQLStore.sqlite(db, synchronous=synchronous)
        await store.migrate()
        service = await build_service(
            serve_settings(db, api, workers),
            agents=[build_agent()],
            store=store,
            checkpoint=observe,
            parts=Parts(worker=apply, outbox=False, deadlines=False, wake_ups=False, discord=False),
        )
        runtime = service.runtime
        origin = {"platform": "slack", "channel": "C1", "thread_ts": "1.1", "user": "U1"}
        values = []
        for _ in range(clicks):
            result = await runtime.start(
                "refunds", "refund A-1", requester="U1", origin=origin, wait=True
            )
            ticket = result.pending[0].ticket
            values.append(blocks.button_value(ticket.ticket_id, ticket.correlation))
        url = await service.start() + "/slack/events"

        bodies = [
            (
                blocks.parse_ref(value).ticket_id,  # type: ignore[union-attr]
                interaction_body(click_payload(blocks.ACTION_ALLOW, value, user="U1")),
            )
            for value in values
        ]
        # Warm up bolt (its one auth.test) outside the measurement: a foreign button.
        warm = interaction_body(click_payload(blocks.ACTION_ALLOW, "not ours", user="U1"))
        async with (
            aiohttp.ClientSession() as http,
            http.post(url, data=warm, headers=signed_headers(warm)) as resp,
        ):
            await resp.read()
        # As `signoff serve` does once it serves: start-up's objects frozen out of the
        # collector's scans, young collections less often.
        collector.serving()
        profiler = cProfile.Profile() if profile else None
        if profiler is not None:
            profiler.enable()
        cpu0, syncs0 = time.process_time(), store.syncs
        COLLECTOR.measure()
        loop = asyncio.get_running_loop()
        sent, acks, first, last_ack = await loop.run_in_executor(
            generator, send_clicks, url, bodies, level
        )
        cpu, syncs = time.process_time() - cpu0, store.syncs - syncs0
        collected = COLLECTOR.stop()
        if profiler is not None and profile is not None:
            profiler.disable()
            profiler.dump_stats(profile)
        deadline = time.monotonic() + (120 if apply else 0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_in.wait(), timeout=120 if apply else 0.01)
        all_applied = max(applied.values()) - first if applied else float("nan")
        while time.monotonic() < deadline:
            done = await runtime.list_runs(statuses=[RunStatus.DONE], limit=clicks + 1)
            if len(done) >= clicks:
                break
            await asyncio.sleep(0.05)
        all_done = time.perf_counter() - first
        if not apply:
            done = []
        await service.stop(grace_seconds=30)
        await store.close()
    await fake.stop()
    to_apply = [applied[t] - sent[t] for t in sent if t in applied] or [float("nan")]
    return {
        "clicks": float(clicks),
        "clicks_per_s": clicks / (last_ack - first),
        **ack_figures(sent, acks, level),
        "applied_p50": percentile(to_apply, 0.5) * 1000,
        "applied_p99": percentile(to_apply, 0.99) * 1000,
        "all_applied": all_applied,
        "all_done": all_done,
        "applied": float(len(applied)),
        "done": float(len(done)),
        "cpu_per_click": cpu / clicks * 1000,
        "clicks_per_sync": clicks / syncs if syncs else float("nan"),
        "collector_ms": collected,
    }


async def card_edits(clicks: int, synchronous: str, workers: int) -> dict[str, float]:
    """`clicks` cards in one channel, one concurrent click on each: click -> card edited.

    Like `signoff serve`: the outbox loop with the Slack notifier and the serve's
    per-channel pacing (one posted message per second per channel, shared through the
    database), woken when a notification is queued. The cards are posted first (at the
    paced rate, outside the measurement); then every card is clicked at once and the time
    from a click to the ``chat.update`` of its card, at the fake Slack, is measured.
    """
    fake = FakeSlack()
    api = await fake.start()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        store = SQLStore.sqlite(db, synchronous=synchronous)
        await store.migrate()
        service = await build_service(
            serve_settings(db, api, workers),
            agents=[build_agent()],
            store=store,
            worker_id="bench",
            slack_limiter=ChannelLimiter(0),
            parts=Parts(deadlines=False, discord=False),
        )
        runtime = service.runtime
        url = await service.start() + "/slack/events"
        origin = {"platform": "slack", "channel": "C1", "thread_ts": "1.1", "user": "U1"}
        for _ in range(clicks):
            await runtime.start("refunds", "refund A-1", requester="U1", origin=origin, wait=True)
        # The fake records calls; polling it is the only signal (one post per second).
        while len(fake.called("chat.postMessage")) < clicks:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        cards = {
            blocks.parse_ref(v).ticket_id: m  # type: ignore[union-attr]
            for m in fake.messages.values()
            for b in m.blocks
            if b.get("type") == "actions"
            for v in [b["elements"][0]["value"]]
        }
        sent: dict[str, float] = {}
        async with aiohttp.ClientSession() as http:
            warm = interaction_body(click_payload(blocks.ACTION_ALLOW, "not ours", user="U1"))
            async with http.post(url, data=warm, headers=signed_headers(warm)) as resp:
                await resp.read()

            async def click(ticket_id: str, card: Any) -> None:
                value = blocks.button_value(ticket_id, _correlation(card))
                message = {"ts": card.ts, "thread_ts": card.thread_ts, "text": card.text}
                body = interaction_body(
                    click_payload(blocks.ACTION_ALLOW, value, user="U1", message=message)
                )
                sent[ticket_id] = time.perf_counter()
                async with http.post(url, data=body, headers=signed_headers(body)) as resp:
                    await resp.read()

            first = time.perf_counter()
            await asyncio.gather(*(click(t, m) for t, m in cards.items()))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(fake.called("chat.update")) < clicks:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        edited: dict[str, float] = {}
        for call in fake.called("chat.update"):
            for ticket_id, card in cards.items():
                if call.args.get("ts") == card.ts and ticket_id not in edited:
                    edited[ticket_id] = call.at
        await service.stop(grace_seconds=30)
        await store.close()
    await fake.stop()
    latency = [edited[t] - sent[t] for t in sent if t in edited]
    return {
        "cards": float(clicks),
        "edited": float(len(edited)),
        "p50": percentile(latency, 0.5) * 1000,
        "p99": percentile(latency, 0.99) * 1000,
        "last": (max(edited.values()) - first) if edited else float("nan"),
    }


def _correlation(card: Any) -> str:
    for block in card.blocks:
        if block.get("type") == "actions":
            ref = blocks.parse_ref(block["elements"][0]["value"])
            assert ref is not None
            return ref.correlation
    raise AssertionError("a card without buttons")


def parse_args() -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clicks", type=int, default=300, help="clicks (and runs) per level")
    parser.add_argument("--levels", default="1,10,100", help="concurrent clickers per level")
    parser.add_argument("--synchronous", choices=["full", "normal"], default="full")
    parser.add_argument("--workers", type=int, default=4, help="the Worker's concurrency")
    parser.add_argument(
        "--event-loop",
        choices=["auto", "uvloop", "asyncio"],
        default="auto",
        help="the server's loop, as SIGNOFF_EVENT_LOOP chooses it (the clickers keep asyncio's)",
    )
    parser.add_argument(
        "--card-edits",
        type=int,
        default=0,
        metavar="N",
        help="instead: N cards in one channel, all clicked at once; click -> card edited",
    )
    parser.add_argument(
        "--accept-only",
        action="store_true",
        help="no worker: clicks are only checked and stored (the path to the ack)",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also send each level's clicks to a bare aiohttp handler (the HTTP floor)",
    )
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="cProfile the server during the clicks of the last level into FILE",
    )
    return parser.parse_args()


async def main(args: argparse.Namespace) -> None:
    for name in list(os.environ):  # slack_sdk would route 127.0.0.1 through a proxy
        if name.upper() in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY") or name.startswith("SLACK_"):
            del os.environ[name]
    if args.card_edits:
        print(
            f"python {platform.python_version()}, {os.cpu_count()} cpus, "
            f"synchronous={args.synchronous}, {args.card_edits} cards in one channel"
        )
        print("| cards clicked at once | edited | click -> edit p50 ms | p99 ms | last edit s |")
        print("|---:|---:|---:|---:|---:|")
        for _ in range(3):
            edits = await card_edits(args.card_edits, args.synchronous, args.workers)
            print(
                f"| {edits['cards']:.0f} | {edits['edited']:.0f} | {edits['p50']:.0f} "
                f"| {edits['p99']:.0f} | {edits['last']:.2f} |",
                flush=True,
            )
        return
    print(
        f"python {platform.python_version()}, {os.cpu_count()} cpus, "
        f"synchronous={args.synchronous}, {args.clicks} clicks per level, "
        f"{event_loop.running_name()} event loop"
    )
    print(
        "| clickers | clicks/s | ack p50 ms | ack p99 ms | ack p99 after the first wave ms "
        "| first wave max ms | applied p50 ms | applied p99 ms | all applied s | all done s "
        "| server CPU ms/click | clicks per fsync | collector ms |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    levels = [int(x) for x in args.levels.split(",")]
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as generator:
        generator.submit(time.sleep, 0).result()  # the clickers' process starts now
        for level in levels:
            figures = await one_level(
                level,
                args.clicks,
                args.synchronous,
                args.workers,
                generator,
                apply=not args.accept_only,
                profile=args.profile if level == levels[-1] else None,
            )
            print_level(level, figures)
            if args.floor:
                floor = await floor_level(level, args.clicks, generator)
                print_level(level, floor, "aiohttp floor")
                print(
                    f"|  | ack p99 / floor p99: {figures['ack_p99'] / floor['ack_p99']:.2f}x |",
                    flush=True,
                )


def print_level(level: int, figures: dict[str, float], what: str = "") -> None:
    """One table row."""
    name = f"{level}, {what}" if what else str(level)
    print(
        f"| {name} | {figures['clicks_per_s']:.0f} | {figures['ack_p50']:.1f} "
        f"| {figures['ack_p99']:.1f} | {figures['ack_p99_later']:.1f} "
        f"| {figures['first_wave_max']:.1f} | {figures['applied_p50']:.1f} "
        f"| {figures['applied_p99']:.1f} | {figures['all_applied']:.2f} "
        f"| {figures['all_done']:.2f} ({figures['done']:.0f}/{figures['clicks']:.0f}) "
        f"| {figures['cpu_per_click']:.2f} | {figures['clicks_per_sync']:.1f} "
        f"| {figures['collector_ms']:.1f} |",
        flush=True,
    )


if __name__ == "__main__":
    arguments = parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        event_loop.run(main(arguments), arguments.event_loop)
