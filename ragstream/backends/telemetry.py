"""Passes as OpenTelemetry traces, exported over OTLP to the endpoint the configuration names
(``telemetry.otlp_endpoint``); off by default: with no endpoint every span is a no-op and
nothing leaves the machine.

A pass is one trace:

* ``ragstream.pass`` (``Engine.run``): the knowledge base, the stages run, the final
  selection's size;
* one child per stage, ``ragstream.stage <Name>`` (``controller.run_stage``): its counts (the
  chunks its view shows, kept and dropped), its decisions (edits applied, the gate's and the
  condenser's outcomes where the stage makes them), its mode and its time;
* ``ragstream.answering.answer`` (``Engine.answer``): the mode, the confidence, the sources cited, the
  tokens; a child of the pass that made the state it answers, even when it runs later or in
  another thread (the HTTP routes answer in a worker thread; the state carries the pass's
  ``link``);
* each LLM call, a child of the stage or the answer that made it: ``chat <model>``, with the
  GenAI semantic conventions' names (``gen_ai.operation.name`` "chat", ``gen_ai.provider.name``
  "openai" (the API it speaks), ``gen_ai.request.model``, ``gen_ai.response.model``,
  ``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens``,
  ``gen_ai.response.finish_reasons``, ``error.type``), and ``ragstream.agent``.

The prompt, the answer and the messages go into the spans only with
``telemetry.capture_content`` (as the GenAI conventions keep content opt-in). Headers a
tracing service needs (its key) come from ``OTEL_EXPORTER_OTLP_HEADERS``, read by the exporter
itself. The tracer provider is this module's own (``configure``), not OpenTelemetry's global
one: another library's tracing in the same process is left as it is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

if TYPE_CHECKING:  # pragma: no cover
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

    from ragstream.common.config import TelemetrySettings

log = logging.getLogger(__name__)

_LOCK = threading.Lock()
#: (the settings it was made for, the provider); None: tracing is off
_STATE: dict[str, Any] = {"key": None, "provider": None, "content": False}
_NOOP = trace.NoOpTracer()


def configure(settings: TelemetrySettings, exporter: SpanExporter | None = None) -> bool:
    """Trace to ``settings.otlp_endpoint`` from now on (``exporter``: another exporter, such as
    the SDK's in-memory one in the tests; its spans are handed over as each one ends). With
    no endpoint and no exporter, tracing is off. Called again with the same settings, nothing
    changes; with other settings, the old provider is flushed and shut down. True when on."""
    key = (settings.otlp_endpoint, settings.otlp_protocol, settings.service_name, id(exporter))
    with _LOCK:
        if _STATE["key"] == key:
            return _STATE["provider"] is not None
        old = _STATE["provider"]
        _STATE.update(key=key, provider=None, content=settings.capture_content)
        if old is not None:
            old.shutdown()
        if not settings.otlp_endpoint and exporter is None:
            return False
        _STATE["provider"] = _provider(settings, exporter)
        return True


def _provider(settings: TelemetrySettings, exporter: SpanExporter | None) -> TracerProvider:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        provider.add_span_processor(BatchSpanProcessor(_otlp(settings)))
        log.info("tracing passes to %s (%s)", settings.otlp_endpoint, settings.otlp_protocol)
    return provider


def _otlp(settings: TelemetrySettings) -> SpanExporter:
    if settings.otlp_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

        endpoint = settings.otlp_endpoint
        return Grpc(endpoint=endpoint, insecure=endpoint.startswith("http://"))
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

    return Http(endpoint=settings.otlp_endpoint)


def enabled() -> bool:
    """Whether spans are recorded and exported."""
    return _STATE["provider"] is not None


def capture_content() -> bool:
    """Whether the prompt, the answer and the messages go into the spans."""
    return bool(_STATE["content"]) and enabled()


def tracer() -> trace.Tracer:
    """The tracer of this process (a no-op one when tracing is off)."""
    provider = _STATE["provider"]
    return provider.get_tracer("ragstream") if provider is not None else _NOOP


def flush(timeout_ms: int = 5000) -> bool:
    """Send every span ended so far (a short-lived process calls this before it exits)."""
    provider = _STATE["provider"]
    return bool(provider.force_flush(timeout_ms)) if provider is not None else True


Link = tuple[int, int, int]  # a span's trace id, span id and trace flags


def link(s: trace.Span) -> Link | None:
    """What names ``s`` as a parent later, in another thread or call (None when it is not
    recorded): the answer of a pass joins the pass's trace through it."""
    if not s.is_recording():
        return None
    c = s.get_span_context()
    return (c.trace_id, c.span_id, int(c.trace_flags))


def _parent(linked: Link | None):
    """The context of a span's parent: the current span when there is one, else ``linked``."""
    if linked is None or trace.get_current_span().get_span_context().is_valid:
        return None
    trace_id, span_id, flags = linked
    return trace.set_span_in_context(trace.NonRecordingSpan(trace.SpanContext(
        trace_id, span_id, is_remote=False, trace_flags=trace.TraceFlags(flags))))


@contextmanager
def span(name: str, attributes: dict[str, Any] | None = None,
         parent: Link | None = None) -> Iterator[trace.Span]:
    """A span around the block, a child of the current one (with none current, of
    ``parent``: a ``link``); an exception that leaves the block is recorded on it (status
    ERROR, ``error.type``)."""
    with tracer().start_as_current_span(name, context=_parent(parent),
                                        attributes=_clean(attributes or {}),
                                        record_exception=True, set_status_on_exception=True) as s:
        try:
            yield s
        except BaseException as err:
            if s.is_recording():
                s.set_attribute("error.type", type(err).__name__)
            raise


def start_span(name: str, attributes: dict[str, Any] | None = None) -> trace.Span:
    """A span, a child of the current one, that the caller ends (``span.end()``) and that is
    not made current (for a generator, which is suspended between its pieces)."""
    return tracer().start_span(name, attributes=_clean(attributes or {}))


def set_attributes(s: trace.Span, attributes: dict[str, Any]) -> None:
    """Set ``attributes`` (those that are None are left out) on a recording span."""
    if s.is_recording():
        s.set_attributes(_clean(attributes))


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in attributes.items():
        if v is None:
            continue
        if isinstance(v, (list, tuple)):
            v = [x if isinstance(x, (str, bool, int, float)) else str(x) for x in v]
        elif not isinstance(v, (str, bool, int, float)):
            v = str(v)
        out[k] = v
    return out
