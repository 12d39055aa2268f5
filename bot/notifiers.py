"""Where the serving process's extra notifiers are handed from wiring to the outbox loop."""

from __future__ import annotations

from aiohttp import web

from runtime.outbox import Notifier

NOTIFIERS_KEY: web.AppKey[dict[str, Notifier]] = web.AppKey("signoff_notifiers", dict)
"""Notifier per platform name, kept on the aiohttp application."""
