// Daemons through the test kit: the start acked as soon as the function
// runs, the stop acked once it has returned, a return by itself reported
// with DaemonExited, and the drain's Goodbye waiting for the daemons.

import { test } from "node:test";
import assert from "node:assert/strict";
import { Handler, TemporaryError } from "../src";
import { TestBroker } from "../src/testing";
import { BindingKind, type DaemonExited } from "../src/gen/tether/v1/broker_pb";

const widgets = { group: "test.tether.dev", version: "v1", resource: "widgets" };
const widget = (name: string) => ({ apiVersion: "test.tether.dev/v1", kind: "Widget", metadata: { name, namespace: "default", uid: `uid-${name}` }, spec: {} });

const aborted = (signal: AbortSignal) => new Promise((resolve) => signal.addEventListener("abort", resolve));

test("a daemon's start is acked while it runs; its stop aborts its signal and is acked once it returns", async (t) => {
  const broker = await TestBroker.start();
  const h = new Handler("widgets", broker.options());
  let returned = false;
  h.onDaemon(widgets, async (d) => {
    await aborted(d.signal);
    returned = true;
  }, { cancellationTimeout: 5000, restart: true });
  await broker.run(h);
  t.after(() => broker.stop());
  assert.equal((await broker.startDaemon(widget("a"))).outcome, "OK");
  assert.equal(returned, false, "the start is acked before the function returns");
  const stop = await broker.stopDaemon(widget("a"));
  assert.equal(stop.outcome, "OK");
  assert.equal(returned, true, "the stop is acked after the function returned");
  const b = broker.bindings()[0];
  assert.deepEqual([b.kind, b.daemon?.restart, b.daemon?.cancellationTimeout?.seconds], [BindingKind.DAEMON, true, 5n]);
});

test("a daemon that returns by itself is reported with DaemonExited, failed with its retryAfter", async (t) => {
  const broker = await TestBroker.start();
  const h = new Handler("widgets", broker.options());
  h.onDaemon(widgets, async (d) => {
    if (d.object.metadata.name === "bad") throw new TemporaryError("lost the watch", { retryAfter: 2000 });
    return { statusPatch: { done: true } };
  });
  await broker.run(h);
  t.after(() => broker.stop());
  await broker.startDaemon(widget("bad"));
  await broker.startDaemon(widget("good"));
  const exits = await until(() => {
    const e = broker.received.filter((m) => m.case === "daemonExited").map((m) => m.value as DaemonExited);
    return e.length === 2 ? e : undefined;
  });
  const bad = exits.find((e) => e.uid === "uid-bad")!;
  const good = exits.find((e) => e.uid === "uid-good")!;
  assert.deepEqual([bad.failed, bad.message, Number(bad.retryAfter?.seconds)], [true, "lost the watch", 2]);
  assert.deepEqual([good.failed, new TextDecoder().decode(good.statusPatch)], [false, '{"done":true}']);
});

test("on stop the daemons are stopped first, and Goodbye goes once none runs", async () => {
  const broker = await TestBroker.start();
  const h = new Handler("widgets", broker.options());
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  let stopping!: () => void;
  const told = new Promise<void>((r) => (stopping = r));
  const order: string[] = [];
  h.onDaemon(widgets, async (d) => {
    await aborted(d.signal);
    stopping();
    await held;
    order.push("daemon returned");
  });
  h.onCreate(widgets, async () => {});
  await broker.run(h);
  await broker.startDaemon(widget("a"));
  const stopped = broker.stop();
  await told;
  // A Goodbye sent before this delivery's ack would have arrived before it.
  assert.equal((await broker.create(widget("b"))).outcome, "RETRY", "nothing new runs while draining");
  assert.ok(!broker.received.some((m) => m.case === "goodbye"), "no Goodbye while the daemon runs");
  release();
  assert.equal(await stopped, undefined);
  order.push(...broker.received.filter((m) => m.case === "goodbye").map(() => "goodbye"));
  assert.deepEqual(order, ["daemon returned", "goodbye"]);
});

async function until<T>(get: () => T | undefined): Promise<T> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const v = get();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error("condition not met within 10 s");
    await new Promise((r) => setTimeout(r, 5));
  }
}
