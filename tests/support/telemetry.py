"""OpenTelemetry's own SDK in memory, for tests: the spans and metrics of what one test runs.

The `otel` fixture installs, once per test process, the SDK's TracerProvider with its
InMemorySpanExporter and a MeterProvider with its InMemoryMetricReader as the global providers
(they can be set only once). A sampler records spans only while a test holds the fixture, so
every other test keeps paying only for non-recording spans. Tests using it skip, saying why,
when the `otel` extra is not installed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

try:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
except ImportError:  # the otel extra is not installed: the fixture skips
    INSTALLED = False
else:
    INSTALLED = True

SKIP_REASON = "the otel extra is not installed (pip install -e '.[dev]' brings it)"


if INSTALLED:

    class _Gate(Sampler):
        """Records while a test holds the fixture; drops every span otherwise."""

        def __init__(self) -> None:
            self.on = False

        def should_sample(
            self,
            parent_context: Any,
            trace_id: int,
            name: str,
            kind: Any = None,
            attributes: Any = None,
            links: Any = None,
            trace_state: Any = None,
        ) -> SamplingResult:
            # The parent's trace state carries on, as the SDK's own parent-based samplers keep it.
            parent = trace.get_current_span(parent_context).get_span_context()
            return SamplingResult(
                Decision.RECORD_AND_SAMPLE if self.on else Decision.DROP,
                attributes,
                trace_state=parent.trace_state if parent.is_valid else None,
            )

        def get_description(self) -> str:
            return "tests.support.telemetry gate"


@dataclass
class _Installed:
    gate: Any
    exporter: Any
    reader: Any


_INSTALLED: list[_Installed] = []  # the process's one SDK (global providers are set once)


def _install() -> _Installed:
    if not _INSTALLED:
        gate, exporter, reader = _Gate(), InMemorySpanExporter(), InMemoryMetricReader()
        provider = TracerProvider(sampler=gate)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        if trace.get_tracer_provider() is not provider:
            pytest.skip("another OpenTelemetry SDK is already installed in this process")
        _INSTALLED.append(_Installed(gate, exporter, reader))
    return _INSTALLED[0]


@dataclass
class Telemetry:
    """What the test's code emitted."""

    installed: _Installed

    def spans(self) -> list[ReadableSpan]:
        """Every finished span, in the order they ended."""
        return list(self.installed.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        """The spans called `name`, in the order they started."""
        return sorted((s for s in self.spans() if s.name == name), key=lambda s: s.start_time or 0)

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        """The spans whose parent is `parent`, in the order they started."""
        own = parent.context.span_id
        return sorted(
            (s for s in self.spans() if s.parent is not None and s.parent.span_id == own),
            key=lambda s: s.start_time or 0,
        )

    def descendants(self, root: ReadableSpan) -> list[ReadableSpan]:
        """`root` and every span under it."""
        return [root, *(d for child in self.children(root) for d in self.descendants(child))]

    def tree(self, root: ReadableSpan, depth: int = 0) -> list[str]:
        """The span names under `root`, indented two spaces a level (a picture to compare whole)."""
        lines = [f"{'  ' * depth}{root.name}"]
        for child in self.children(root):
            lines += self.tree(child, depth + 1)
        return lines

    def points(self, metric: str) -> list[tuple[dict[str, Any], Any]]:
        """(attributes, data point) of every point of `metric` recorded so far in this process."""
        data = self.installed.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for one in scope.metrics:
                    if one.name == metric:
                        found += [(dict(p.attributes or {}), p) for p in one.data.data_points]
        return found

    def everything(self) -> str:
        """Every name, attribute, event and status text of every span, as one text to search."""
        return json.dumps(
            [
                {
                    "name": s.name,
                    "attributes": dict(s.attributes or {}),
                    "status": s.status.description,
                    "events": [(e.name, dict(e.attributes or {})) for e in s.events],
                    "resource": dict(s.resource.attributes),
                }
                for s in self.spans()
            ],
            default=str,
            ensure_ascii=False,
        )


def attributes(span: ReadableSpan, names: Sequence[str]) -> dict[str, Any]:
    """The span's attributes among `names` (tuples for sequences, to compare whole)."""
    found = dict(span.attributes or {})
    return {k: tuple(v) if isinstance(v, list | tuple) else v for k, v in found.items() if k in names}


@pytest.fixture
def otel() -> Iterator[Telemetry]:
    """Record the test's spans and metrics with the SDK's in-memory exporter and reader."""
    if not INSTALLED:
        pytest.skip(SKIP_REASON)
    installed = _install()
    installed.exporter.clear()
    installed.gate.on = True
    try:
        yield Telemetry(installed)
    finally:
        installed.gate.on = False
        installed.exporter.clear()
