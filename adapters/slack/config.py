"""`SlackConfig`: what the Slack edge needs to know, built by the composition root."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

DEFAULT_API_BASE_URL = "https://slack.com/api/"
SlackMode = Literal["http", "socket"]


@dataclass(frozen=True, slots=True)
class SlackConfig:
    """The Slack app's credentials and options.

    Attributes:
        bot_token: The bot token (``xoxb-...``) every Web API call uses.
        signing_secret: Verifies requests Slack sends to ``/slack/events`` (HTTP mode).
        app_token: The app-level token (``xapp-...``) of Socket Mode.
        mode: ``http`` (Slack calls ``/slack/events``) or ``socket`` (we hold a websocket).
        api_base_url: The Web API's base URL (GovSlack and tests point it elsewhere).
        command: The slash command's name, e.g. ``/signoff``.
        default_agent: The agent a request runs when it names none.
        timeout_seconds: Timeout of one Web API call.
        group_cache_seconds: How long user-group and channel memberships are cached.
        lookup_timeout_seconds: Budget for membership look-ups while a click waits for
            its acknowledgement (Slack allows 3 seconds in all).
        approver_groups: Named approver groups (``group:<name>`` entries) mapped to Slack
            user group ids (``S...``) and channel ids (``C...``/``G...``): members of any
            of them belong to the group.
        link_by_email: Link a user who decides to ``oidc:<e-mail>`` by their profile's
            verified e-mail (``users.info``), once per process (see `adapters.slack.linking`).
        console_url: The console's base URL (``SIGNOFF_PUBLIC_URL``), linked from the
            cards of calls that may only be decided there.
    """

    bot_token: str
    signing_secret: str = ""
    app_token: str | None = None
    mode: SlackMode = "http"
    api_base_url: str = DEFAULT_API_BASE_URL
    command: str = "/signoff"
    default_agent: str | None = None
    timeout_seconds: float = 10.0
    group_cache_seconds: float = 60.0
    lookup_timeout_seconds: float = 1.0
    approver_groups: Mapping[str, Sequence[str]] = field(default_factory=dict)
    link_by_email: bool = False
    console_url: str | None = None
