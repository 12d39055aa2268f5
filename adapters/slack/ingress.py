"""The HTTP door of the Slack edge: authenticate the raw bytes, then check the shape.

Slack signs the raw request body (``v0:<timestamp>:<body>``, HMAC-SHA256 with the app's
signing secret). The signature and its five-minute window are checked on the bytes as
received, before anything is parsed, so an unsigned request learns nothing and costs no
parsing. A signed request whose body is not something Slack sends (not UTF-8, a payload
that is not a JSON object, a button click without actions ...) is answered 400 with a
reason and goes no further. Only then does bolt see it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slack_sdk.signature import SignatureVerifier
from yarl import query_to_pairs

from runtime.edges import loads_strict

FORM = "application/x-www-form-urlencoded"
_INTERACTIONS_NEEDING_VIEW = ("view_submission", "view_closed")


class MalformedRequest(ValueError):
    """A signed request whose body is not a Slack payload signoff can read."""


def authentic(verifier: SignatureVerifier, body: bytes, headers: Mapping[str, str]) -> bool:
    """Whether the raw `body` carries a valid Slack signature from the last five minutes.

    Slack sends UTF-8 only: a body that is not cannot carry a valid signature.
    """
    timestamp = headers.get("X-Slack-Request-Timestamp")
    signature = headers.get("X-Slack-Signature")
    if not timestamp or not signature:
        return False
    try:
        # slack_sdk compares in constant time and checks the timestamp window.
        return verifier.is_valid(body=body, timestamp=timestamp, signature=signature)
    except (ValueError, TypeError):  # a timestamp that is not a number
        return False


@dataclass(frozen=True, slots=True)
class SlackRequest:
    """A signed request's body, read once.

    Attributes:
        text: The body as text (what bolt is given).
        payload: What Slack sent: an interaction's payload, an Events API body, or a
            slash command's form fields.
        interaction: Whether `payload` is an interaction (a click, a modal ...).
    """

    text: str
    payload: dict[str, Any]
    interaction: bool


def parse(body: bytes, content_type: str) -> SlackRequest:
    """Read `body`, raising `MalformedRequest` unless it is a payload Slack sends.

    Slash commands are form fields; interactions are a form field ``payload`` holding a
    JSON object; the Events API sends a JSON object.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedRequest("the body is not UTF-8 text") from None
    if not text.strip():
        raise MalformedRequest("the body is empty")
    if content_type == "application/json" or text.lstrip().startswith("{"):
        event = _json_object(text, "the body")
        _check_event(event)
        return SlackRequest(text, event, interaction=False)
    try:
        # parse_qsl's result, decoded by yarl's C unquoter: a click's form body is mostly
        # escapes, and decoding it was the largest cost of reading one.
        fields = dict(query_to_pairs(text, max_fields=_MAX_FORM_FIELDS))
    except ValueError:
        raise MalformedRequest("the form has too many fields") from None
    if "payload" in text and "payload" in fields:
        payload = _json_object(fields["payload"], "the payload")
        _check_interaction(payload)
        return SlackRequest(text, payload, interaction=True)
    if "payload" in text:
        raise MalformedRequest("the body names a payload but has no payload field")
    if not fields.get("command"):
        raise MalformedRequest("the form is neither a slash command nor an interaction")
    return SlackRequest(text, dict(fields), interaction=False)


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = loads_strict(text)
    except (ValueError, RecursionError):
        raise MalformedRequest(f"{what} is not valid JSON") from None
    if not isinstance(value, dict):
        raise MalformedRequest(f"{what} is not a JSON object")
    return value


# Keys Slack always sends as objects, or lists of objects, wherever they appear; bolt and
# the listeners read them without checking, so a body breaking that is not Slack's.
_OBJECT_KEYS = frozenset(
    {
        "container",
        "message",
        "previous_message",
        "view",
        "event",
        "state",
        "bot_profile",
    }
)
_LIST_OF_OBJECTS_KEYS = frozenset({"actions", "authorizations", "blocks"})
# An object in interactions, an id in events.
_OBJECT_OR_ID_KEYS = frozenset({"enterprise", "team", "user", "channel"})
_MAX_DEPTH = 64
_MAX_FORM_FIELDS = 100  # a slash command has about a dozen


def _check_types(value: dict[str, Any], where: str, depth: int = 0) -> None:
    if depth > _MAX_DEPTH:
        raise MalformedRequest("the payload is nested too deeply")
    for key, item in value.items():
        if key in _OBJECT_KEYS and item is not None:
            if not isinstance(item, dict):
                raise MalformedRequest(f"{where}'s {key} is not an object")
            _check_types(item, f"{where}.{key}", depth + 1)
        elif key in _OBJECT_OR_ID_KEYS and item is not None:
            if isinstance(item, dict):
                _check_types(item, f"{where}.{key}", depth + 1)
            elif not isinstance(item, str):
                raise MalformedRequest(f"{where}'s {key} is neither an object nor an id")
        elif key in _LIST_OF_OBJECTS_KEYS and item is not None:
            if not isinstance(item, list) or not all(isinstance(i, dict) for i in item):
                raise MalformedRequest(f"{where}'s {key} is not a list of objects")
            for entry in item:
                _check_types(entry, f"{where}.{key}[]", depth + 1)


def _check_event(body: dict[str, Any]) -> None:
    kind = body.get("type")
    if not isinstance(kind, str):
        raise MalformedRequest("the event body has no type")
    _check_types(body, "the body")
    if kind == "url_verification" and not isinstance(body.get("challenge"), str):
        raise MalformedRequest("a url_verification needs its challenge")
    if kind == "event_callback" and not isinstance(body.get("event"), dict):
        raise MalformedRequest("an event_callback needs its event object")


def _check_interaction(payload: dict[str, Any]) -> None:
    kind = payload.get("type")
    if not isinstance(kind, str):
        raise MalformedRequest("the payload has no type")
    _check_types(payload, "the payload")
    if kind == "block_actions":
        actions = payload.get("actions")
        if (
            not isinstance(actions, list)
            or not actions
            or not all(isinstance(a, dict) and isinstance(a.get("action_id"), str) for a in actions)
        ):
            raise MalformedRequest("a block_actions payload needs its actions")
    if kind in _INTERACTIONS_NEEDING_VIEW and not isinstance(payload.get("view"), dict):
        raise MalformedRequest(f"a {kind} payload needs its view")
