"""When tracing is on, and what a configuration signoff cannot honour says."""

from __future__ import annotations

import pytest

from adapters.telemetry import start_from_env, tracing_configured
from runtime import ConfigurationError


@pytest.mark.parametrize(
    ("env", "turned_on_by"),
    [
        ({}, None),
        ({"OTEL_SERVICE_NAME": "approvals"}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, None),
        (
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"},
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ),
        ({"OTEL_TRACES_EXPORTER": "console"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, None),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, None),
    ],
)
def test_tracing_is_on_only_when_asked_for(env: dict[str, str], turned_on_by: str | None) -> None:
    assert tracing_configured(env) == turned_on_by
    if turned_on_by is None:
        assert start_from_env(env) is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"OTEL_TRACES_EXPORTER": "zipkin"},
            "OTEL_TRACES_EXPORTER: unknown exporter 'zipkin' (otlp, console or none)",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' is not supported",
        ),
    ],
)
def test_what_signoff_does_not_ship_is_refused_clearly(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        start_from_env(env)
    assert message in str(refused.value)


def test_the_service_is_named_signoff_unless_told() -> None:
    from adapters.telemetry.otel import start_telemetry

    named = start_telemetry({"OTEL_TRACES_EXPORTER": "none"}, set_global=False)
    assert named.provider.resource.attributes["service.name"] == "signoff"
    named.shutdown()
    renamed = start_telemetry(
        {"OTEL_TRACES_EXPORTER": "none", "OTEL_SERVICE_NAME": "approvals"}, set_global=False
    )
    assert renamed.provider.resource.attributes["service.name"] == "approvals"
    renamed.shutdown()


@pytest.mark.parametrize(
    ("env", "endpoint"),
    [
        ({}, None),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"},
            "http://collector:4318/v1/traces",
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://traces.example/otlp",
            },
            "https://traces.example/otlp",
        ),
    ],
)
def test_traces_go_where_the_variables_given_say(env: dict[str, str], endpoint: str | None) -> None:
    from adapters.telemetry.otel import _traces_endpoint

    assert _traces_endpoint(env) == endpoint
