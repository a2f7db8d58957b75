// Traces (docs/observability.md, "Traces"): the Hello lists
// CAPABILITY_TRACE_CONTEXT; a delivery with the broker's trace context
// names its trace in its log lines, and its function runs in a
// tether.handle span under the broker's span, recorded here by
// OpenTelemetry's own SDK (sdk-trace-base, with the AsyncLocalStorage
// context manager a Node program registers).

import { test } from "node:test";
import assert from "node:assert/strict";
import { context, SpanKind, SpanStatusCode, trace, type Span } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Handler, PermanentError, type Logger } from "../src";
import { TestBroker } from "../src/testing";
import { AdmissionOperation, Capability, DeliveryKind, DeliverySchema, Outcome } from "../src/gen/tether/v1/broker_pb";
import { remoteParent } from "../src/trace";

const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT = "00f067aa0ba902b7";
const widgets = { group: "test.tether.dev", version: "v1", resource: "widgets" };
const widget = { apiVersion: "test.tether.dev/v1", kind: "Widget", metadata: { name: "w1", namespace: "ns", uid: "u1" }, spec: { fail: false } };

type Entry = { message: string } & Record<string, unknown>;

function recording(entries: Entry[]): Logger {
  const write = (message: string, fields?: Record<string, unknown>) => void entries.push({ message, ...fields });
  return { debug: write, info: write, warn: write, error: write };
}

/** Registers OpenTelemetry's SDK, as a Node program does, until the test ends; the spans it records. */
function recordSpans(t: { after(fn: () => void): void }): InMemorySpanExporter {
  const spans = new InMemorySpanExporter();
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }));
  t.after(() => {
    trace.disable();
    context.disable();
  });
  return spans;
}

function delivery(binding: string, traceContext: Record<string, string>, fail = false) {
  return create(DeliverySchema, {
    bindingId: binding,
    kind: DeliveryKind.CREATE,
    attempt: 2,
    object: new TextEncoder().encode(JSON.stringify({ ...widget, spec: { fail } })),
    ref: { resource: widgets, namespace: "ns", name: "w1", uid: "u1" },
    deadline: timestampFromDate(new Date(Date.now() + 10_000)),
    traceContext,
  });
}

test("the traceparent's rules: a valid header is the parent, an invalid one none", () => {
  const cases: Array<[string, string | undefined, boolean]> = [
    ["valid", `00-${TRACE}-${PARENT}-01`, true],
    ["none", undefined, false],
    ["upper case", `00-${TRACE.toUpperCase()}-${PARENT}-01`, false],
    ["all zero trace", `00-${"0".repeat(32)}-${PARENT}-01`, false],
    ["all zero parent", `00-${TRACE}-${"0".repeat(16)}-01`, false],
    ["version ff", `ff-${TRACE}-${PARENT}-01`, false],
    ["version 00 with more", `00-${TRACE}-${PARENT}-01-x`, false],
    ["a later version with more", `01-${TRACE}-${PARENT}-01-x`, true],
  ];
  for (const [name, header, valid] of cases) {
    const p = remoteParent(delivery("create", header ? { traceparent: header } : {}));
    assert.equal(p?.traceId, valid ? TRACE : undefined, name);
  }
  const p = remoteParent(delivery("create", { traceparent: `00-${TRACE}-${PARENT}-01`, tracestate: "k=v" }));
  assert.deepEqual([p?.spanId, p?.traceFlags, p?.isRemote, p?.traceState?.get("k")], [PARENT, 1, true, "v"]);
});

test("a traced delivery's function runs in a tether.handle span under the broker's, and its log lines name the trace", async (t) => {
  const spans = recordSpans(t);

  const entries: Entry[] = [];
  const broker = await TestBroker.start();
  const seen: Array<Span | undefined> = [];
  const h = new Handler("widgets", { ...broker.options(), logger: recording(entries) });
  h.onCreate(widgets, async (d) => {
    await new Promise((resolve) => setImmediate(resolve)); // the span stays active across awaits
    seen.push(trace.getActiveSpan());
    d.log.info("creating");
    if (d.object.spec.fail) throw new PermanentError("no");
  }, { id: "create" });
  await broker.run(h);
  t.after(() => broker.stop());
  assert.ok(broker.hellos[0].capabilities.includes(Capability.TRACE_CONTEXT), "the Hello lists CAPABILITY_TRACE_CONTEXT");

  const ok = await broker.deliver(delivery("create", { traceparent: `00-${TRACE}-${PARENT}-01` }));
  const failed = await broker.deliver(delivery("create", { traceparent: `00-${TRACE}-${PARENT}-01` }, true));
  const untraced = await broker.deliver(delivery("create", {}));
  assert.deepEqual([ok.outcome, failed.outcome, untraced.outcome], [Outcome.OK, Outcome.FAIL, Outcome.OK]);

  const got = spans.getFinishedSpans();
  assert.equal(got.length, 2, "one span per traced delivery, none for the untraced one");
  assert.deepEqual(seen.map((s) => s?.spanContext().spanId), [...got.map((s) => s.spanContext().spanId), undefined]);
  for (const [s, ack, outcome] of [[got[0], ok, "OUTCOME_OK"], [got[1], failed, "OUTCOME_FAIL"]] as const) {
    assert.equal(s.name, "tether.handle");
    assert.equal(s.kind, SpanKind.CONSUMER);
    assert.equal(s.instrumentationScope.name, "tether");
    assert.equal(s.spanContext().traceId, TRACE);
    assert.equal(s.parentSpanContext?.spanId, PARENT);
    assert.deepEqual(s.attributes, {
      "tether.handler": "widgets",
      "tether.binding.id": "create",
      "tether.delivery.id": ack.deliveryId,
      "tether.delivery.kind": "create",
      "tether.delivery.attempt": 2,
      "tether.ack.outcome": outcome,
    });
  }
  assert.equal(got[0].status.code, SpanStatusCode.UNSET);
  assert.deepEqual(got[1].status, { code: SpanStatusCode.ERROR, message: "no" });

  const about = (id: string) => entries.filter((e) => e.delivery === id);
  for (const ack of [ok, failed]) {
    const lines = about(ack.deliveryId);
    assert.ok(lines.some((e) => e.message === "creating"), "the function's line");
    assert.ok(lines.length >= 2, "the function's line and the SDK's");
    assert.deepEqual(lines.map((e) => e.trace_id), lines.map(() => TRACE));
  }
  assert.ok(about(untraced.deliveryId).length > 0);
  assert.deepEqual(about(untraced.deliveryId).filter((e) => "trace_id" in e), []);
});

test("without a registered provider the function runs as before, and its log lines still name the trace", async (t) => {
  const entries: Entry[] = [];
  const broker = await TestBroker.start();
  const h = new Handler("widgets", { ...broker.options(), logger: recording(entries) });
  h.onCreate(widgets, async (d) => {
    d.log.info("creating", { active: trace.getActiveSpan()?.isRecording() ?? false });
    return { result: "done" };
  }, { id: "create" });
  await broker.run(h);
  t.after(() => broker.stop());
  const ack = await broker.deliver(delivery("create", { traceparent: `00-${TRACE}-${PARENT}-01` }));
  assert.equal(ack.outcome, Outcome.OK);
  assert.equal(new TextDecoder().decode(ack.result), '"done"');
  const line = entries.find((e) => e.message === "creating");
  assert.deepEqual([line?.trace_id, line?.active], [TRACE, false]);
});

test("a traced review's function runs in a tether.handle span under the broker's, as a lifecycle function does", async (t) => {
  const spans = recordSpans(t);
  const broker = await TestBroker.start();
  let active: Span | undefined;
  const h = new Handler("widgets", broker.options());
  h.onValidate(widgets, async () => {
    await new Promise((resolve) => setImmediate(resolve));
    active = trace.getActiveSpan();
  }, { id: "validate" });
  await broker.run(h);
  t.after(() => broker.stop());
  const ack = await broker.deliver(create(DeliverySchema, {
    bindingId: "validate",
    kind: DeliveryKind.ADMISSION,
    attempt: 1,
    object: new TextEncoder().encode(JSON.stringify(widget)),
    ref: { resource: widgets, namespace: "ns", name: "w1" },
    deadline: timestampFromDate(new Date(Date.now() + 10_000)),
    admission: { uid: "review-1", operation: AdmissionOperation.CREATE, userName: "test", request: new TextEncoder().encode('{"operation":"CREATE"}') },
    traceContext: { traceparent: `00-${TRACE}-${PARENT}-01` },
  }));
  assert.equal(ack.outcome, Outcome.OK);
  assert.equal(ack.admission?.allowed, true);
  const got = spans.getFinishedSpans();
  assert.equal(got.length, 1);
  assert.deepEqual([got[0].name, got[0].spanContext().traceId, got[0].parentSpanContext?.spanId], ["tether.handle", TRACE, PARENT]);
  assert.deepEqual([got[0].attributes["tether.delivery.kind"], got[0].attributes["tether.ack.outcome"]], ["admission", "OUTCOME_OK"]);
  assert.equal(active?.spanContext().spanId, got[0].spanContext().spanId, "the span is active while the function runs");
});
