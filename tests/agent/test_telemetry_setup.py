"""Turning OpenTelemetry on with the standard OTEL_* variables: what the plan says (doctor's line,
golden strings), and what a process started with a variable the SDK cannot use says."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agent.commands.doctor import telemetry_line
from agent.install_hints import install_hint
from agent.sqlite import create_database
from agent.telemetry.setup import extra_installed, telemetry_plan
from tests.support.console import console_script
from tests.support.mcp import REPO, server_env

SERVICE = "sqale-mcp"


def line(environ: dict[str, str], installed: bool = True) -> str:
    return telemetry_line(telemetry_plan(environ, installed=installed, service=SERVICE))


def test_nothing_set_is_off_at_no_cost() -> None:
    """No OTEL_* variable: off, and doctor says which one turns it on."""
    assert line({}) == (
        "[info] OpenTelemetry: off (no OTEL_* exporter or endpoint is set; set "
        "OTEL_EXPORTER_OTLP_ENDPOINT to send traces and metrics)"
    )
    assert line({"OTEL_TRACES_EXPORTER": "none"}).startswith("[info] OpenTelemetry: off")


def test_an_endpoint_sends_traces_and_metrics_by_otlp_http() -> None:
    """One endpoint: both signals to its /v1/ paths, protobuf over HTTP, the default service and sampler."""
    assert line({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318/"}) == (
        "[ok]   OpenTelemetry: on (OTEL_EXPORTER_OTLP_ENDPOINT is set): traces: otlp (http/protobuf) to "
        "http://127.0.0.1:4318/v1/traces; metrics: otlp (http/protobuf) to http://127.0.0.1:4318/v1/metrics; "
        "service sqale-mcp; sampler parentbased_always_on"
    )


def test_each_signal_says_where_it_goes_as_the_variables_say() -> None:
    """A signal's own endpoint and exporter, metrics off, a named service and sampler; no credentials shown."""
    environ = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://user:secret@collector.example:4318/v1/traces",
        "OTEL_SERVICE_NAME": "answers",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer abc",
    }
    assert line(environ) == (
        "[ok]   OpenTelemetry: on (OTEL_TRACES_EXPORTER is set): traces: otlp (http/protobuf) to "
        "https://collector.example:4318/v1/traces; service answers; sampler parentbased_traceidratio"
    )


def test_disabled_wins_and_a_missing_extra_is_a_warning() -> None:
    """OTEL_SDK_DISABLED=true turns it off; an endpoint without the extra warns, saying what to install."""
    assert line({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}) == (
        "[info] OpenTelemetry: off (OTEL_SDK_DISABLED is true)"
    )
    assert line({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, installed=False) == (
        "[warn] OpenTelemetry: OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not installed, "
        f"so nothing is sent: {install_hint('otel')}"
    )


def test_a_process_already_instrumented_is_left_as_it_is() -> None:
    """Under opentelemetry-instrument the SDK is already set up: ours does not start another."""
    plan = telemetry_plan({}, installed=True, service=SERVICE, already_configured=True)
    assert (plan.on, plan.describe()) == (
        True,
        "OpenTelemetry: on (configured before sqale started, e.g. by opentelemetry-instrument)",
    )


@pytest.mark.skipif(not extra_installed(), reason="the otel extra is not installed (pip install -e '.[dev]')")
def test_an_exporter_the_sdk_cannot_start_is_one_clear_error(tmp_path: Path) -> None:
    """OTEL_TRACES_EXPORTER naming an exporter that is not installed: `ask` exits 1 with one line
    saying OpenTelemetry could not start and where to look, before any model is asked."""
    db = create_database(tmp_path / "t.db", "CREATE TABLE t (x INTEGER);")
    done = subprocess.run(
        [
            console_script("sqale-agent"),
            "ask",
            "--db",
            str(db),
            "--ollama-host",
            "http://127.0.0.1:9",
            "How many rows?",
        ],
        cwd=REPO,
        env=server_env(tmp_path, OTEL_TRACES_EXPORTER="no_such_exporter"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("sqale-agent ask: OpenTelemetry could not start (")
    assert done.stderr.rstrip().endswith("check the OTEL_* variables (docs/deployment.md#opentelemetry)")
