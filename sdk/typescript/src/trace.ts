// Traces (docs/observability.md, "Traces"): a delivery the broker sent with
// the W3C trace context of its delivery span (Delivery.trace_context,
// docs/protocol.md rule [trace]) names its trace in its log lines
// (trace_id), and its function runs in a "tether.handle" span whose parent
// is the broker's span, as in the Go SDK. The span goes to OpenTelemetry's
// global tracer provider, which is a no-op until the program registers one.

import { context, createTraceState, SpanKind, SpanStatusCode, trace, TraceFlags, type SpanContext, type TraceState } from "@opentelemetry/api";
import { DeliveryKind, Outcome, type Ack, type Delivery as DeliveryProto } from "./gen/tether/v1/broker_pb";

/** The span a binding's function runs in. */
export const SPAN_HANDLE = "tether.handle";

/** The instrumentation scope of the SDK's spans. */
export const TRACER = "tether";

// A traceparent header as W3C Trace Context level 1 defines it.
const traceparent = /^[ \t]*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?[ \t]*$/;

/**
 * The broker's delivery span, from d's trace context; undefined without
 * one, or with one the W3C rules make invalid (then there is no trace
 * either). The SDK reads the header itself: the API's propagation.extract
 * uses the program's global propagator, which is none unless it set one,
 * and the W3C propagator of @opentelemetry/core would be a dependency whose
 * current major needs Node 22.
 */
export function remoteParent(d: DeliveryProto): SpanContext | undefined {
  const m = traceparent.exec(d.traceContext.traceparent ?? "");
  if (!m) return undefined;
  const [, version, traceId, spanId, flags, rest] = m;
  if (version === "ff" || (version === "00" && rest) || /^0+$/.test(traceId) || /^0+$/.test(spanId)) return undefined;
  return { traceId, spanId, traceFlags: parseInt(flags, 16) & TraceFlags.SAMPLED, isRemote: true, traceState: traceState(d.traceContext.tracestate) };
}

function traceState(header: string | undefined): TraceState | undefined {
  return header ? createTraceState(header) : undefined;
}

/** What a delivery's log lines carry about its trace: trace_id, or nothing. */
export function traceFields(d: DeliveryProto): { trace_id?: string } {
  const p = remoteParent(d);
  return p ? { trace_id: p.traceId } : {};
}

/** A delivery kind as the broker's spans and metrics name it: create, daemon-start, ... */
export function kindLabel(k: DeliveryKind): string {
  return (DeliveryKind[k] ?? String(k)).toLowerCase().replace(/_/g, "-");
}

/**
 * run's ack, run in d's span when d carries a trace context: the span is
 * the active one while the function runs (seen through a context manager
 * the program registered, as the OpenTelemetry Node SDK does), and ends
 * with the ack's outcome. run must not throw: it answers with an ack.
 */
export function traced(d: DeliveryProto, handler: string, run: () => Promise<Ack>): Promise<Ack> {
  const parent = remoteParent(d);
  if (!parent) return run();
  const attributes = {
    "tether.handler": handler,
    "tether.binding.id": d.bindingId,
    "tether.delivery.id": d.id,
    "tether.delivery.kind": kindLabel(d.kind),
    "tether.delivery.attempt": d.attempt,
  };
  const ctx = trace.setSpanContext(context.active(), parent);
  return trace.getTracer(TRACER).startActiveSpan(SPAN_HANDLE, { kind: SpanKind.CONSUMER, attributes }, ctx, async (span) => {
    try {
      const ack = await run();
      if (span.isRecording()) {
        span.setAttribute("tether.ack.outcome", `OUTCOME_${Outcome[ack.outcome]}`);
        if (ack.outcome !== Outcome.OK) span.setStatus({ code: SpanStatusCode.ERROR, message: ack.message });
      }
      return ack;
    } finally {
      span.end();
    }
  });
}
