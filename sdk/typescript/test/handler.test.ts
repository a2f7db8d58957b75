// Deliveries of each kind to a handler's functions, through the test kit,
// and the acks their answers and errors become.

import { test } from "node:test";
import assert from "node:assert/strict";
import { Handler, PermanentError, TemporaryError, type Delivery } from "../src";
import { TestBroker } from "../src/testing";
import { create } from "@bufbuild/protobuf";
import { Capability, DeliveryKind, DeliverySchema, Outcome } from "../src/gen/tether/v1/broker_pb";

const widgets = { group: "test.tether.dev", version: "v1", resource: "widgets" };
const widget = (name: string, spec: Record<string, unknown> = {}) => ({
  apiVersion: "test.tether.dev/v1",
  kind: "Widget",
  metadata: { name, namespace: "default", uid: `uid-${name}`, labels: { app: "w" } },
  spec,
});

async function started(register: (h: Handler) => void): Promise<TestBroker> {
  const broker = await TestBroker.start();
  const h = new Handler("widgets", broker.options());
  register(h);
  await broker.run(h);
  return broker;
}

test("an answer is the OK ack's patch, status patch and result", async (t) => {
  const broker = await started((h) =>
    h.onCreate(widgets, async (d) => ({
      patch: { metadata: { labels: { seen: d.object.metadata.name } } },
      statusPatch: { phase: "Ready" },
      result: { replicas: d.object.spec.replicas },
    })),
  );
  t.after(() => broker.stop());
  const got = await broker.create(widget("a", { replicas: 3 }));
  assert.equal(got.outcome, "OK");
  assert.equal(got.binding, "create-0");
  assert.deepEqual(got.patch, { metadata: { labels: { seen: "a" } } });
  assert.deepEqual(got.statusPatch, { phase: "Ready" });
  assert.deepEqual(got.result, { replicas: 3 });
});

test("a function that returns nothing is acked OK with nothing to write", async (t) => {
  const broker = await started((h) => h.onDelete(widgets, async () => {}));
  t.after(() => broker.stop());
  const got = await broker.delete(widget("a"));
  assert.equal(got.outcome, "OK");
  assert.equal(got.patch, undefined);
  assert.equal(got.result, undefined);
});

test("errors choose the outcome: TemporaryError RETRY with its delay, PermanentError FAIL, any other RETRY", async (t) => {
  const broker = await started((h) =>
    h.onCreate(widgets, async (d) => {
      switch (d.object.spec.error) {
        case "temporary":
          throw new TemporaryError("not yet", { retryAfter: 1500 });
        case "permanent":
          throw new PermanentError("never");
        default:
          throw new Error("boom");
      }
    }),
  );
  t.after(() => broker.stop());
  assert.deepEqual(pick(await broker.create(widget("t", { error: "temporary" }))), { outcome: "RETRY", message: "not yet", retryAfter: 1500 });
  assert.deepEqual(pick(await broker.create(widget("p", { error: "permanent" }))), { outcome: "FAIL", message: "never", retryAfter: 0 });
  assert.deepEqual(pick(await broker.create(widget("o", { error: "other" }))), { outcome: "RETRY", message: "boom", retryAfter: 0 });
});

test("an update carries the old object and the diff", async (t) => {
  let seen: Delivery | undefined;
  const broker = await started((h) =>
    h.onUpdate(widgets, async (d) => {
      seen = d;
    }),
  );
  t.after(() => broker.stop());
  const got = await broker.update(widget("a", { replicas: 1 }), widget("a", { replicas: 2 }));
  assert.equal(got.outcome, "OK");
  assert.equal(seen?.kind, "update");
  assert.equal(seen?.old?.spec.replicas, 1);
  assert.deepEqual(seen?.diff, [{ op: "change", path: ["spec", "replicas"], old: 1, new: 2 }]);
  assert.equal(seen?.ref.name, "a");
  assert.equal(seen?.ref.uid, "uid-a");
});

test("a timer's tick comes with when it was due, and its binding says the interval", async (t) => {
  let seen: Delivery | undefined;
  const broker = await started((h) =>
    h.onTimer(widgets, async (d) => {
      seen = d;
      return { result: { ticked: true } };
    }, { id: "heartbeat", interval: 10_000, finalizer: "none" }),
  );
  t.after(() => broker.stop());
  const got = await broker.tick(widget("a"));
  assert.equal(got.outcome, "OK");
  assert.deepEqual(got.result, { ticked: true });
  assert.equal(seen?.kind, "tick");
  assert.ok(seen?.scheduled instanceof Date);
  const b = broker.bindings()[0];
  assert.equal(b.id, "heartbeat");
  assert.equal(b.timer?.interval?.seconds, 10n);
});

test("events recorded by a function go with its ack, whatever the outcome", async (t) => {
  const broker = await started((h) =>
    h.onCreate(widgets, async (d) => {
      d.record({ type: "Warning", reason: "Slow", message: "took long" });
      throw new TemporaryError("later");
    }),
  );
  t.after(() => broker.stop());
  const got = await broker.create(widget("a"));
  assert.equal(got.outcome, "RETRY");
  assert.deepEqual(got.events, [{ type: "Warning", reason: "Slow", message: "took long" }]);
});

test("events are dropped for a broker that lists capabilities without handler Events", async (t) => {
  const broker = await TestBroker.start();
  broker.capabilities = [Capability.CAPABILITIES];
  const h = new Handler("widgets", broker.options());
  h.onCreate(widgets, async (d) => d.record({ type: "Normal", reason: "Done" }));
  await broker.run(h);
  t.after(() => broker.stop());
  const got = await broker.create(widget("a"));
  assert.equal(got.outcome, "OK");
  assert.deepEqual(got.events, []);
  assert.deepEqual(h.brokerCapabilities(), { listed: true, offered: ["CAPABILITIES"] });
});

test("the Hello names the handler, its instance, bindings, window, SDK and capabilities", async (t) => {
  const broker = await TestBroker.start();
  const h = new Handler("widgets", { ...broker.options(), window: 4, instanceId: "me" });
  h.onCreate(widgets, async () => {}, { id: "make", namespaces: ["ns1"], labelSelector: "app=w", annotations: { a: "1", b: true, c: false }, results: "status" });
  h.onDelete({ name: "widgets" }, async () => {}, { finalizer: "strict", retries: 3, timeout: 2500 });
  await broker.run(h);
  t.after(() => broker.stop());
  const hello = broker.hellos[0];
  assert.equal(hello.handler, "widgets");
  assert.equal(hello.instanceId, "me");
  assert.equal(hello.window, 4);
  assert.equal(hello.protocolVersion, "v1");
  assert.match(hello.sdk, /^tether-typescript\//);
  assert.equal(hello.capabilities[0], Capability.CAPABILITIES);
  assert.ok(hello.capabilities.includes(Capability.HANDLER_EVENTS));
  const [make, del] = hello.bindings;
  assert.deepEqual([make.id, make.namespaces, make.labelSelector, make.annotations.length, make.results], ["make", ["ns1"], "app=w", 3, 2]);
  assert.deepEqual([del.id, del.resource?.name, del.finalizer, del.retries, del.timeout?.seconds, del.timeout?.nanos], ["delete-0", "widgets", 2, 3, 2n, 500_000_000]);
});

test("a delivery for a binding the instance did not declare, or of a kind it does not serve, is acked FAIL", async (t) => {
  const broker = await started((h) => h.onCreate(widgets, async () => {}));
  t.after(() => broker.stop());
  const ack = await broker.deliver(create(DeliverySchema, { bindingId: "nope", kind: DeliveryKind.CREATE, attempt: 1, object: new TextEncoder().encode("{}") }));
  assert.equal(ack.outcome, Outcome.FAIL);
  assert.match(ack.message, /binding "nope" is not declared/);
  const daemon = await broker.deliver(create(DeliverySchema, { bindingId: "create-0", kind: DeliveryKind.DAEMON_START, attempt: 1 }));
  assert.equal(daemon.outcome, Outcome.FAIL);
  assert.match(daemon.message, /binding "create-0" is a create binding; it does not take DAEMON_START deliveries/);
  const unknown = await broker.deliver(create(DeliverySchema, { bindingId: "create-0", kind: DeliveryKind.UNSPECIFIED, attempt: 1 }));
  assert.equal(unknown.outcome, Outcome.FAIL);
  assert.match(unknown.message, /delivery kind UNSPECIFIED is not supported by this SDK \(tether-typescript\//);
});

function pick(r: { outcome: string; message: string; retryAfter: number }) {
  return { outcome: r.outcome, message: r.message, retryAfter: r.retryAfter };
}
