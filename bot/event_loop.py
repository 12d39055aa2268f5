"""Which asyncio event loop `signoff serve` runs on.

uvloop (libuv under asyncio's interface) handles sockets, timers and callbacks in C;
for a server answering many small requests it takes about a tenth off the CPU of each
(`bench/slack_clicks.py`). It is used when installed (it is, on Linux and macOS) unless
``SIGNOFF_EVENT_LOOP=asyncio`` asks for the standard loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar, assert_never

from runtime.domain.errors import ConfigurationError

_T = TypeVar("_T")

EventLoopChoice = Literal["auto", "uvloop", "asyncio"]
"""``auto``: uvloop when installed, else asyncio's own loop."""


def loop_factory(choice: EventLoopChoice) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of the loop `choice` names; None for asyncio's default loop.

    Raises:
        ConfigurationError: ``uvloop`` was asked for and is not installed.
    """
    match choice:
        case "asyncio":
            return None
        case "auto":
            return _uvloop()
        case "uvloop":
            factory = _uvloop()
            if factory is None:
                raise ConfigurationError(
                    "SIGNOFF_EVENT_LOOP=uvloop, but uvloop is not installed "
                    "(pip install uvloop, or set SIGNOFF_EVENT_LOOP=auto)"
                )
            return factory
        case _:
            assert_never(choice)


def _uvloop() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(coro: Coroutine[Any, Any, _T], choice: EventLoopChoice) -> _T:
    """Run `coro` to its end on a new loop of the kind `choice` names."""
    try:
        factory = loop_factory(choice)
    except BaseException:
        coro.close()
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def running_name() -> str:
    """The running loop's kind, for start-up logs: ``uvloop`` or ``asyncio``."""
    loop = asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
