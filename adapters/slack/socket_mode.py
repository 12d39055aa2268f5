"""Socket Mode: the bot opens a websocket to Slack instead of exposing ``/slack/events``.

Useful behind a firewall or on a laptop. The same bolt app handles the envelopes, so a
click is checked, stored durably and only then acknowledged, exactly as over HTTP.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import aiohttp
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest

from runtime import ConfigurationError


class SlackSocketMode:
    """Holds the Socket Mode connection of one bolt app.

    Args:
        app: The bolt app (its Web API client opens the connection).
        app_token: The app-level token (``xapp-...``) with ``connections:write``.
        ping_interval: Seconds between websocket pings.
        acked: Told, for each envelope, how long it took from its receipt to its
            acknowledgement (edge ``slack_socket``).
    """

    def __init__(
        self,
        app: AsyncApp,
        app_token: str,
        *,
        ping_interval: float = 10.0,
        acked: Callable[[str, float], None] | None = None,
    ) -> None:
        self._app = app
        self._acked = acked
        self._app_token = app_token
        self._ping_interval = ping_interval
        self._handler: AsyncSocketModeHandler | None = None

    async def start(self) -> None:
        """Connect: ``apps.connections.open``, then the websocket; returns once connected.

        Raises:
            ConfigurationError: Slack refused the app token (the client would otherwise
                retry for ever).
        """
        # Built here, inside the running loop: the client opens an aiohttp session.
        handler = AsyncSocketModeHandler(
            self._app,
            app_token=self._app_token,
            web_client=self._app.client,
            ping_interval=self._ping_interval,
        )
        try:
            handler.client.wss_uri = await handler.client.issue_new_wss_url()
        except SlackApiError as exc:
            await handler.client.aiohttp_client_session.close()
            error = exc.response.get("error") if exc.response is not None else None
            raise ConfigurationError(
                f"Slack refused to open a Socket Mode connection: {error or exc}; check "
                "SIGNOFF_SLACK_APP_TOKEN (an xapp- token with connections:write)"
            ) from exc
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            await handler.client.aiohttp_client_session.close()
            raise ConfigurationError(
                f"cannot reach Slack at {self._app.client.base_url} to open a Socket Mode "
                f"connection: {exc or type(exc).__name__}; check SIGNOFF_SLACK_API_BASE_URL "
                "and the network"
            ) from exc
        if self._acked is not None:
            handler.client.socket_mode_request_listeners[:] = [self._timed(handler)]
        self._handler = handler
        await handler.client.connect()  # type: ignore[no-untyped-call]

    def _timed(
        self, handler: AsyncSocketModeHandler
    ) -> Callable[[AsyncBaseSocketModeClient, SocketModeRequest], Awaitable[None]]:
        """The handler's listener, timed: bolt handles the envelope (a click is stored)
        and answers it on the websocket before it returns."""
        acked = self._acked
        assert acked is not None

        async def handle(client: AsyncBaseSocketModeClient, request: SocketModeRequest) -> None:
            started = time.perf_counter()
            assert isinstance(client, SocketModeClient)  # the handler's own client
            try:
                await handler.handle(client, request)
            finally:
                acked("slack_socket", time.perf_counter() - started)

        return handle

    async def stop(self) -> None:
        """Disconnect and release the connection."""
        if self._handler is not None:
            await self._handler.client.close()  # type: ignore[no-untyped-call]
            self._handler = None
