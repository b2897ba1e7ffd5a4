"""Turning OpenTelemetry on from the standard OTEL_* variables, once per process, at the edge.

Tracing and metrics are on when the environment names an exporter or an OTLP endpoint
(`OTEL_TRACES_EXPORTER`, `OTEL_METRICS_EXPORTER`, `OTEL_EXPORTER_OTLP_ENDPOINT` or a signal's
own `OTEL_EXPORTER_OTLP_*_ENDPOINT`) and `OTEL_SDK_DISABLED` is not true; otherwise nothing
starts and every span is the API's no-op. The SDK then starts exactly as `opentelemetry-instrument`
starts it: `opentelemetry.instrumentation.auto_instrumentation.initialize()`, whose distro and
configurator read every OTEL_* variable themselves (exporters, endpoints, headers, sampler,
resource, batch sizes). Two defaults are ours, set only where the variable is unset: the OTLP
protocol `http/protobuf` (the specification's default, and the exporter the `otel` extra
installs; the Python distro would pick gRPC) and the service name (`sqale-mcp`, `sqale-agent`).
A process already instrumented (run under `opentelemetry-instrument`) is left as it is.

`telemetry_plan` is pure (the variables and whether the extra is installed in, the plan out),
so doctor says what the server will do with the same words.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from ..errors import ConfigError
from ..install_hints import install_hint
from .gate import tracing_on

logger = logging.getLogger(__name__)

DEFAULT_PROTOCOL = "http/protobuf"
DEFAULT_ENDPOINT = "http://localhost:4318"
# The modules the `otel` extra brings: the SDK, the distro that configures it, the OTLP exporter.
EXTRA_MODULES = ("opentelemetry.sdk", "opentelemetry.distro", "opentelemetry.exporter.otlp.proto.http")
SIGNALS = (
    ("traces", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
    ("metrics", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"),
)


@dataclass(frozen=True)
class TelemetryPlan:
    """What OpenTelemetry will do in this process, from the environment."""

    on: bool  # the SDK starts (or another instrumentation already started it)
    reason: str  # why it is off, or what turned it on
    destinations: tuple[str, ...] = ()  # per signal: "traces: otlp (http/protobuf) to URL"
    service: str | None = None
    sampler: str | None = None
    problem: str | None = None  # it should be on but cannot start (the extra is missing)

    def describe(self) -> str:
        """One line for doctor and the start-up log."""
        if self.problem is not None:
            return f"OpenTelemetry: {self.problem}"
        if not self.on:
            return f"OpenTelemetry: off ({self.reason})"
        parts = [
            *self.destinations,
            *([f"service {self.service}"] if self.service else []),
            *([f"sampler {self.sampler}"] if self.sampler else []),
        ]
        return f"OpenTelemetry: on ({self.reason})" + (f": {'; '.join(parts)}" if parts else "")


def extra_installed() -> bool:
    """True when the `otel` extra's modules can be imported."""
    try:
        return all(importlib.util.find_spec(name) is not None for name in EXTRA_MODULES)
    except ModuleNotFoundError:  # a parent package is absent
        return False


def telemetry_plan(
    environ: Mapping[str, str], *, installed: bool, service: str, already_configured: bool = False
) -> TelemetryPlan:
    """What the OTEL_* variables ask for, and whether it can be done here."""
    if already_configured:
        return TelemetryPlan(True, "configured before sqale started, e.g. by opentelemetry-instrument")
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return TelemetryPlan(False, "OTEL_SDK_DISABLED is true")
    asked = [
        name
        for name in (
            "OTEL_TRACES_EXPORTER",
            "OTEL_METRICS_EXPORTER",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        )
        if environ.get(name, "").strip() and environ[name].strip().lower() != "none"
    ]
    if not asked:
        return TelemetryPlan(
            False,
            "no OTEL_* exporter or endpoint is set; set OTEL_EXPORTER_OTLP_ENDPOINT to send traces and metrics",
        )
    if not installed:
        return TelemetryPlan(
            False,
            f"{asked[0]} is set",
            problem=f"{asked[0]} is set but the OpenTelemetry "
            f"SDK is not installed, so nothing is sent: {install_hint('otel')}",
        )
    destinations = tuple(
        d
        for signal, exporter, endpoint in SIGNALS
        if (d := _destination(environ, signal, exporter, endpoint)) is not None
    )
    named = environ.get("OTEL_SERVICE_NAME", "").strip()
    in_resource = "service.name=" in environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    return TelemetryPlan(
        True,
        f"{asked[0]} is set",
        destinations,
        service=named or ("from OTEL_RESOURCE_ATTRIBUTES" if in_resource else service),
        sampler=environ.get("OTEL_TRACES_SAMPLER", "").strip() or "parentbased_always_on",
    )


def _destination(
    environ: Mapping[str, str], signal: str, exporter_variable: str, endpoint_variable: str
) -> str | None:
    """Where one signal goes, as the SDK will send it (the OTLP exporter's endpoint rule)."""
    exporters = environ.get(exporter_variable, "").strip() or "otlp"
    if exporters.lower() == "none":
        return None
    protocol = (
        environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL", "").strip()
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip()
        or DEFAULT_PROTOCOL
    )
    own = environ.get(endpoint_variable, "").strip()
    shared = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or DEFAULT_ENDPOINT
    endpoint = own or (shared if protocol == "grpc" else f"{shared.rstrip('/')}/v1/{signal}")
    return f"{signal}: {exporters} ({protocol}) to {_without_credentials(endpoint)}"


def _without_credentials(url: str) -> str:
    """`url` without a user or password in it (a log line is no place for them)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    return urlunsplit(parts._replace(netloc=f"{host}:{parts.port}" if parts.port else host))


def start_telemetry(service: str) -> TelemetryPlan:
    """Start the SDK when the environment asks for it (once: a started process is left alone).

    The SDK reads `os.environ` itself, so the defaults above are set there, before it starts.
    Raises ConfigError when the OTEL_* variables name what the SDK cannot start (an exporter that
    is not installed, a protocol it does not know).
    """
    already = tracing_on()
    # Whether the extra is installed is asked only when the variables turn tracing on: finding its
    # modules imports their parent packages, which a run without OTEL_* has no use for.
    plan = telemetry_plan(os.environ, installed=True, service=service, already_configured=already)
    if plan.on and not already and not extra_installed():
        plan = telemetry_plan(os.environ, installed=False, service=service)
    if plan.problem is not None:
        logger.warning("%s", plan.problem)
    if not plan.on or already:
        return plan
    from opentelemetry.instrumentation.auto_instrumentation import initialize  # the otel extra

    os.environ.setdefault("OTEL_EXPORTER_OTLP_PROTOCOL", DEFAULT_PROTOCOL)
    if "service.name=" not in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        os.environ.setdefault("OTEL_SERVICE_NAME", service)
    # Its loader logs a traceback before raising; the error below says the same in one line.
    loader = logging.getLogger(initialize.__module__)
    level = loader.level
    loader.setLevel(logging.CRITICAL)
    try:
        initialize(swallow_exceptions=False)
    except Exception as exc:  # the SDK's own error for a variable it cannot use
        raise ConfigError(
            f"OpenTelemetry could not start ({exc}); check the OTEL_* variables "
            "(docs/deployment.md#opentelemetry)"
        ) from exc
    finally:
        loader.setLevel(level)
    logger.info("%s", plan.describe())
    return plan
