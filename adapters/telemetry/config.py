"""Whether tracing is on: read from the standard OpenTelemetry environment variables.

Tracing is on when ``OTEL_TRACES_EXPORTER`` names an exporter other than ``none``, or,
without it, when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set; ``OTEL_SDK_DISABLED=true`` turns it off
whatever else is set. No OpenTelemetry module is imported here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

EXTRA_MISSING = (
    "{setting} asks for OpenTelemetry traces, but the OpenTelemetry SDK is not installed: "
    "install signoff with the otel extra (pip install -e '.[otel]'), or unset the "
    "OTEL_* variables"
)
"""The start-up error when tracing is configured without the ``otel`` extra."""


def _set(env: Mapping[str, str], name: str) -> bool:
    return bool(env.get(name, "").strip())


def tracing_configured(env: Mapping[str, str] | None = None) -> str | None:
    """The variable that turns tracing on, or None when tracing is off.

    Args:
        env: The environment (default: the process's).
    """
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if "OTEL_TRACES_EXPORTER" in env:
        names = [n.strip().lower() for n in env["OTEL_TRACES_EXPORTER"].split(",")]
        if any(n and n != "none" for n in names):
            return "OTEL_TRACES_EXPORTER"
        return None
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        if _set(env, name):
            return name
    return None
