"""Configuration of one webhook: its secret, agent, input template and destinations.

A `HookConfig` is checked when it is built, so a bad hook stops start-up with a
`runtime.ConfigurationError` naming the hook, instead of failing on the first request.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from yarl import URL

from runtime import ConfigurationError

DEFAULT_MAX_BODY_BYTES = 64 * 1024
PLATFORMS = ("console", "slack", "discord")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_TEMPLATE_ROOTS = frozenset({"body", "raw"})
# Keys the webhook adds to a run's origin itself; an approvals mapping may not set them.
_RESERVED = frozenset({"hook", "callback_url"})


class TemplateError(ValueError):
    """The input template cannot be rendered for this body (e.g. a field is missing)."""


@dataclass(frozen=True)
class HookConfig:
    """One webhook, served at ``POST /hooks/{name}``.

    Args:
        name: The hook's name in the URL (letters, digits, ``_ . -``).
        secret: The shared HMAC secret (see `adapters.webhook.signing`).
        agent: Name of the agent each request starts a run of.
        input_template: A `str.format` template for the run's input. It receives
            ``body`` (the parsed JSON object) and ``raw`` (the body as text), e.g.
            ``"Refund order {body[order_id]} for {body[amount]}"``.
        approvals: Where the run's approvals go: ``{"platform": "console"}`` (default),
            ``{"platform": "slack", "channel": "C123"}`` or
            ``{"platform": "discord", "channel": "123"}``. Copied onto the run's origin.
        requester: The user id recorded as the run's requester (default ``hook:<name>``).
            By default only the requester may decide, so name real approvers on the
            agent or its tools.
        callback_url: Where to POST a signed completion callback, if anywhere.
        callback_hosts: Hosts a callback may go to; `callback_url`'s host must be one.
        max_body_bytes: Larger request bodies are refused with 413.
        tolerance_seconds: How far a request's timestamp may be from the server's clock.
        callback_timeout_seconds: Total time allowed for one callback attempt.

    Raises:
        ConfigurationError: If any value is invalid; the message names the hook.
    """

    name: str
    secret: str = field(repr=False)
    agent: str
    input_template: str
    approvals: Mapping[str, Any] = field(
        default_factory=lambda: {"platform": "console"}, hash=False
    )
    requester: str | None = None
    callback_url: str | None = None
    callback_hosts: Sequence[str] = ()
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    tolerance_seconds: int = 300
    callback_timeout_seconds: float = 10.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ConfigurationError(
                f"hook name {self.name!r}: use 1-64 letters, digits, '_', '.' or '-'"
            )
        where = f"hook {self.name!r}"
        if not isinstance(self.secret, str) or not self.secret:
            raise ConfigurationError(f"{where}: a non-empty secret is required")
        if not isinstance(self.agent, str) or not self.agent:
            raise ConfigurationError(f"{where}: an agent name is required")
        _check_template(where, self.input_template)
        object.__setattr__(self, "approvals", _check_approvals(where, self.approvals))
        requester = self.requester if self.requester is not None else f"hook:{self.name}"
        if not requester:
            raise ConfigurationError(f"{where}: requester cannot be empty")
        object.__setattr__(self, "requester", requester)
        if isinstance(self.callback_hosts, str):
            raise ConfigurationError(f"{where}: callback_hosts must be a list of host names")
        hosts = tuple(h.strip().lower().rstrip(".") for h in self.callback_hosts)
        if any(not h for h in hosts):
            raise ConfigurationError(f"{where}: callback_hosts holds an empty host name")
        object.__setattr__(self, "callback_hosts", hosts)
        if self.callback_url is not None:
            _check_callback(where, self.callback_url, hosts)
        if not isinstance(self.max_body_bytes, int) or self.max_body_bytes <= 0:
            raise ConfigurationError(f"{where}: max_body_bytes must be a positive integer")
        if not isinstance(self.tolerance_seconds, int) or self.tolerance_seconds <= 0:
            raise ConfigurationError(f"{where}: tolerance_seconds must be a positive integer")
        if self.callback_timeout_seconds <= 0:
            raise ConfigurationError(f"{where}: callback_timeout_seconds must be positive")

    @property
    def run_requester(self) -> str:
        """The requester recorded on runs (never empty once validated)."""
        return self.requester or f"hook:{self.name}"

    @property
    def scope(self) -> str:
        """The idempotency scope of this hook's keys."""
        return f"hook:{self.name}"

    def allows_callback_to(self, url: str) -> bool:
        """True if `url` is an http(s) URL whose host is in `callback_hosts`."""
        return callback_host_allowed(url, tuple(self.callback_hosts))

    def origin(self) -> dict[str, Any]:
        """The origin stored on this hook's runs: approvals plus ``hook``/``callback_url``."""
        origin: dict[str, Any] = {**self.approvals, "hook": self.name}
        if self.callback_url is not None:
            origin["callback_url"] = self.callback_url
        return origin

    def render(self, body: Mapping[str, Any], raw: str) -> str:
        """The run's input for this request.

        Raises:
            TemplateError: The template refers to something the body does not have.
        """
        try:
            return self.input_template.format(body=body, raw=raw)
        except (KeyError, IndexError) as exc:
            raise TemplateError(f"the body has no field {exc.args[0]!r}") from None
        except (AttributeError, TypeError, ValueError) as exc:
            raise TemplateError(f"the body does not fit the input template: {exc}") from None


def callback_host_allowed(url: str, hosts: Sequence[str]) -> bool:
    """True if `url` is an absolute http(s) URL whose host is one of `hosts`."""
    try:
        parsed = URL(url)
    except (TypeError, ValueError):
        return False
    if parsed.scheme not in ("http", "https") or not parsed.host:
        return False
    return parsed.host.lower().rstrip(".") in hosts


def _check_template(where: str, template: object) -> None:
    if not isinstance(template, str) or not template.strip():
        raise ConfigurationError(f"{where}: input_template must be a non-empty string")
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigurationError(f"{where}: input_template is malformed: {exc}") from None
    for _text, field_name, _spec, _conversion in parts:
        if field_name is None:
            continue
        root = re.split(r"[.\[]", field_name, maxsplit=1)[0]
        if root not in _TEMPLATE_ROOTS:
            raise ConfigurationError(
                f"{where}: input_template field {{{field_name}}} must start with "
                "'body' (the parsed JSON object) or 'raw' (the body text)"
            )


def _check_approvals(where: str, approvals: object) -> dict[str, Any]:
    if not isinstance(approvals, Mapping):
        raise ConfigurationError(f"{where}: approvals must be a mapping with a 'platform'")
    copied = dict(approvals)
    platform = copied.get("platform", "console")
    if platform not in PLATFORMS:
        raise ConfigurationError(
            f"{where}: approvals platform {platform!r} is not one of {', '.join(PLATFORMS)}"
        )
    copied["platform"] = platform
    if platform != "console":
        channel = copied.get("channel")
        if not isinstance(channel, str) or not channel:
            raise ConfigurationError(f"{where}: {platform} approvals need a 'channel' id")
    reserved = _RESERVED & copied.keys()
    if reserved:
        raise ConfigurationError(
            f"{where}: approvals may not set {', '.join(sorted(reserved))}; "
            "use callback_url on the hook"
        )
    return copied


def _check_callback(where: str, url: str, hosts: tuple[str, ...]) -> None:
    try:
        parsed = URL(url)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{where}: callback_url {url!r} is not a URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigurationError(f"{where}: callback_url must be an absolute http(s) URL")
    if not callback_host_allowed(url, hosts):
        allowed = ", ".join(hosts) or "none"
        raise ConfigurationError(
            f"{where}: callback_url host {parsed.host!r} is not in callback_hosts ({allowed})"
        )
