"""What the bot does with each interaction: slash commands, button clicks, modal forms.

The click path keeps every decision durable before it is acknowledged:

1. ``Runtime.accept`` checks the decision against the committed ticket and stores it as a
   resume command in one transaction, keyed by the interaction id, so a redelivered
   interaction is stored once; a refusal stores nothing and is answered ephemerally;
2. only then is the interaction answered ("recorded"); the worker applies the stored
   command exactly once, and the runtime's ``decided`` notification edits the card. A
   stored click refused when applied (the loser of two) is told so by a follow-up only
   its clicker sees.

Discord wants an answer within 3 seconds. Each interaction gets
``DiscordConfig.ack_budget_seconds`` to do its work; past that the bot defers (the user
sees "thinking…") and sends the answer as a follow-up once the work is done.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, assert_never, cast

import discord

from adapters.discord import cards, forms, modals, refusals
from adapters.discord.config import DiscordConfig, actor_of
from adapters.discord.custom_ids import Action, BatchClick, TicketClick, parse_modal
from runtime import (
    MAX_GRANT_HOURS,
    Abort,
    Accepted,
    Actor,
    Allow,
    Answer,
    AnswerKind,
    BatchAccepted,
    Decidable,
    Deny,
    GrantRequest,
    InputData,
    NotAwaiting,
    Refusal,
    Refused,
    RemoteInput,
    Resolve,
    ResumeTicket,
    Retry,
    RunNotFound,
    RunResult,
    Runtime,
    SignoffError,
    Unauthorized,
    UnknownTicket,
    classify,
)
from runtime.edges import REQUESTER_GROUPS, parse_result

log = logging.getLogger("signoff.discord")

# Buttons that open a form: the kind of answer the form will send.
_FORM_KINDS: dict[Action, AnswerKind] = {
    Action.REASON: "deny",
    Action.INPUT: "input",
    Action.RESULT: "resolve",
    Action.GRANT_THREAD: "allow",
    Action.EDIT: "allow",
}

FORM_BUDGET_SECONDS = 2.5
"""How long the check before opening a modal may take (a modal cannot follow a deferral)."""

Interaction = discord.Interaction[discord.Client]


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to one interaction.

    Attributes:
        content: The message text.
        embed: An embed (a REST dict), if any.
        ephemeral: Only the person who acted sees it.
    """

    content: str
    embed: dict[str, Any] | None = None
    ephemeral: bool = True


class Handlers:
    """Turns Discord interactions into runtime calls, and runtime answers into replies.

    Args:
        runtime: Starts runs and checks and stores decisions.
        wake: Tells the worker there is something to do (a run queued, a click stored).
        config: Role groups, console URL and the answer budget.
        acked: Told, for each decision (one call's, a form's or a batch's), how long it
            took to acknowledge (``discord``, seconds from the interaction reaching the
            handler to its first answer).
    """

    def __init__(
        self,
        runtime: Runtime,
        wake: Callable[[], None],
        config: DiscordConfig,
        *,
        acked: Callable[[str, float], None] | None = None,
    ):
        self._runtime = runtime
        self._wake = wake
        self._config = config
        self._acked = acked

    # -- slash commands ------------------------------------------------------------------
    def agent_names(self, current: str) -> list[str]:
        """Agent names for the ``agent`` option's autocomplete (at most 25)."""
        wanted = current.lower()
        return [name for name in self._offered() if wanted in name.lower()][:25]

    def _offered(self) -> list[str]:
        """The agents people may start (not those signoff starts itself)."""
        agents = self._runtime.agents
        return [n for n in sorted(agents) if not getattr(agents[n], "internal", False)]

    async def run(self, interaction: Interaction, agent: str, prompt: str) -> None:
        """``/agent run <agent> <prompt>``: start a run whose messages go to this channel."""

        async def work() -> Reply:
            if agent in self._runtime.agents and agent not in self._offered():
                return Reply(f"⚠️ {cards.code(agent)} is started by signoff itself, not by hand.")
            if agent not in self._offered():
                known = ", ".join(cards.code(name) for name in self._offered()) or "none"
                return Reply(f"⚠️ No agent named {cards.code(agent)}. Loaded: {known}.")
            if not prompt.strip():
                return Reply("⚠️ Tell the agent what to do: the prompt is empty.")
            requester = str(interaction.user.id)
            origin: dict[str, Any] = {
                "platform": "discord",
                "channel_id": str(interaction.channel_id),
            }
            if interaction.guild_id is not None:
                origin["guild_id"] = str(interaction.guild_id)
            groups = self._actor(interaction).groups
            if groups:
                # The roles the interaction carries, for the agent's policy to read.
                origin[REQUESTER_GROUPS] = sorted(groups)
            # A Discord thread is one conversation: later runs there see earlier ones.
            thread = (
                f"discord:{interaction.channel_id}"
                if isinstance(interaction.channel, discord.Thread)
                else None
            )
            # A redelivered interaction (same id) finds the run it started.
            result = await self._runtime.start(
                agent,
                prompt,
                requester=requester,
                origin=origin,
                thread_id=thread,
                wait=False,
                idempotency=("discord:interaction", str(interaction.id), f"{agent}\n{prompt}"),
            )
            self._wake()
            return Reply(
                cards.started_text(requester, agent, result.run_id, prompt), ephemeral=False
            )

        await self._respond(interaction, work, ephemeral_if_slow=False)

    async def pending(self, interaction: Interaction) -> None:
        """``/agent pending``: the open requests the caller may decide (ephemeral)."""

        async def work() -> Reply:
            try:
                actor = await self._runtime.identities.as_person(self._actor(interaction))
            except Unauthorized:
                return Reply("", embed=cards.pending_embed([], 0))
            entries = [
                e for e in await self._runtime.open_tickets(limit=500) if e.ticket.may_decide(actor)
            ]
            shown = []
            for entry in entries[:15]:
                shown.append((entry, await self._card_link(entry.ticket_id)))
            return Reply("", embed=cards.pending_embed(shown, len(entries)))

        await self._respond(interaction, work)

    async def link(self, interaction: Interaction, code: str) -> None:
        """``/signoff link <code>``: link the caller to the person whose console showed
        the one-time code (ephemeral)."""

        async def work() -> Reply:
            actor = self._actor(interaction)
            person = await self._runtime.identities.redeem_link_code(code, actor.id)
            if person is None:
                return Reply(
                    "⚠️ That link code is unknown, used or expired. Get a new one from the "
                    "console's Link page. Nothing was changed."
                )
            return Reply(f"🔗 Your Discord account is now linked to {cards.code(person)}.")

        await self._respond(interaction, work)

    async def status(self, interaction: Interaction, run_id: str) -> None:
        """``/agent status <run>``: where a run stands (ephemeral)."""

        async def work() -> Reply:
            result = await self._visible_run(interaction, run_id)
            if result is None:
                return Reply(f"⚠️ No run {cards.code(run_id)}.")
            return Reply("", embed=cards.status_embed(result))

        await self._respond(interaction, work)

    async def cancel(self, interaction: Interaction, run_id: str) -> None:
        """``/agent cancel <run>``: cancel a run (its requester or a server manager)."""

        async def work() -> Reply:
            run = await self._visible_run(interaction, run_id)
            if run is None:
                return Reply(f"⚠️ No run {cards.code(run_id)}.")
            actor = self._actor(interaction)
            manager = interaction.permissions.manage_guild and self._of_this_server(
                interaction, run
            )
            if actor.id != run.requester and not manager:
                return Reply(
                    f"⛔ Only {cards.user(run.requester)} (who started it) or a member with "
                    "Manage Server may cancel this run. Nothing was changed."
                )
            try:
                await self._runtime.cancel(
                    run.run_id, actor=actor, reason=f"cancelled in Discord by {actor.name}"
                )
            except NotAwaiting:
                return Reply(f"📌 Run {cards.code(run.run_id)} already ended ({run.status}).")
            self._wake()
            return Reply(
                f"⏹ {cards.user(actor.id)} cancelled run {cards.code(run.run_id)} "
                f"(**{cards.escape(run.agent)}**).",
                ephemeral=False,
            )

        await self._respond(interaction, work)

    async def _visible_run(self, interaction: Interaction, run_id: str) -> RunResult | None:
        """The run, if the caller may see it: a run of this Discord server (a channel's
        runs are visible to it), or one the rules give them (requested, deciding)."""
        try:
            result = await self._runtime.get(run_id.strip())
        except RunNotFound:
            return None
        if self._of_this_server(interaction, result):
            return result
        if await self._runtime.may_see(result.run_id, self._actor(interaction)):
            return result
        return None  # answered like an unknown id: its existence is not revealed

    @staticmethod
    def _of_this_server(interaction: Interaction, run: RunResult) -> bool:
        origin = run.origin
        return (
            origin.get("platform") == "discord"
            and interaction.guild_id is not None
            and origin.get("guild_id") == str(interaction.guild_id)
        )

    # -- buttons -----------------------------------------------------------------------
    async def clicked(self, interaction: Interaction, click: TicketClick) -> None:
        """A signoff button was clicked."""
        match click.action:
            case Action.ALLOW:
                await self._decide(interaction, click, Allow())
            case Action.DENY:
                await self._decide(interaction, click, Deny())
            case Action.RETRY:
                await self._decide(interaction, click, Retry())
            case Action.ABORT:
                await self._decide(interaction, click, Abort())
            case Action.GRANT_RUN:
                await self._decide(interaction, click, Allow(grant=GrantRequest(scope="run")))
            case Action.REASON | Action.INPUT | Action.RESULT | Action.GRANT_THREAD | Action.EDIT:
                await self._open_form(interaction, click)
            case _:
                assert_never(click.action)

    async def unrecognised(self, interaction: Interaction) -> None:
        """A component or modal claiming to be signoff's whose ``custom_id`` is malformed."""
        await self._respond(interaction, _constant(Reply(refusals.UNRECOGNISED)))

    async def _open_form(self, interaction: Interaction, click: TicketClick) -> None:
        """Open the modal of a button, after checking the clicker may decide at all."""
        # A modal must be the first answer, so it cannot follow a deferral: check fast.
        actor = self._actor(interaction)
        try:
            checked = await asyncio.wait_for(
                self._runtime.may_answer(
                    click.ticket_id, _FORM_KINDS[click.action], actor, correlation=click.correlation
                ),
                timeout=FORM_BUDGET_SECONDS,
            )
        except TimeoutError:
            await self._send(
                interaction, Reply("⚠️ The database is slow right now; please click again.")
            )
            return
        match checked:
            case Refused(refusal):
                await self._send(interaction, Reply(self._wording(refusal)))
                return
            case Decidable(ticket) if click.action is Action.EDIT:
                modal = self._edit_form_for(click, ticket)
            case Decidable(ticket):
                modal = _form_for(click, ticket, self._config)
            case _:
                assert_never(checked)
        if isinstance(modal, Reply):
            await self._send(interaction, modal)
            return
        try:
            await interaction.response.send_modal(modal)
        except discord.HTTPException as exc:
            log.warning("could not open a form for interaction %s: %s", interaction.id, exc)
        # The submission is handled from its custom_id, not by this object: forget it, so
        # a submission after a restart and one before it take the same path.
        modal.stop()

    def _edit_form_for(self, click: TicketClick, ticket: ResumeTicket) -> discord.ui.Modal | Reply:
        form = self._runtime.edit_form(ticket)
        if form is None:
            return Reply(refusals.NOT_EDITABLE)
        fields = forms.edit_fields(form)
        return modals.edit_modal(click, form.tool, fields, len(form.fields))

    # -- batches -----------------------------------------------------------------------
    async def batch_clicked(self, interaction: Interaction, click: BatchClick) -> None:
        """ "Allow all N" / "Deny all N": one stored decision per call of the batch, each
        checked on its own; the clicker reads each outcome, and the batch message loses
        its buttons once something was recorded."""
        actor = self._actor(interaction)
        answer: Answer = Allow() if click.decision == "allow" else Deny()

        async def work() -> Reply:
            outcome = await self._runtime.accept_batch(
                click.ticket_id,
                click.token,
                answer,
                actor,
                source="discord",
                delivery_id=str(interaction.id),
                reply=_where(interaction),
            )
            match outcome:
                case Refused(refusal):
                    return Reply(self._wording(refusal))
                case BatchAccepted():
                    pass
                case _:
                    assert_never(outcome)
            if outcome.stored:
                self._wake()
                await self._settle_batch(interaction, answer.kind, actor)
            return Reply(refusals.batch_text(answer.kind, outcome, self._config.role_groups))

        await self._respond(interaction, work, timed=True)

    async def _settle_batch(self, interaction: Interaction, kind: str, actor: Actor) -> None:
        """Take the buttons off the clicked batch message and say who decided it."""
        message = interaction.message
        if message is None:
            return
        verb = "Allow" if kind == "allow" else "Deny"
        embeds = [embed.copy() for embed in message.embeds]
        if embeds:
            embeds[0].add_field(
                name="Outcome", value=f"{verb} all recorded by {cards.user(actor.id)}", inline=False
            )
        try:
            await message.edit(embeds=embeds, view=None)
        except discord.HTTPException as exc:
            log.warning("could not update the batch message %s: %s", message.id, exc)

    # -- modal submissions -------------------------------------------------------------
    async def submitted(self, interaction: Interaction) -> None:
        """A modal was submitted; those of signoff name their ticket in the custom_id."""
        data = cast(dict[str, Any], interaction.data or {})
        custom_id = str(data.get("custom_id", ""))
        click = parse_modal(custom_id)
        if click is None:
            # Every modal this bot sees is one it opened: answer, never leave it hanging.
            await self.unrecognised(interaction)
            return
        values = forms.submitted_values(data.get("components", []))

        async def answer() -> Answer | Reply:
            match click.action:
                case Action.REASON:
                    reason = values.get(modals.REASON_FIELD, "").strip()
                    return Deny(reason=reason or None)
                case Action.RESULT:
                    return Resolve(result=parse_result(values.get(modals.RESULT_FIELD, "")))
                case Action.INPUT:
                    return await self._typed_input(click, values)
                case Action.GRANT_THREAD:
                    return _thread_grant(values.get(modals.HOURS_FIELD, ""))
                case Action.EDIT:
                    return await self._edited(click, values)
                case _:
                    return Reply(refusals.UNRECOGNISED)

        await self._decide(interaction, click, answer)

    async def _typed_input(self, click: TicketClick, values: dict[str, str]) -> Answer | Reply:
        try:
            ticket = await self._runtime.ticket(click.ticket_id)
        except UnknownTicket:
            return Reply(refusals.UNRECOGNISED)
        if not isinstance(ticket.target, RemoteInput):
            return Reply(refusals.UNRECOGNISED)
        fields = forms.form_fields(ticket.target.schema_)
        data, errors = forms.read_values(fields, values)
        if errors:
            labels = {f.name: f.label for f in fields}
            return Reply(refusals.form_errors_text(errors, labels))
        return InputData(data=data)

    async def _edited(self, click: TicketClick, values: dict[str, str]) -> Answer | Reply:
        try:
            ticket = await self._runtime.ticket(click.ticket_id)
        except UnknownTicket:
            return Reply(refusals.UNRECOGNISED)
        form = self._runtime.edit_form(ticket)
        if form is None:
            return Reply(refusals.NOT_EDITABLE)
        fields = forms.edit_fields(form)
        data, errors = forms.read_values(fields, values)
        if errors:
            labels = {f.name: f.label for f in fields}
            return Reply(refusals.form_errors_text(errors, labels))
        return Allow(args=data)

    # -- the decision path ---------------------------------------------------------------
    async def _decide(
        self,
        interaction: Interaction,
        click: TicketClick,
        answer: Answer | Callable[[], Awaitable[Answer | Reply]],
    ) -> None:
        """Check and store (one step), then acknowledge one decision."""
        actor = self._actor(interaction)

        async def work() -> Reply:
            chosen = answer if not callable(answer) else await answer()
            if isinstance(chosen, Reply):
                return chosen
            outcome = await self._runtime.accept(
                click.ticket_id,
                chosen,
                actor,
                correlation=click.correlation,
                source="discord",
                delivery_id=str(interaction.id),
                reply=_where(interaction),
            )
            match outcome:
                case Refused(refusal):
                    return Reply(self._wording(refusal))
                case Accepted(stored=False):
                    return Reply("📌 This click was already received; nothing more to do.")
                case Accepted():
                    self._wake()
                    return Reply(_received_text(chosen))
                case _:
                    assert_never(outcome)

        await self._respond(interaction, work, timed=True)

    def _wording(self, refusal: Refusal) -> str:
        return refusals.refusal_text(
            refusal, self._config.role_groups, console_url=self._config.console_url
        )

    async def _card_link(self, ticket_id: str) -> str | None:
        card = await self._runtime.card_of(ticket_id, "discord")
        if card is None or not card.ref:
            return None
        return cards.jump_url(
            card.destination.get("guild_id"),
            str(card.ref.get("channel_id")),
            str(card.ref.get("message_id")),
        )

    def _actor(self, interaction: Interaction) -> Actor:
        return actor_of(interaction.user, self._config)

    # -- answering in time ---------------------------------------------------------------
    async def _respond(
        self,
        interaction: Interaction,
        work: Callable[[], Awaitable[Reply]],
        *,
        ephemeral_if_slow: bool = True,
        timed: bool = False,
    ) -> None:
        """Do `work` and answer with its reply, deferring first if it takes too long
        (`timed`: report how long the first answer took)."""
        started = time.perf_counter()
        task = asyncio.ensure_future(self._guarded(work))
        done, _ = await asyncio.wait({task}, timeout=self._config.ack_budget_seconds)
        if not done:
            try:
                await interaction.response.defer(ephemeral=ephemeral_if_slow, thinking=True)
            except discord.HTTPException as exc:
                log.warning("could not defer interaction %s: %s", interaction.id, exc)
            if timed and self._acked is not None:
                self._acked("discord", time.perf_counter() - started)
                timed = False
        await self._send(interaction, await task)
        if timed and self._acked is not None:
            self._acked("discord", time.perf_counter() - started)

    async def _guarded(self, work: Callable[[], Awaitable[Reply]]) -> Reply:
        try:
            return await work()
        except SignoffError as exc:
            log.warning("a Discord interaction failed: %s", exc)
            return Reply(self._wording(classify(exc, None)))
        except Exception:
            log.exception("a Discord interaction failed")
            return Reply("⚠️ Something went wrong on our side; please try again.")

    async def _send(self, interaction: Interaction, reply: Reply) -> None:
        embeds = [discord.Embed.from_dict(reply.embed)] if reply.embed else []
        mentions = discord.AllowedMentions.none()
        try:
            if interaction.response.is_done():
                await interaction.followup.send(
                    reply.content,
                    embeds=embeds,
                    ephemeral=reply.ephemeral,
                    allowed_mentions=mentions,
                )
            else:
                await interaction.response.send_message(
                    reply.content,
                    embeds=embeds,
                    ephemeral=reply.ephemeral,
                    allowed_mentions=mentions,
                )
        except discord.HTTPException as exc:
            # Typically 40060 (already answered: a redelivered interaction) or 10062 (too
            # late). A stored decision stays stored either way.
            log.warning("could not answer interaction %s: %s", interaction.id, exc)


def _constant(reply: Reply) -> Callable[[], Awaitable[Reply]]:
    async def work() -> Reply:
        return reply

    return work


def _where(interaction: Interaction) -> dict[str, Any]:
    """Where the click came from and who clicked, kept with the stored decision.

    The interaction's token lets the bot send a follow-up only the clicker sees if the
    decision is refused when applied; Discord accepts it for 15 minutes after the click.
    """
    where: dict[str, Any] = {
        "channel_id": str(interaction.channel_id),
        "user_id": str(interaction.user.id),
        "application_id": str(interaction.application_id),
        "interaction_token": interaction.token,
    }
    if interaction.message is not None:
        where["message_id"] = str(interaction.message.id)
    return where


def _thread_grant(typed: str) -> Answer | Reply:
    """An allow with a thread grant for the hours typed, or what is wrong with them."""
    try:
        hours = float(typed.strip())
    except ValueError:
        hours = -1.0
    if not 0 < hours <= MAX_GRANT_HOURS:
        return Reply(
            f"⚠️ Enter more than 0 and at most {MAX_GRANT_HOURS:g} hours (e.g. 8 or 0.5); "
            "nothing was recorded."
        )
    return Allow(grant=GrantRequest(scope="thread", hours=hours))


def _received_text(answer: Answer) -> str:
    match answer:
        case Allow(grant=GrantRequest()):
            what = "✅ Allow and standing grant recorded"
        case Allow(args=args) if args:
            what = "✅ Allow with changes recorded"
        case Allow():
            what = "✅ Allow recorded"
        case Deny():
            what = "⛔ Deny recorded"
        case InputData():
            what = "📝 Answer recorded"
        case Resolve():
            what = "📝 Result recorded"
        case Retry():
            what = "🔁 Retry recorded"
        case Abort():
            what = "🛑 Abort recorded"
        case _:
            what = "Decision recorded"
    return f"{what}. The message above updates once it is applied."


def _form_for(
    click: TicketClick, ticket: ResumeTicket, config: DiscordConfig
) -> discord.ui.Modal | Reply:
    match click.action:
        case Action.REASON:
            return modals.reason_modal(click)
        case Action.RESULT:
            tool = getattr(ticket.target, "tool", "")
            return modals.result_modal(click, str(tool))
        case Action.GRANT_THREAD:
            tool = getattr(ticket.target, "tool", "")
            return modals.grant_modal(click, str(tool))
        case _:
            target = ticket.target
            if not isinstance(target, RemoteInput):
                return Reply(refusals.UNRECOGNISED)
            if not forms.fits_modal(target.schema_):
                where = f"/runs/{ticket.run_id}"
                link = (config.console_url or "").rstrip("/") + where
                return Reply(
                    "📌 This form is larger than a Discord form; answer it in the web console: "
                    + (link if config.console_url else cards.code(where))
                )
            return modals.input_modal(click, target.prompt, forms.form_fields(target.schema_))
