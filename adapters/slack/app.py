"""The Slack edge: a slack-bolt `AsyncApp` that starts runs and records decisions.

Starting runs (the run's thread is the Slack thread; a new request in a thread that
already had a run continues that conversation with the same agent):

- the slash command (``/signoff refunds refund order A-1``; the first word names the
  agent, else the default agent runs): the bot posts the request in the channel and the
  run lives in that message's thread;
- an ``@signoff refunds ...`` mention in a channel, and a direct message.

Mentions and DMs are stored as runs *before* Slack gets its 200 (a listener middleware
does it), so a failure makes Slack retry, and a retry (same ``event_id``) starts nothing
new.

Decisions (buttons, modals) follow one path, so no click is lost, doubled or accepted
from someone who may not decide:

1. the signature and timestamp are verified on the raw bytes (401 otherwise, nothing is
   parsed), then the body is read once and its shape checked (400 for a signed body
   that is not a Slack payload);
2. the button's value names the ticket and its correlation token, nothing else;
3. the clicker becomes an `Actor` whose ``group:`` memberships Slack vouched for;
4. `Runtime.accept` checks the decision and stores it durably in one transaction (a
   repeated delivery is recognised by its ``trigger_id`` and stored once), then
   ``ack()``; a refusal is acknowledged and explained in an ephemeral message (who may
   decide, already decided, expired ...);
5. the serving process applies it asynchronously; the runtime's ``decided`` notification
   makes `SlackNotifier` update the card.

Clicks on signoff's buttons over HTTP go straight to their listener (`on_button`), the
same one bolt calls in Socket Mode: they are the requests a person waits on, and bolt's
dispatch cost about as much as checking and storing one. Everything else (commands,
events, modals) is dispatched by bolt.

Nothing here reads ``SLACK_*`` environment variables: the Web API client is built from
`SlackConfig` (its base URL included) and bolt is constructed with those variables
hidden, so it cannot turn on OAuth or pick up other credentials by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import html
import logging
import os
import re
import weakref
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, assert_never

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.respond.async_respond import AsyncRespond
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import blocks, ingress, modals
from adapters.slack.blocks import TicketRef
from adapters.slack.config import SlackConfig
from adapters.slack.directory import Directory
from adapters.slack.linking import EmailLinker
from adapters.slack.refusals import batch_text, refusal_text
from runtime import (
    MAX_GRANT_HOURS,
    Abort,
    Accepted,
    Actor,
    ActorSource,
    Agent,
    Allow,
    Answer,
    AnswerKind,
    BatchAccepted,
    Decidable,
    Deny,
    EditForm,
    GrantRequest,
    IdempotencyConflict,
    InputData,
    Refusal,
    RefusalReason,
    Refused,
    RemoteInput,
    Resolve,
    ResumeTicket,
    Retry,
    RunResult,
    Runtime,
    SignoffError,
    StorageError,
    ToolPermission,
    Uncertain,
)
from runtime.edges import REQUESTER_GROUPS, parse_result

log = logging.getLogger("signoff.slack")

EVENTS_PATH = "/slack/events"
SOURCE = "slack"
COMMAND_SCOPE = "slack:command"
_MENTIONS = re.compile(r"^\s*(?:<@[A-Z0-9]+(?:\|[^>]*)?>[\s,:]*)+")
_ACTION_PATTERN = re.compile(r"^signoff\.")
_BUTTON_ANSWERS: dict[str, Answer] = {
    blocks.ACTION_ALLOW: Allow(),
    blocks.ACTION_DENY: Deny(),
    blocks.ACTION_RETRY: Retry(),
    blocks.ACTION_ABORT: Abort(),
    blocks.ACTION_ALLOW_RUN: Allow(grant=GrantRequest(scope="run")),
}
# Buttons that open a modal: the kind of answer the modal will send.
_FORM_KINDS: dict[str, AnswerKind] = {
    blocks.ACTION_DENY_REASON: "deny",
    blocks.ACTION_ANSWER: "input",
    blocks.ACTION_RESOLVE: "resolve",
    blocks.ACTION_ALLOW_THREAD: "allow",
    blocks.ACTION_EDIT: "allow",
}

OnChange = Callable[[], None]
_EDGES: weakref.WeakKeyDictionary[AsyncApp, _SlackEdge] = weakref.WeakKeyDictionary()
"""The listeners of each bolt app `build_slack_app` made (`add_slack_routes` answers
button clicks with them directly)."""


@contextlib.contextmanager
def _slack_environment_hidden() -> Iterator[None]:
    """Hide ``SLACK_*`` variables while bolt is constructed (it reads them on its own)."""
    names = [key for key in os.environ if key.upper().startswith("SLACK_")]
    hidden = {key: os.environ.pop(key) for key in names}
    try:
        yield
    finally:
        os.environ.update(hidden)


def build_client(config: SlackConfig) -> AsyncWebClient:
    """The Web API client: the bot token and base URL of `config`, nothing from the environment."""
    return AsyncWebClient(
        token=config.bot_token,
        base_url=config.api_base_url,
        timeout=max(1, int(config.timeout_seconds)),
    )


def build_slack_app(
    runtime: Runtime,
    config: SlackConfig,
    on_change: OnChange,
    *,
    client: AsyncWebClient | None = None,
    directory: Directory | None = None,
) -> AsyncApp:
    """The bolt app with signoff's listeners (slash command, mentions, DMs, buttons, modals).

    Args:
        runtime: Where runs start and decisions are received.
        config: Credentials and options.
        on_change: Called after a run was started or a decision stored (wakes the worker).
        client: The Web API client (default: `build_client(config)`).
        directory: Resolves approver groups (default: one over `client`).
    """
    web_client = client or build_client(config)
    with _slack_environment_hidden():
        app = AsyncApp(
            name="signoff",
            client=web_client,
            signing_secret=config.signing_secret,
            # The answer to Slack is sent when a listener returns (not polled for): every
            # listener acknowledges as soon as its decision is stored, and leaves what
            # comes after (telling a refused clicker) to a background task.
            process_before_response=True,
            request_verification_enabled=True,
            url_verification_enabled=True,
            ignoring_self_events_enabled=True,
        )
    if app.oauth_flow is not None:  # cannot happen with the environment hidden
        raise RuntimeError("bolt turned on OAuth; signoff's Slack app is single-workspace")
    edge = _SlackEdge(
        runtime,
        config,
        on_change,
        directory
        or Directory(web_client, ttl=config.group_cache_seconds, named=config.approver_groups),
        web_client,
    )
    _EDGES[app] = edge
    app.command(config.command)(edge.on_command)
    app.event("app_mention", middleware=[edge.start_from_event])(edge.acknowledged)
    app.event("message", middleware=[edge.start_from_event])(edge.acknowledged)
    app.action(_ACTION_PATTERN)(edge.on_button)
    for callback_id in modals.VIEWS:
        app.view(callback_id)(edge.on_view)
    return app


def add_slack_routes(
    app: web.Application, bolt: AsyncApp, *, signing_secret: str, path: str = EVENTS_PATH
) -> None:
    """Serve Slack's requests (commands, events, interactions) at ``POST path``.

    The signature is checked on the raw bytes first (401), then the body's shape (400,
    see `adapters.slack.ingress`); only then does bolt dispatch it.
    """
    verifier = SignatureVerifier(signing_secret)
    edge = _EDGES.get(bolt)

    async def slack_events(request: web.Request) -> web.Response:
        body = await request.read()
        if not ingress.authentic(verifier, body, request.headers):
            return web.json_response({"error": "invalid request"}, status=401)
        try:
            parsed = ingress.parse(body, request.content_type)
        except ingress.MalformedRequest as exc:
            log.info("refused a signed Slack request: %s", exc)
            return web.json_response(
                {"error": "malformed_request", "message": str(exc)}, status=400
            )
        if edge is not None and parsed.interaction:
            try:
                answer = await edge.answer_button(parsed.payload)
            except StorageError as exc:
                log.error("could not store a Slack button click: %s", exc)
                answer = BoltResponse(
                    status=503, body={"error": "storage_unavailable"}, headers={"Retry-After": "2"}
                )
            except Exception:
                log.exception("a Slack button click could not be handled")
                answer = BoltResponse(status=500, body="")
            if answer is not None and answer.status < 500 and not answer.body:
                # A plain ack, as bolt would answer it, without converting its response.
                return web.Response(status=answer.status, text="", charset="utf-8")
        else:
            answer = None
        if answer is None:
            answer = await bolt.async_dispatch(
                AsyncBoltRequest(
                    body=parsed.text, query=request.query_string, headers=dict(request.headers)
                )
            )
        if answer.status >= 500 and answer.status != 503:
            # bolt answers 500 when a middleware raised (it logged the traceback). Ours
            # answer a failed store with a 503 themselves (passed on, so Slack retries),
            # so this is a signed body that could not be handled; nothing was stored.
            return web.json_response(
                {"error": "malformed_request", "message": "this request cannot be handled"},
                status=400,
            )
        return await to_aiohttp_response(answer)

    app.router.add_post(path, slack_events)


def thread_key(channel: str, thread_ts: str) -> str:
    """The runtime thread id of a Slack thread."""
    return f"slack:{channel}:{thread_ts}"


def unescape(text: str) -> str:
    """Undo Slack's escaping of ``&``, ``<`` and ``>`` in message text."""
    return html.unescape(text) if "&" in text else text


def _fingerprint(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def _delivery_id(body: Mapping[str, Any]) -> str:
    """Slack's id of one interaction: its ``trigger_id``, else a digest of the payload."""
    trigger = body.get("trigger_id")
    if isinstance(trigger, str) and trigger:
        return f"{body.get('type')}:{trigger}"
    actions = body.get("actions") or [{}]
    action = actions[0] if isinstance(actions, list) and actions else {}
    view = body.get("view") or {}
    return "digest:" + _fingerprint(
        str(body.get("type")),
        str((body.get("user") or {}).get("id")),
        str(action.get("action_id") if isinstance(action, Mapping) else ""),
        str(action.get("action_ts") if isinstance(action, Mapping) else ""),
        str(view.get("id") if isinstance(view, Mapping) else ""),
        str(view.get("hash") if isinstance(view, Mapping) else ""),
    )


def _field(value: Any, key: str) -> str | None:
    """``value[key]`` as text when `value` is an object that has it."""
    found = value.get(key) if isinstance(value, Mapping) else None
    return str(found) if found else None


def _where_clicked(body: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The channel and thread of the message a click or form came from, if known."""
    channel = _field(body.get("channel"), "id") or _field(body.get("container"), "channel_id")
    return channel, _field(body.get("message"), "thread_ts")


def _user(body: Mapping[str, Any]) -> tuple[str, str | None]:
    user = body.get("user") or {}
    if not isinstance(user, Mapping):
        return "", None
    name = user.get("name") or user.get("username")
    return str(user.get("id") or ""), str(name) if name else None


class _SlackEdge:
    """The listeners; each translates one Slack payload into one runtime call."""

    def __init__(
        self,
        runtime: Runtime,
        config: SlackConfig,
        on_change: OnChange,
        directory: Directory,
        client: AsyncWebClient,
    ) -> None:
        self._runtime = runtime
        self._config = config
        self._on_change = on_change
        self._directory = directory
        self._client = client
        self._background: set[asyncio.Task[None]] = set()
        self._linker = (
            EmailLinker(runtime, client, config.lookup_timeout_seconds)
            if config.link_by_email
            else None
        )

    # -- choosing the agent ------------------------------------------------------------
    def _usage(self) -> str:
        names = sorted(self._offered())
        command = self._config.command
        example = names[0] if names else "refunds"
        text = (
            f"Usage: `{command} <agent> <request>`, e.g. `{command} {example} refund order A-1`, "
            "or mention me with the same words, or send me a direct message."
        )
        if self._config.default_agent:
            text += f" Without an agent name, *{self._config.default_agent}* runs."
        agents = ", ".join(f"`{blocks.escape(n)}`" for n in names) or "none loaded"
        return f"{text}\nAgents: {agents}."

    def _offered(self) -> dict[str, Agent]:
        """The agents people may start (not those signoff starts itself)."""
        agents = self._runtime.agents
        return {n: a for n, a in agents.items() if not getattr(a, "internal", False)}

    def _choose(self, text: str, previous: str | None) -> tuple[str, str] | str:
        """(agent, request) for a request text, or the help text to answer instead."""
        request = text.strip()
        agents = self._offered()
        head, _, rest = request.partition(" ")
        if request.lower() in ("", "help"):
            return self._usage()
        named = head if head in agents else None
        named = named or next((a for a in agents if a.lower() == head.lower()), None)
        if named is not None:
            if not rest.strip():
                return f"What should *{blocks.escape(named)}* do?\n" + self._usage()
            return named, rest.strip()
        if head in self._runtime.agents:  # one signoff starts itself
            why = f"`{blocks.escape(head)}` is started by signoff itself, not by hand."
            return why + "\n" + self._usage()
        chosen = previous or self._config.default_agent
        if chosen is None or chosen not in agents:
            return f"No agent named `{blocks.escape(head)}`.\n" + self._usage()
        return chosen, request

    async def _start(
        self,
        agent: str,
        request: str,
        *,
        user: str,
        channel: str,
        thread_ts: str,
        idempotency: tuple[str, str],
    ) -> RunResult | None:
        """Start the run (or find the one this delivery started before); None if the
        delivery id was reused for another request."""
        scope, key = idempotency
        origin: dict[str, Any] = {
            "platform": SOURCE,
            "channel": channel,
            "thread_ts": thread_ts,
            "user": user,
        }
        groups = await self._starter_groups(user)
        if groups:
            origin[REQUESTER_GROUPS] = groups
        try:
            result = await self._runtime.start(
                agent,
                request,
                requester=user,
                thread_id=thread_key(channel, thread_ts),
                origin=origin,
                wait=False,
                idempotency=(scope, key, _fingerprint(agent, request)),
            )
        except IdempotencyConflict:
            log.warning("Slack delivery %s reused with another request; ignored", key)
            return None
        log.info(
            "started %s from Slack",
            agent,
            extra={"run_id": result.run_id, "channel": channel, "user": user},
        )
        self._on_change()
        return result

    async def _starter_groups(self, user: str) -> list[str]:
        """The named approver groups (``SIGNOFF_SLACK_APPROVER_GROUPS``) Slack says
        `user` is in, for the agent's policy; none when a look-up fails or times out."""
        named = [f"group:{name}" for name in self._config.approver_groups]
        if not named:
            return []
        try:
            async with asyncio.timeout(self._config.lookup_timeout_seconds):
                actor = await self._directory.actor(user, named)
        except TimeoutError:
            log.warning("Slack membership look-up for %s timed out; no groups", user)
            return []
        return sorted(actor.groups)

    # -- the slash command -------------------------------------------------------------
    async def on_command(
        self, ack: AsyncAck, command: dict[str, Any], client: AsyncWebClient
    ) -> None:
        """``/signoff [agent] request``: post the request, start its run in that thread."""
        user = str(command.get("user_id") or "")
        channel = str(command.get("channel_id") or "")
        text = unescape(str(command.get("text") or ""))
        words = text.split()
        if words[:1] == ["link"] and "link" not in self._runtime.agents:
            await ack(text=await self._link(user, words[1:]), response_type="ephemeral")
            return
        chosen = self._choose(text, None)
        if isinstance(chosen, str):
            await ack(text=chosen, response_type="ephemeral")
            return
        agent, request = chosen
        trigger = str(command.get("trigger_id") or "")
        if trigger and await self._runtime.started_by(COMMAND_SCOPE, trigger) is not None:
            # Slack retried a command we already started (X-Slack-Retry-Num): say nothing
            # twice.
            await ack()
            return
        try:
            posted = await client.chat_postMessage(
                channel=channel,
                text=f"<@{user}> asked *{blocks.escape(agent)}*: {blocks.escape(request)}"[:3000],
                unfurl_links=False,
            )
        except SlackApiError as exc:
            code = exc.response.get("error") if exc.response is not None else None
            await ack(
                text=f"I cannot post in this channel ({code or 'error'}). Invite me with "
                f"`/invite @signoff`, or send me a direct message.",
                response_type="ephemeral",
            )
            return
        thread_ts = str(posted["ts"])
        posted_channel = str(posted.get("channel") or channel)
        try:
            started = await self._start(
                agent,
                request,
                user=user,
                channel=posted_channel,
                thread_ts=thread_ts,
                idempotency=(COMMAND_SCOPE, trigger or thread_ts),
            )
        except SignoffError as exc:
            await ack(
                text=f"Could not start *{blocks.escape(agent)}*: {blocks.escape(str(exc))}",
                response_type="ephemeral",
            )
            return
        if started is not None and started.thread_id != thread_key(posted_channel, thread_ts):
            # A retry raced the first delivery past the check above: the run is the first
            # one's, in its thread; this second message is one too many.
            await self._delete(client, posted_channel, thread_ts)
        await ack()

    async def _link(self, user: str, words: Sequence[str]) -> str:
        """``/signoff link <code>``: link `user` to the person whose console showed the
        one-time code."""
        if len(words) != 1:
            return (
                f"Usage: `{self._config.command} link <code>`, with the code the console's "
                "Link page gives."
            )
        person = await self._runtime.identities.redeem_link_code(words[0], user)
        if person is None:
            return (
                ":warning: That link code is unknown, used or expired. Get a new one from the "
                "console's Link page. Nothing was changed."
            )
        return f":link: Your Slack account is now linked to `{blocks.escape(person)}`."

    async def _delete(self, client: AsyncWebClient, channel: str, ts: str) -> None:
        try:
            await client.chat_delete(channel=channel, ts=ts)
        except (SlackApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("could not delete a duplicate request message: %s", exc)

    # -- mentions and direct messages ----------------------------------------------------
    async def start_from_event(
        self, body: dict[str, Any], next: Callable[[], Any], client: AsyncWebClient
    ) -> BoltResponse | None:
        """Listener middleware: start the run *before* bolt acknowledges the event."""
        event = body.get("event") or {}
        if self._wanted(event):
            try:
                await self._start_from(body, event, client)
            except StorageError as exc:
                # Not stored: a non-2xx answer makes Slack deliver the event again.
                log.error("could not store a run started from Slack: %s", exc)
                return BoltResponse(
                    status=503, body={"error": "storage_unavailable"}, headers={"Retry-After": "2"}
                )
        await next()
        return None

    async def acknowledged(self) -> None:
        """The event listener proper: the middleware already did the work."""

    @staticmethod
    def _wanted(event: Mapping[str, Any]) -> bool:
        if event.get("subtype") or event.get("bot_id") or not event.get("user"):
            return False
        if event.get("type") == "app_mention":
            return True
        return event.get("type") == "message" and event.get("channel_type") == "im"

    async def _start_from(
        self, body: Mapping[str, Any], event: Mapping[str, Any], client: AsyncWebClient
    ) -> None:
        user = str(event["user"])
        channel = str(event.get("channel") or "")
        ts = str(event.get("ts") or "")
        thread_ts = str(event.get("thread_ts") or ts)
        text = unescape(_MENTIONS.sub("", str(event.get("text") or "")))
        earlier = await self._runtime.list_runs(thread_id=thread_key(channel, thread_ts), limit=1)
        chosen = self._choose(text, earlier[0].agent if earlier else None)
        if isinstance(chosen, str):
            await self._reply(client, channel, thread_ts, chosen)
            return
        agent, request = chosen
        event_id = str(body.get("event_id") or f"{channel}:{ts}")
        await self._start(
            agent,
            request,
            user=user,
            channel=channel,
            thread_ts=thread_ts,
            idempotency=("slack:event", event_id),
        )

    async def _reply(self, client: AsyncWebClient, channel: str, thread_ts: str, text: str) -> None:
        try:
            await client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=text)
        except (SlackApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("cannot reply in Slack channel %s: %s", channel, exc)

    # -- who is clicking -------------------------------------------------------------------
    def _actor_for(self, user: str, name: str | None) -> ActorSource:
        """The clicker, with the approver groups of the ticket Slack vouches for."""

        async def look_up(approvers: Sequence[str]) -> Actor:
            try:
                async with asyncio.timeout(self._config.lookup_timeout_seconds):
                    return await self._directory.actor(user, approvers, name=name)
            except TimeoutError:
                log.warning("Slack membership look-up for %s timed out; no groups", user)
                return Actor(id=user, platform=SOURCE, name=name)

        async def linked_then(approvers: Sequence[str], known: Actor | None) -> Actor:
            assert self._linker is not None
            await self._linker.link(user)
            return known if known is not None else await look_up(approvers)

        def actor(ticket: ResumeTicket | None) -> Actor | Awaitable[Actor]:
            approvers = ticket.approvers if ticket is not None else ()
            known = self._directory.known(user, approvers, name=name)
            if self._linker is not None and self._linker.needed(user):
                return linked_then(approvers, known)
            return known if known is not None else look_up(approvers)

        return actor

    async def _refuse(
        self,
        client: AsyncWebClient,
        respond: AsyncRespond | None,
        body: Mapping[str, Any],
        text: str,
    ) -> None:
        """Tell the clicker (only them) why nothing happened, after Slack got its answer."""
        task = asyncio.create_task(self._tell(client, respond, body, text))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _tell(
        self,
        client: AsyncWebClient,
        respond: AsyncRespond | None,
        body: Mapping[str, Any],
        text: str,
    ) -> None:
        user, _name = _user(body)
        channel, thread_ts = _where_clicked(body)
        if channel and user:
            arguments: dict[str, Any] = {"channel": channel, "user": user, "text": text}
            if thread_ts:
                arguments["thread_ts"] = thread_ts
            try:
                await client.chat_postEphemeral(**arguments)
                return
            except (SlackApiError, aiohttp.ClientError, OSError, TimeoutError) as error:
                log.warning("chat.postEphemeral failed (%s); using the response URL", error)
        if respond is not None:
            try:
                await respond(text=text, response_type="ephemeral", replace_original=False)
            except (aiohttp.ClientError, OSError, TimeoutError) as error:
                log.warning("cannot tell %s why their click was refused: %s", user, error)

    def _wording(self, refusal: Refusal) -> str:
        return refusal_text(
            refusal,
            self._config.approver_groups,
            console_url=self._config.console_url,
            command=self._config.command,
        )

    # -- buttons -----------------------------------------------------------------------------
    async def answer_button(self, body: dict[str, Any]) -> BoltResponse | None:
        """A click on a signoff button over HTTP, handed to `on_button` without bolt.

        Clicks are what Slack sends most under load, and a person waits on each; bolt's
        dispatch (a request object parsing the body again, its middleware chain, keyword
        injection) costs about as much as checking and storing the click. The signature
        was verified and the shape checked before this; `on_button` gets what bolt would
        give it for the same payload: its first action, the app's client, and a
        ``respond`` for the response URL. None: not a signoff button (bolt handles it).
        """
        if body.get("type") != "block_actions":
            return None
        action = body["actions"][0]  # `ingress.parse` checked: a list of objects
        if not _ACTION_PATTERN.match(action["action_id"]):
            return None
        ack = AsyncAck()  # type: ignore[no-untyped-call]  # bolt leaves __init__ untyped
        url = body.get("response_url")
        respond = (
            AsyncRespond(response_url=url, proxy=self._client.proxy, ssl=self._client.ssl)
            if isinstance(url, str) and url
            else None
        )
        await self.on_button(ack, body, action, self._client, respond)
        if ack.response is None:
            raise RuntimeError("a button click was not acknowledged")
        return ack.response

    async def on_button(
        self,
        ack: AsyncAck,
        body: dict[str, Any],
        action: dict[str, Any],
        client: AsyncWebClient,
        respond: AsyncRespond | None,
    ) -> None:
        """A signoff button: check and store durably, then acknowledge (or open a modal)."""
        action_id = str(action.get("action_id") or "")
        ref = blocks.parse_ref(action.get("value"))
        user, name = _user(body)
        if ref is None or action_id not in blocks.ACTIONS or not user:
            await ack()
            await self._refuse(client, respond, body, INVALID_BUTTON)
            return
        actor = self._actor_for(user, name)
        if action_id in blocks.BATCH_ACTIONS:
            await self._store_batch(ack, body, ref, action_id, actor, client, respond)
            return
        form = _FORM_KINDS.get(action_id)
        if form is None:
            await self._store(ack, body, ref, _BUTTON_ANSWERS[action_id], actor, client, respond)
            return
        checked = await self._runtime.may_answer(
            ref.ticket_id, form, actor, correlation=ref.correlation
        )
        await ack()
        match checked:
            case Refused(refusal):
                await self._refuse(client, respond, body, self._wording(refusal))
                return
            case Decidable(ticket):
                pass
            case _:
                assert_never(checked)
        channel, thread_ts = _where_clicked(body)
        where = replace(ref, channel=channel, thread_ts=thread_ts)
        if action_id == blocks.ACTION_EDIT:
            form_of = self._runtime.edit_form(ticket)
            if form_of is None:
                await self._refuse(client, respond, body, NOT_EDITABLE)
                return
            view: dict[str, Any] | None = modals.edit_modal(where, form_of)
        else:
            view = _modal_for(action_id, ticket, where)
        if view is None:
            await self._refuse(client, respond, body, INVALID_BUTTON)
            return
        try:
            await client.views_open(trigger_id=str(body.get("trigger_id") or ""), view=view)
        except (SlackApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("views.open failed: %s", exc, extra={"ticket_id": ref.ticket_id})
            await self._refuse(
                client, respond, body, ":warning: Could not open the form; please try again."
            )

    async def _store(
        self,
        ack: AsyncAck,
        body: Mapping[str, Any],
        ref: TicketRef,
        answer: Answer,
        actor: ActorSource,
        client: AsyncWebClient,
        respond: AsyncRespond | None,
        *,
        modal: bool = False,
    ) -> Refused | None:
        """Check and store the decision durably (`Runtime.accept`), then acknowledge.

        The stored ``reply`` says where to tell the clicker if the decision is refused
        when it is applied: the channel and thread of the card they clicked (a modal
        carries them in its metadata). A refusal is told at once, or, for a `modal`,
        returned unacknowledged so the modal can show it.
        """
        channel, thread_ts = _where_clicked(body)
        user, _name = _user(body)
        reply = {
            "channel": channel or ref.channel,
            "thread_ts": thread_ts or ref.thread_ts,
            "user": user,
            "message_ts": _field(body.get("container"), "message_ts"),
            "response_url": body.get("response_url"),
        }
        outcome = await self._runtime.accept(
            ref.ticket_id,
            answer,
            actor,
            correlation=ref.correlation,
            source=SOURCE,
            delivery_id=_delivery_id(body),
            reply={k: v for k, v in reply.items() if v},
        )
        match outcome:
            case Accepted(stored=True):
                await ack()
                self._on_change()
            case Accepted():
                await ack()
                log.info("duplicate Slack delivery for %s ignored", ref.ticket_id)
            case Refused() if modal:
                return outcome  # the modal shows it in place
            case Refused(refusal) if refusal.reason is not RefusalReason.STORAGE:
                await ack()
                await self._refuse(client, respond, body, self._wording(refusal))
            case Refused():
                # Not stored: say so, so the person clicks again (Slack sees an ack).
                log.error("could not store a Slack decision on %s", ref.ticket_id)
                await ack()
                await self._refuse(client, respond, body, self._wording(outcome.refusal))
            case _:
                assert_never(outcome)
        return None

    async def _store_batch(
        self,
        ack: AsyncAck,
        body: Mapping[str, Any],
        ref: TicketRef,
        action_id: str,
        actor: ActorSource,
        client: AsyncWebClient,
        respond: AsyncRespond | None,
    ) -> None:
        """ "Allow all N" / "Deny all N": one stored decision per call (`accept_batch`),
        then the ack; the clicker is told each call's outcome, and the batch message loses
        its buttons once something was recorded."""
        channel, thread_ts = _where_clicked(body)
        user, _name = _user(body)
        reply = {
            "channel": channel,
            "thread_ts": thread_ts,
            "user": user,
            "response_url": body.get("response_url"),
        }
        answer: Answer = Allow() if action_id == blocks.ACTION_ALLOW_ALL else Deny()
        outcome = await self._runtime.accept_batch(
            ref.ticket_id,
            ref.correlation,
            answer,
            actor,
            source=SOURCE,
            delivery_id=_delivery_id(body),
            reply={k: v for k, v in reply.items() if v},
        )
        await ack()
        match outcome:
            case Refused(refusal):
                await self._refuse(client, respond, body, self._wording(refusal))
                return
            case BatchAccepted():
                pass
            case _:
                assert_never(outcome)
        if outcome.stored:
            self._on_change()
        told = batch_text(answer.kind, outcome, self._config.approver_groups)
        self._later(self._tell(client, respond, body, told))
        if outcome.stored:
            done = f"{'Allow' if answer.kind == 'allow' else 'Deny'} all recorded by <@{user}>"
            self._later(self._settle_batch(client, body, done))

    def _later(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _settle_batch(
        self, client: AsyncWebClient, body: Mapping[str, Any], line: str
    ) -> None:
        """Take the buttons off the batch message that was clicked."""
        channel, _thread = _where_clicked(body)
        message = body.get("message")
        ts = _field(body.get("container"), "message_ts") or _field(message, "ts")
        if not channel or not ts or not isinstance(message, Mapping):
            return
        kept = [
            dict(b)
            for b in message.get("blocks") or []
            if isinstance(b, Mapping) and b.get("type") != "actions"
        ]
        shown = [*kept, blocks.notice_section(line)]
        try:
            await client.chat_update(channel=channel, ts=ts, text=line, blocks=shown)
        except (SlackApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("could not update the batch message: %s", exc)

    # -- modals ------------------------------------------------------------------------------
    async def on_view(
        self, ack: AsyncAck, body: dict[str, Any], view: dict[str, Any], client: AsyncWebClient
    ) -> None:
        """A submitted signoff modal: convert, check (field errors stay in the modal), store."""
        ref = blocks.parse_ref(view.get("private_metadata"))
        user, name = _user(body)
        if ref is None or not user:
            await ack(
                response_action="update",
                view=modals.notice_view("Not recorded", ":warning: This form is not valid."),
            )
            return
        state = (view.get("state") or {}).get("values") or {}
        callback_id = view.get("callback_id")
        answer: Answer
        schema: Mapping[str, Any] | None = None
        if callback_id == modals.VIEW_DENY_REASON:
            reason = modals.submitted_text(state, modals.REASON_BLOCK).strip()
            answer = Deny(reason=reason or None)
        elif callback_id == modals.VIEW_GRANT_THREAD:
            hours = modals.read_hours(state, MAX_GRANT_HOURS)
            if isinstance(hours, str):
                await ack(response_action="errors", errors={modals.HOURS_BLOCK: hours})
                return
            answer = Allow(grant=GrantRequest(scope="thread", hours=hours))
        elif callback_id == modals.VIEW_EDIT:
            edit = await self._edit_form(ref.ticket_id)
            if edit is None:
                await ack(
                    response_action="update", view=modals.notice_view("Not recorded", NOT_EDITABLE)
                )
                return
            changes, errors = modals.read_edit(edit, state)
            if errors:
                await ack(response_action="errors", errors=errors)
                return
            answer = Allow(args=changes)
        elif callback_id == modals.VIEW_RESOLVE:
            text = modals.submitted_text(state, modals.RESULT_BLOCK)
            if not text.strip():
                await ack(
                    response_action="errors",
                    errors={modals.RESULT_BLOCK: "Describe what really happened."},
                )
                return
            answer = Resolve(result=parse_result(text))
        else:
            schema = await self._input_schema(ref.ticket_id)
            data, errors = modals.read_input(schema, state)
            if errors:
                await ack(response_action="errors", errors=errors)
                return
            answer = InputData(data=data)
        refused = await self._store(
            ack,
            body,
            ref,
            answer,
            self._actor_for(user, name),
            client,
            None,
            modal=True,
        )
        if refused is None:
            return
        refusal = refused.refusal
        if refusal.reason is RefusalReason.INVALID_ANSWER:
            await ack(
                response_action="errors", errors=modals.field_errors(schema, list(refusal.errors))
            )
        elif refusal.reason in (RefusalReason.INVALID_EDIT, RefusalReason.NOT_EDITABLE) and (
            edit_form := await self._edit_form(ref.ticket_id)
        ):
            await ack(
                response_action="errors", errors=modals.edit_errors(edit_form, list(refusal.errors))
            )
        else:
            await ack(
                response_action="update",
                view=modals.notice_view("Not recorded", self._wording(refusal)),
            )

    async def _edit_form(self, ticket_id: str) -> EditForm | None:
        try:
            ticket = await self._runtime.ticket(ticket_id)
        except SignoffError:
            return None  # the check that follows says what is wrong
        return self._runtime.edit_form(ticket)

    async def _input_schema(self, ticket_id: str) -> Mapping[str, Any] | None:
        try:
            ticket = await self._runtime.ticket(ticket_id)
        except SignoffError:
            return None  # the check that follows says what is wrong
        target = ticket.target
        return target.schema_ if isinstance(target, RemoteInput) else None


INVALID_BUTTON = ":warning: This button is not valid."
NOT_EDITABLE = ":warning: This call's arguments cannot be changed; allow or deny it as it is."


def _modal_for(action_id: str, ticket: ResumeTicket, ref: TicketRef) -> dict[str, Any] | None:
    """The modal a button opens, for the ticket it was checked against (None: no fit)."""
    target = ticket.target
    if action_id == blocks.ACTION_DENY_REASON and isinstance(target, ToolPermission | RemoteInput):
        return modals.deny_reason_modal(ref, target.tool)
    if action_id == blocks.ACTION_ANSWER and isinstance(target, RemoteInput):
        return modals.input_modal(ref, target.tool, target.prompt, target.schema_)
    if action_id == blocks.ACTION_RESOLVE and isinstance(target, Uncertain):
        return modals.resolve_modal(ref, target.tool, target.args)
    if action_id == blocks.ACTION_ALLOW_THREAD and isinstance(target, ToolPermission):
        return modals.grant_thread_modal(ref, target.tool)
    return None
