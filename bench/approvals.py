"""The approvals API under load: requests/s, answer p50/p99 and request -> Slack card.

Usage::

    python bench/approvals.py                          # 300 requests per kind, 1, 10, 50 requesters
    python bench/approvals.py --requests 500 --levels 10,50
    python bench/approvals.py --requests 20 --levels 10 --pacing 1    # cards paced as serve paces
    python bench/approvals.py --requests 20 --levels 10 --pacing 1 --overlap

One process holds the server: `signoff serve`'s own process (`bot.bootstrap.build_service`)
with its worker, outbox and HTTP application (every route and middleware) listening on
127.0.0.1, on a SQLite file store committing with ``synchronous=full``, the Slack edge in
HTTP mode, and an agents file (``SIGNOFF_AGENTS``) declaring one external agent:

* ``lookup_*`` tools are allowed by a rule: the request is answered ``allowed`` at once;
* ``refund`` asks: the request is answered ``pending`` with its ticket, whose card the
  outbox posts to a Slack channel (``approvals = { platform = "slack", ... }``).

The Slack Web API is the tests' fake (`tests/adapters/slack/fake_slack.py`) in a process
of its own, so its work is not counted as the server's. Requesters in a third process
(aiohttp, `level` at a time, each sending its next request when the previous one is
answered) ``POST /api/approvals`` with a bearer token and a distinct ``Idempotency-Key``
per request. Each level runs on a fresh database, after a few requests of each kind to
warm up, in this order:

* ``allowed``: `--requests` calls a rule allows (201, ``allowed``); they post nothing (an
  external approval's run ending is not announced in chat), so ``--overlap`` changes
  nothing any more;
* ``pending``: `--requests` calls that ask (201, ``pending``); it ends when the fake
  Slack has received every card;
* ``replay``: the pending requests again, same keys and bodies (200, the same approval).

Figures per kind: ``req/s`` (requests answered per second of wall clock, first sent to
last answered), ``p50/p99`` from sending a request to its answer, for ``pending``
``card p50/p99`` (from sending the request until the fake Slack received the
``chat.postMessage`` of its card; ``time.perf_counter``, one clock for every process of
the machine), ``last post s`` (from the first request until the last card or message was
posted), ``server CPU ms/req`` (the server process's CPU over the requests, and in
brackets until the last post), ``req/fsync`` (requests per commit synced to the SQLite
file, likewise) and the requesters' own CPU. Then, per level, the ratios between the
kinds, with what the disk allowed just before (plain `sqlite3` commits per second, WAL,
FULL) and the load average after. ``--transactions N`` instead sends N requests of each
kind one at a time and counts the store's transactions per request.

By default the outbox does not pace a channel's messages (``--pacing 0``), so the card
latency is signoff's own work. `signoff serve` posts at most one message per second to a
Slack channel (``--pacing 1``): there, the k-th post of a burst to one channel waits about
k seconds, whatever the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import multiprocessing
import os
import platform
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "adapters" / "slack"))

import aiohttp  # noqa: E402
from fake_slack import FakeSlack  # noqa: E402
from slack_clicks import percentile, serve_settings  # noqa: E402

from adapters.slack import ChannelLimiter, blocks  # noqa: E402
from bot import collector, event_loop  # noqa: E402
from bot.bootstrap import PACING, Parts, build_service  # noqa: E402
from bot.settings import Settings  # noqa: E402
from runtime.domain.notifications import (  # noqa: E402
    ApprovalRequested,
    Delivery,
    Notification,
    RunFinished,
)
from runtime.services.delivery import Notifier  # noqa: E402
from runtime.store.sql import SQLStore  # noqa: E402

AGENT = "orders-bot"
CHANNEL = "C0APPROVALS"
TOKEN = "bench-agent-token-0123456789"
AGENTS_FILE = f"""\
[agents.{AGENT}]
external = true
description = "An order assistant that runs elsewhere"
approvers = ["U1"]
approvals = {{ platform = "slack", channel = "{CHANNEL}" }}

[agents.{AGENT}.rules."lookup_*"]
permission = "allow"

[agents.{AGENT}.rules.refund]
permission = "ask"
"""
KINDS = ("allowed", "pending", "replay")


# -- the fake Slack, in a process of its own ------------------------------------------------


def fake_slack_process(conn: Connection) -> None:
    """Entry point of the fake Slack's process: serve, answer ``cards``, end at ``stop``."""
    asyncio.run(_fake_slack(conn))


async def _fake_slack(conn: Connection) -> None:
    fake = FakeSlack()
    conn.send(await fake.start())
    loop = asyncio.get_running_loop()
    try:
        while (ask := await loop.run_in_executor(None, conn.recv)) != "stop":
            if ask == "cards":
                conn.send(card_times(fake))
    finally:
        await fake.stop()


def card_times(fake: FakeSlack) -> dict[str, float]:
    """When the fake received the ``chat.postMessage`` of each card, by ticket id."""
    found: dict[str, float] = {}
    for call in fake.called("chat.postMessage"):
        posted = call.args.get("blocks") or []
        for block in json.loads(posted) if isinstance(posted, str) else posted:
            for element in block.get("elements", []) if block.get("type") == "actions" else []:
                ref = blocks.parse_ref(element.get("value"))
                if ref is not None:
                    found.setdefault(ref.ticket_id, call.at)
    return found


@dataclass
class FakeSlackProcess:
    """The fake Slack's process and the pipe that talks to it."""

    process: multiprocessing.process.BaseProcess
    conn: Connection
    api: str

    @classmethod
    def start(cls) -> FakeSlackProcess:
        ours, theirs = multiprocessing.get_context("spawn").Pipe()
        process = multiprocessing.get_context("spawn").Process(
            target=fake_slack_process, args=(theirs,), daemon=True
        )
        process.start()
        theirs.close()
        return cls(process, ours, ours.recv())

    def cards(self) -> dict[str, float]:
        self.conn.send("cards")
        answer: dict[str, float] = self.conn.recv()
        return answer

    def stop(self) -> None:
        self.conn.send("stop")
        self.process.join(timeout=30)
        self.conn.close()


# -- the server's side ----------------------------------------------------------------------


@dataclass
class Posts:
    """Slack's notifier as it is, counting what it posted: cards and finished messages
    (none for external approvals, whose runs' ends are not announced in chat)."""

    inner: Notifier
    cards: int = 0
    finished: int = 0
    last: dict[str, float] = field(default_factory=dict)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    def needs_ticket(self, note: Notification) -> bool:
        needs: bool = self.inner.needs_ticket(note)  # type: ignore[attr-defined]
        return needs

    async def deliver(self, note: Notification, delivery: Delivery) -> dict[str, Any] | None:
        ref = await self.inner.deliver(note, delivery)
        async with self._changed:
            if isinstance(note, ApprovalRequested):
                self.cards += 1
                self.last["cards"] = time.perf_counter()
            elif isinstance(note, RunFinished):
                self.finished += 1
                self.last["finished"] = time.perf_counter()
            self._changed.notify_all()
        return ref

    async def wait_for(self, cards: int, finished: int, within: float = 900) -> None:
        """Until at least `cards` cards and `finished` finished messages were posted."""
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: self.cards >= cards and self.finished >= finished),
                timeout=within,
            )


def request_body(kind: str, n: int) -> bytes:
    """A request of `kind` (``allowed`` or ``pending``), the `n`-th."""
    tool = "lookup_order" if kind == "allowed" else "refund"
    body = {
        "agent": AGENT,
        "tool": tool,
        "arguments": {"order_id": f"A-{n}", "amount": 249.0},
        "description": f"Order A-{n}: the customer asked",
    }
    return json.dumps(body).encode()


# -- the requesters, in a process of their own ----------------------------------------------


@dataclass
class Answers:
    """What the requesters saw: per key, when it was sent, its latency and its answer."""

    sent: dict[str, float]
    latency: dict[str, float]
    answers: dict[str, tuple[int, str, str, str | None]]
    first: float
    last: float
    cpu: float


def send_requests(url: str, requests: list[tuple[str, bytes]], level: int) -> Answers:
    """Entry point of the requesters' process: post every request with `level` requesters."""
    return asyncio.run(_send_requests(url, requests, level))


async def _send_requests(url: str, requests: list[tuple[str, bytes]], level: int) -> Answers:
    sent: dict[str, float] = {}
    latency: dict[str, float] = {}
    answers: dict[str, tuple[int, str, str, str | None]] = {}
    queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
    for item in requests:
        queue.put_nowait(item)
    connector = aiohttp.TCPConnector(limit=level)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def requester() -> None:
            while not queue.empty():
                key, body = queue.get_nowait()
                headers = {
                    "Authorization": f"Bearer {TOKEN}",
                    "Content-Type": "application/json",
                    "Idempotency-Key": key,
                }
                started = time.perf_counter()
                sent[key] = started
                async with http.post(url, data=body, headers=headers) as resp:
                    answer = await resp.json()
                    latency[key] = time.perf_counter() - started
                    answers[key] = (
                        resp.status,
                        str(answer.get("status")),
                        str(answer.get("approval_id")),
                        answer.get("ticket_id"),
                    )

        cpu0, first = time.process_time(), time.perf_counter()
        await asyncio.gather(*(requester() for _ in range(level)))
        last = time.perf_counter()
    return Answers(sent, latency, answers, first, last, time.process_time() - cpu0)


# -- one level ------------------------------------------------------------------------------


def check(answers: Answers, status: int, expected: str) -> None:
    """Every answer is `status` with the approval `expected`."""
    wrong = [(k, a) for k, a in answers.answers.items() if a[:2] != (status, expected)]
    if wrong:
        raise RuntimeError(f"{len(wrong)} answers not {status} {expected}, e.g. {wrong[0]}")


def figures(answers: Answers, cpu: float, syncs: int) -> dict[str, float]:
    """Throughput, latency, CPU and commits of one kind."""
    count = len(answers.latency)
    values = list(answers.latency.values())
    return {
        "requests": float(count),
        "per_s": count / (answers.last - answers.first),
        "p50": percentile(values, 0.5) * 1000,
        "p99": percentile(values, 0.99) * 1000,
        "cpu": cpu / count * 1000,
        "client_cpu": answers.cpu / count * 1000,
        "per_sync": count / syncs if syncs else float("nan"),
    }


@dataclass
class Served:
    """A served signoff: its approvals URL, store, card counter and fake Slack."""

    url: str
    store: SQLStore
    posts: Posts
    slack: FakeSlackProcess


def pacing_of(seconds: float) -> dict[str, float]:
    """The outbox's pacing with Slack's channels paced `seconds` apart (0: not paced).

    A platform left out of the map is not paced; one mapped to 0 would still be claimed
    one item per channel at a time.
    """
    others = {k: v for k, v in PACING.items() if k != "slack"}
    return {**others, "slack": seconds} if seconds > 0 else others


@contextlib.asynccontextmanager
async def serving(pacing: float, workers: int) -> AsyncIterator[Served]:
    """`signoff serve`'s process on a fresh SQLite file, with the fake Slack's process."""
    slack = FakeSlackProcess.start()
    loop = asyncio.get_running_loop()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            db, agents = Path(tmp) / "bench.db", Path(tmp) / "agents.toml"
            agents.write_text(AGENTS_FILE, encoding="utf-8")
            store = SQLStore.sqlite(db, synchronous="full")
            await store.migrate()
            settings = serve_settings(
                db,
                slack.api,
                workers,
                agents=agents,
                # `serve_settings` looks for work every 50 ms; `signoff serve` every 0.5 s
                # (commits wake the worker and the outbox at once).
                poll_seconds=Settings.model_fields["poll_seconds"].default,
                sqlite_synchronous="full",
                external_agents="declared",
                operator_token="bench-operator-token-0123456789",
                cookie_secret="bench-cookie-secret-0123456789abcdef",
                api_tokens=[{"token": TOKEN, "actor": "svc:orders-bot"}],
            )
            service = await build_service(
                settings,
                store=store,
                slack_limiter=ChannelLimiter(pacing),
                pacing=pacing_of(pacing),
                parts=Parts(discord=False),
            )
            posts = Posts(service.notifiers["slack"])
            service.notifiers["slack"] = posts
            try:
                url = await service.start() + "/api/approvals"
                yield Served(url, store, posts, slack)
            finally:
                await service.stop(grace_seconds=30)
                await store.close()
    finally:
        await loop.run_in_executor(None, slack.stop)


def raw_commits(directory: Path, seconds: float = 1.0) -> float:
    """What the disk allows: plain `sqlite3` commits per second (WAL, FULL, one small
    insert per transaction) on a file in `directory`."""
    conn = sqlite3.connect(directory / "raw.db", isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE raw (id INTEGER PRIMARY KEY, v TEXT)")
        done, began = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - began) < seconds:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO raw (v) VALUES (?)", ("x" * 100,))
            conn.execute("COMMIT")
            done += 1
        return done / elapsed
    finally:
        conn.close()


async def one_level(
    level: int,
    requests: int,
    pacing: float,
    workers: int,
    generator: Executor,
    *,
    overlap: bool = False,
    profile: str | None = None,
) -> dict[str, dict[str, float]]:
    """Serve a fresh signoff and send it `requests` of each kind with `level` requesters."""
    with tempfile.TemporaryDirectory() as tmp:
        disk = raw_commits(Path(tmp))
    async with serving(pacing, workers) as served:
        results = await _measure(
            served, level, requests, generator, overlap=overlap, profile=profile
        )
    results["machine"] = {"disk": disk, "load": os.getloadavg()[0]}
    return results


async def _measure(
    served: Served,
    level: int,
    requests: int,
    generator: Executor,
    *,
    overlap: bool = False,
    profile: str | None = None,
) -> dict[str, dict[str, float]]:
    loop = asyncio.get_running_loop()
    url, store, posts, slack = served.url, served.store, served.posts, served.slack

    async def send(batch: list[tuple[str, bytes]], kind: str = "") -> tuple[Answers, float, int]:
        profiler = cProfile.Profile() if profile and kind else None
        if profiler is not None:
            profiler.enable()
        cpu0, syncs0 = time.process_time(), store.syncs
        answers = await loop.run_in_executor(generator, send_requests, url, batch, level)
        cpu, syncs = time.process_time() - cpu0, store.syncs - syncs0
        if profiler is not None and profile:
            profiler.disable()
            profiler.dump_stats(f"{profile}.{kind}")
        return answers, cpu, syncs

    warm = [(f"warm-{k}-{n}", request_body(k, n)) for k in ("allowed", "pending") for n in range(5)]
    await send(warm)
    await posts.wait_for(5, 0)
    # As `signoff serve` does once it serves.
    collector.serving()

    allowed = [(f"allowed-{n}", request_body("allowed", n)) for n in range(requests)]
    cpu0, syncs0 = time.process_time(), store.syncs
    answers, cpu, syncs = await send(allowed, "allowed")
    check(answers, 201, "allowed")
    results = {"allowed": figures(answers, cpu, syncs)}
    allowed_first = answers.first
    del allowed_first  # nothing is posted for them
    results["allowed"].update(
        last_post=float("nan"),
        cpu_with_post=(time.process_time() - cpu0) / requests * 1000,
        per_sync_with_post=requests / (store.syncs - syncs0),
    )

    pending = [(f"pending-{n}", request_body("pending", n)) for n in range(requests)]
    cpu0, syncs0 = time.process_time(), store.syncs
    answers, cpu, syncs = await send(pending, "pending")
    check(answers, 201, "pending")
    await posts.wait_for(5 + requests, 0)
    cpu_with_cards = time.process_time() - cpu0
    syncs_with_cards = store.syncs - syncs0
    cards = await loop.run_in_executor(None, slack.cards)
    to_card = [
        cards[ticket] - answers.sent[key]
        for key, (_, _, _, ticket) in answers.answers.items()
        if ticket is not None and ticket in cards
    ]
    if len(to_card) != requests:
        raise RuntimeError(f"{len(to_card)} cards of {requests} pending requests")
    results["pending"] = {
        **figures(answers, cpu, syncs),
        "card_p50": percentile(to_card, 0.5) * 1000,
        "card_p99": percentile(to_card, 0.99) * 1000,
        "last_post": max(cards[t] for _, _, _, t in answers.answers.values() if t) - answers.first,
        "cpu_with_post": cpu_with_cards / requests * 1000,
        "per_sync_with_post": requests / syncs_with_cards if syncs_with_cards else float("nan"),
    }
    first_ids = {key: a[2] for key, a in answers.answers.items()}

    answers, cpu, syncs = await send(pending)
    check(answers, 200, "pending")
    if {key: a[2] for key, a in answers.answers.items()} != first_ids:
        raise RuntimeError("a replay answered another approval")
    results["replay"] = figures(answers, cpu, syncs)
    return results


# -- transactions per request ----------------------------------------------------------------


async def transactions(count: int, workers: int) -> None:
    """`count` requests of each kind, one at a time: the store's transactions per request.

    Counted as `bench/profile_serve.py` counts them (by the function that opened them);
    each pending request's card is posted before the next request is sent, so its
    transactions are counted with it. Reads include the worker's, outbox's and deadlines'
    looks for work in the meantime.
    """
    from profile_serve import count_transactions

    counts: Counter[str] = Counter()
    count_transactions(counts)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    print("| kind | write transactions per request, by opener | writes | reads | fsyncs |")
    print("|---|---|---:|---:|---:|")
    async with serving(0, workers) as served, aiohttp.ClientSession() as http:
        cards = finished = 0
        for kind in ("warm", "allowed", "pending", "replay"):
            counts.clear()
            syncs0 = served.store.syncs
            for n in range(count):
                asks = "pending" if kind in ("warm", "pending", "replay") else "allowed"
                key = f"{kind if kind != 'replay' else 'pending'}-{n}"
                body = request_body(asks, n)
                async with http.post(
                    served.url, data=body, headers={**headers, "Idempotency-Key": key}
                ) as resp:
                    answer = await resp.json()
                if answer.get("status") != asks:
                    raise RuntimeError(f"{kind}: answered {resp.status} {answer}")
                if kind in ("warm", "pending"):
                    cards += 1
                await served.posts.wait_for(cards, finished, within=30)
            if kind == "warm":
                continue
            writes = {k.removesuffix(" write"): v for k, v in counts.items() if k.endswith("write")}
            reads = sum(v for k, v in counts.items() if k.endswith(" read"))
            shown = ", ".join(f"`{k}` {v / count:g}" for k, v in sorted(writes.items()))
            print(
                f"| {kind} | {shown} | {sum(writes.values()) / count:g} | {reads / count:.1f} "
                f"| {(served.store.syncs - syncs0) / count:.1f} |",
                flush=True,
            )


# -- the command line -----------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="requests per kind and level")
    parser.add_argument("--levels", default="1,10,50", help="concurrent requesters per level")
    parser.add_argument("--workers", type=int, default=4, help="the Worker's concurrency")
    parser.add_argument(
        "--pacing",
        type=float,
        default=0.0,
        help="seconds between two messages to one Slack channel (serve: 1; default 0: none)",
    )
    parser.add_argument(
        "--event-loop",
        choices=["auto", "uvloop", "asyncio"],
        default="auto",
        help="the server's loop, as SIGNOFF_EVENT_LOOP chooses it (the requesters keep asyncio's)",
    )
    parser.add_argument(
        "--overlap",
        action="store_true",
        help="send the pending requests as soon as the allowed ones are answered, while the "
        "allowed calls' messages still wait for the channel",
    )
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="cProfile the server during the allowed and the pending requests of the last "
        "level into FILE.allowed and FILE.pending",
    )
    parser.add_argument(
        "--transactions",
        type=int,
        default=0,
        metavar="N",
        help="instead: N requests of each kind one at a time, the store's transactions per request",
    )
    return parser.parse_args()


async def main(args: argparse.Namespace) -> None:
    for name in list(os.environ):  # slack_sdk would route 127.0.0.1 through a proxy
        if name.upper() in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY") or name.startswith(
            ("SLACK_", "SIGNOFF_")
        ):
            del os.environ[name]
    if args.transactions:
        await transactions(args.transactions, args.workers)
        return
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"python {platform.python_version()}, {os.cpu_count()} cpus, load {load}, "
        f"synchronous=full, {args.requests} requests per kind and level, "
        f"Slack pacing {args.pacing:g} s, {event_loop.running_name()} event loop"
    )
    print(
        "| requesters | kind | req/s | p50 ms | p99 ms | card p50 ms | card p99 ms "
        "| last post s | server CPU ms/req (with its post) | req/fsync (with its post) "
        "| requesters' CPU ms/req |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    ratios = []
    with ProcessPoolExecutor(
        max_workers=1, mp_context=multiprocessing.get_context("spawn")
    ) as generator:
        generator.submit(time.sleep, 0).result()  # the requesters' process starts now
        levels = [int(x) for x in args.levels.split(",")]
        for level in levels:
            results = await one_level(
                level,
                args.requests,
                args.pacing,
                args.workers,
                generator,
                overlap=args.overlap,
                profile=args.profile if level == levels[-1] else None,
            )
            for kind in KINDS:
                print_row(level, kind, results[kind])
            ratios.append((level, results))
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nload at the end {load}\n")
    print(
        "| requesters | allowed / pending req/s | replay / pending req/s "
        "| pending / allowed p50 | card p50 / pending p50 | pending / allowed CPU "
        "| pending / allowed CPU, with their posts | disk commits/s | load |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for level, r in ratios:
        a, p, again = r["allowed"], r["pending"], r["replay"]
        print(
            f"| {level} | {a['per_s'] / p['per_s']:.2f}x | {again['per_s'] / p['per_s']:.2f}x "
            f"| {p['p50'] / a['p50']:.2f}x | {p['card_p50'] / p['p50']:.2f}x "
            f"| {p['cpu'] / a['cpu']:.2f}x "
            f"| {p['cpu_with_post'] / a.get('cpu_with_post', float('nan')):.2f}x "
            f"| {r['machine']['disk']:.0f} | {r['machine']['load']:.1f} |"
        )


def print_row(level: int, kind: str, f: dict[str, float]) -> None:
    """One table row."""
    card = f"{f['card_p50']:.1f} | {f['card_p99']:.1f}" if "card_p50" in f else " | "
    card += f" | {f['last_post']:.2f}" if "last_post" in f else " | "
    cpu, sync = f"{f['cpu']:.2f}", f"{f['per_sync']:.2f}"
    if "cpu_with_post" in f:
        cpu += f" ({f['cpu_with_post']:.2f})"
        sync += f" ({f['per_sync_with_post']:.2f})"
    print(
        f"| {level} | {kind} | {f['per_s']:.0f} | {f['p50']:.1f} | {f['p99']:.1f} "
        f"| {card} | {cpu} | {sync} | {f['client_cpu']:.2f} |",
        flush=True,
    )


if __name__ == "__main__":
    arguments = parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        event_loop.run(main(arguments), arguments.event_loop)
