"""Traces: a delivery the broker sent with the W3C trace context of its
delivery span (Delivery.trace_context, docs/protocol.md rule [trace]) names
its trace in the delivery's log lines (trace_id), and, when the
opentelemetry package is importable, its function runs in a span
"tether.handle" whose parent is the broker's span (docs/observability.md,
"Traces"). Without opentelemetry nothing else happens: the SDK does not
depend on it."""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator
from typing import Any

from .v1 import broker_pb2 as pb

# The span a binding's function runs in, as in the Go SDK.
SPAN_HANDLE = "tether.handle"
# The instrumentation scope of the SDK's spans.
TRACER = "tether"

# A traceparent header as W3C Trace Context level 1 defines it.
_TRACEPARENT = re.compile(r"[ \t]*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?[ \t]*")


def trace_id(d: pb.Delivery) -> str:
    """The id of the trace d's trace context continues; "" without one, or
    with one the W3C rules make invalid (then there is no trace either)."""
    header = d.trace_context.get("traceparent")
    if not header:
        return ""
    m = _TRACEPARENT.fullmatch(header)
    if m is None:
        return ""
    version, tid, sid, _, rest = m.groups()
    if version == "ff" or (version == "00" and rest) or tid == "0" * 32 or sid == "0" * 16:
        return ""
    return tid


def log_fields(d: pb.Delivery) -> dict[str, str]:
    """What a delivery's log lines carry about its trace: trace_id, or nothing."""
    tid = trace_id(d)
    return {"trace_id": tid} if tid else {}


@functools.cache
def _otel() -> tuple[Any, Any] | None:
    """opentelemetry's trace API and its W3C propagator; None when the
    package is not importable. Looked for once, at the first traced
    delivery."""
    try:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:
        return None
    return trace, TraceContextTextMapPropagator()


class Handling:
    """The span of one delivery's function; ended(ack) gives it the outcome.
    Without a span (no trace context, or no opentelemetry) it does nothing."""

    def __init__(self, span: Any = None, api: Any = None):
        self._span, self._api = span, api

    def ended(self, ack: pb.Ack) -> None:
        if self._span is None or not self._span.is_recording():
            return
        self._span.set_attribute("tether.ack.outcome", pb.Outcome.Name(ack.outcome))
        if ack.outcome != pb.OUTCOME_OK:
            self._span.set_status(self._api.Status(self._api.StatusCode.ERROR, ack.message))


@contextlib.contextmanager
def handling(d: pb.Delivery, handler: str) -> Iterator[Handling]:
    """Run the block in d's "tether.handle" span, the current span for the
    function (an async one directly, a sync one through the copy of the
    context its thread gets), when d carries a trace context and
    opentelemetry is importable. The span goes to opentelemetry's global
    tracer provider (trace.set_tracer_provider), which records nothing
    unless the program set one; the function's own spans are children of
    it either way."""
    otel = _otel() if d.trace_context else None
    if otel is None:
        yield Handling()
        return
    api, propagator = otel
    parent = propagator.extract(dict(d.trace_context))
    attributes = {"tether.binding.id": d.binding_id, "tether.delivery.id": d.id,
                  "tether.delivery.kind": kind_name(d.kind), "tether.delivery.attempt": d.attempt}
    if handler:
        attributes["tether.handler"] = handler
    with api.get_tracer(TRACER).start_as_current_span(
            SPAN_HANDLE, context=parent, kind=api.SpanKind.CONSUMER, attributes=attributes,
            record_exception=False, set_status_on_exception=False) as span:
        yield Handling(span, api)


def kind_name(kind: int) -> str:
    """A delivery kind as the broker's spans and metrics name it: create,
    daemon-start, ..."""
    try:
        name = pb.DeliveryKind.Name(kind)
    except ValueError:  # newer than these stubs
        return str(kind)
    return name.removeprefix("DELIVERY_KIND_").lower().replace("_", "-")

