"""The Slack edge: start runs and decide approvals in channels (slack-bolt, Block Kit).

- `app`: `build_slack_app`, the bolt `AsyncApp` (slash command, mentions, DMs, buttons,
  modals) and `add_slack_routes`, which serves it at ``POST /slack/events``;
- `socket_mode`: `SlackSocketMode`, the same app over a Socket Mode websocket;
- `notifier`: `SlackNotifier`, the outbox's notifications as cards and thread messages;
- `blocks` and `modals`: pure Block Kit builders within Slack's limits;
- `directory`: `Directory`, approver groups (user groups, channel members) Slack vouches for.

Depends on `runtime` only (and slack-bolt / slack_sdk, the ``slack`` extra).
"""

from adapters.slack.app import EVENTS_PATH, add_slack_routes, build_client, build_slack_app
from adapters.slack.config import DEFAULT_API_BASE_URL, SlackConfig
from adapters.slack.directory import Directory
from adapters.slack.notifier import ChannelLimiter, SlackNotifier
from adapters.slack.socket_mode import SlackSocketMode

__all__ = [
    "DEFAULT_API_BASE_URL",
    "EVENTS_PATH",
    "ChannelLimiter",
    "Directory",
    "SlackConfig",
    "SlackNotifier",
    "SlackSocketMode",
    "add_slack_routes",
    "build_client",
    "build_slack_app",
]
