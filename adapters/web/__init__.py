"""The operator web edge: a JSON API (bearer tokens) and a server-rendered console.

Both are added to an aiohttp application the composition root builds::

    auth = TokenAuth([ApiToken("s3cret", "ops:alice", operator=True)])
    add_api_routes(app, runtime, auth, worker.wake)
    add_console_routes(app, runtime, auth, worker.wake, cookie_secret=secret)

Depends on `runtime` only.
"""

from adapters.web.api import add_api_routes
from adapters.web.auth import ApiToken, SessionCodec, TokenAuth
from adapters.web.console import add_console_routes
from adapters.web.limits import body_deadline

__all__ = [
    "ApiToken",
    "SessionCodec",
    "TokenAuth",
    "add_api_routes",
    "add_console_routes",
    "body_deadline",
]
