// The stream's life through the test kit: the window, cancellation, an
// oversized answer, the drain with Goodbye, reconnecting after the broker
// ends a stream, and stopping on a refused Hello.

import { test } from "node:test";
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { status } from "@grpc/grpc-js";
import { DeliveryKind, DeliverySchema, Outcome } from "../src/gen/tether/v1/broker_pb";
import { Handler, RejectedError } from "../src";
import { TestBroker } from "../src/testing";

const widgets = { group: "test.tether.dev", version: "v1", resource: "widgets" };
const bytes = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));
const delivery = (id: string, spec: Record<string, unknown> = {}) =>
  create(DeliverySchema, { id, bindingId: "create-0", kind: DeliveryKind.CREATE, attempt: 1, object: bytes({ metadata: { name: id }, spec }) });

/** A latch: a promise and the function that resolves it. */
function latch(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { wait, open };
}

test("a delivery past the window is acked RETRY at once; those within it run", async (t) => {
  const broker = await TestBroker.start();
  const h = new Handler("widgets", { ...broker.options(), window: 2 });
  const release = latch();
  h.onCreate(widgets, async () => {
    await release.wait;
  });
  await broker.run(h);
  t.after(() => broker.stop());
  const first = broker.deliver(delivery("a"));
  const second = broker.deliver(delivery("b"));
  const third = await broker.deliver(delivery("c"));
  assert.equal(third.outcome, Outcome.RETRY);
  assert.match(third.message, /window of 2 exceeded/);
  release.open();
  assert.equal((await first).outcome, Outcome.OK);
  assert.equal((await second).outcome, Outcome.OK);
});

test("a cancelled delivery's signal is aborted, and it is still acked", async (t) => {
  const broker = await TestBroker.start();
  const h = new Handler("widgets", broker.options());
  const started = latch();
  h.onCreate(widgets, async (d) => {
    started.open();
    await new Promise((resolve) => d.signal.addEventListener("abort", resolve));
    throw d.signal.reason;
  });
  await broker.run(h);
  t.after(() => broker.stop());
  const acked = broker.deliver(delivery("a"));
  await started.wait;
  broker.cancel("a", "object deleted");
  const ack = await acked;
  assert.equal(ack.outcome, Outcome.RETRY);
  assert.match(ack.message, /cancelled by the broker: object deleted/);
});

test("an answer larger than the broker takes is acked FAIL, saying so", async (t) => {
  const broker = await TestBroker.start();
  const h = new Handler("widgets", broker.options());
  h.onCreate(widgets, async () => ({ statusPatch: { blob: "x".repeat(5 << 20) } }));
  await broker.run(h);
  t.after(() => broker.stop());
  const ack = await broker.deliver(delivery("a"));
  assert.equal(ack.outcome, Outcome.FAIL);
  assert.match(ack.message, /more than the 4194304 the broker takes/);
});

test("on stop the handler says Goodbye, acks what is in flight, and ends; a delivery after Goodbye is handed back RETRY", async (t) => {
  const broker = await TestBroker.start();
  const h = new Handler("widgets", broker.options());
  const started = latch();
  const release = latch();
  h.onCreate(widgets, async (d) => {
    if (d.id === "late") return;
    started.open();
    await release.wait;
    return { result: "done" };
  });
  await broker.run(h);
  const acked = broker.deliver(delivery("a"));
  await started.wait;
  const stopped = broker.stop();
  await until(() => broker.received.some((m) => m.case === "goodbye"));
  const late = await broker.deliver(delivery("late"));
  assert.equal(late.outcome, Outcome.RETRY);
  release.open();
  const ack = await acked;
  assert.equal(ack.outcome, Outcome.OK);
  assert.equal(await stopped, undefined, "run() resolves without an error");
  t.diagnostic(`received: ${broker.received.map((m) => m.case).join(", ")}`);
});

test("a stream the broker ends is opened again with a new Hello", async (t) => {
  const broker = await TestBroker.start();
  const h = new Handler("widgets", broker.options());
  h.onCreate(widgets, async () => ({ result: 1 }));
  await broker.run(h);
  t.after(() => broker.stop());
  broker.disconnect(status.UNAVAILABLE, "not the leader");
  await broker.connected();
  await until(() => broker.hellos.length === 2);
  assert.equal(broker.hellos[1].instanceId, broker.hellos[0].instanceId, "the same instance id across sessions");
  assert.equal((await broker.deliver(delivery("a"))).outcome, Outcome.OK);
});

test("a Hello refused with a permanent code stops run() with a RejectedError; a retried code is tried again", async () => {
  const broker = await TestBroker.start();
  broker.refuse = { code: status.RESOURCE_EXHAUSTED, details: "too many Hellos" };
  const h = new Handler("widgets", broker.options());
  h.onCreate(widgets, async () => {});
  const ran = h.run(broker.address);
  await until(() => broker.hellos.length >= 2);
  broker.refuse = { code: status.INVALID_ARGUMENT, details: 'binding "create-0": unknown resource' };
  await assert.rejects(ran, (err: unknown) => {
    assert.ok(err instanceof RejectedError);
    assert.equal(err.code, "InvalidArgument");
    assert.match(err.details, /unknown resource/);
    return true;
  });
  await broker.stop();
});

/** Waits for cond, polling, up to the kit's timeout. */
async function until(cond: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error("condition not met within 10 s");
    await new Promise((r) => setTimeout(r, 5));
  }
}
