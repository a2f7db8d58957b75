// A handler that answers reviews keeps one session to every broker replica
// (docs/protocol.md, admission.every): which addresses are looked up, the
// sessions over two test brokers, one of them a follower taking the session
// for reviews only, and the set following the replicas as they come and go.

import { test } from "node:test";
import assert from "node:assert/strict";
import { status } from "@grpc/grpc-js";
import { Capability } from "../src/gen/tether/v1/broker_pb";
import { Handler, RejectedError, type HandlerOptions } from "../src";
import { TestBroker } from "../src/testing";
import { dnsTarget, lookupReplicas, Replicas } from "../src/replicas";

const widgets = { group: "test.tether.dev", version: "v1", resource: "widgets" };
const widget = (name: string) => ({ apiVersion: "test.tether.dev/v1", kind: "Widget", metadata: { name, namespace: "default" } });
const quiet = { debug() {}, info() {}, warn() {}, error() {} };

/** Resolves once cond holds, polling; rejects after 5 s saying what was awaited. */
async function until(what: string, cond: () => boolean): Promise<void> {
  const deadline = Date.now() + 5000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`no ${what} within 5 s`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Runs h on the replicas' addresses until the test ends; the brokers stop after it. */
function runOn(t: { after: (fn: () => Promise<unknown>) => void }, h: Handler, ...replicas: TestBroker[]): Promise<unknown> {
  const stop = new AbortController();
  const ran = h.run(replicas.map((r) => r.address), { signal: stop.signal }).catch((err: Error) => err);
  t.after(async () => {
    stop.abort();
    await ran;
    await Promise.all(replicas.map((r) => r.stop()));
  });
  return ran;
}

async function leaderAndFollower(): Promise<[TestBroker, TestBroker, HandlerOptions]> {
  const leader = await TestBroker.start();
  const follower = await TestBroker.start();
  follower.reviewsOnly = true;
  return [leader, follower, leader.options()];
}

test("a DNS name is looked up for the replicas; an IP address, localhost and other schemes keep one session", () => {
  const cases: Record<string, boolean> = {
    "tether-broker-replicas.tether-system.svc:7443": true,
    "dns:///tether-broker-replicas.tether-system.svc:7443": true,
    "10.0.0.7:7443": false,
    "[fd00::7]:7443": false,
    "localhost:7443": false,
    "unix:///run/tether.sock": false,
    "ipv4:10.0.0.7:7443": false,
    "tether-broker": false, // no port
  };
  for (const [target, want] of Object.entries(cases)) assert.equal(dnsTarget(target) !== undefined, want, target);
  assert.deepEqual(dnsTarget("dns:///tether-broker-replicas.tether-system.svc:7443"), { host: "tether-broker-replicas.tether-system.svc", port: "7443" });
});

test("a name's replicas are each of its addresses with the port, IPv6 in brackets, sorted, without loopback ones", async () => {
  const lookup = async () => [
    { address: "10.0.0.9", family: 4 },
    { address: "fd00::7", family: 6 },
    { address: "10.0.0.8", family: 4 },
    { address: "10.0.0.8", family: 4 },
    { address: "127.0.0.1", family: 4 },
    { address: "::1", family: 6 },
  ];
  assert.deepEqual(await lookupReplicas("brokers", "7443", lookup), ["10.0.0.8:7443", "10.0.0.9:7443", "[fd00::7]:7443"]);
  await assert.rejects(lookupReplicas("brokers", "7443", async () => [{ address: "127.0.0.1", family: 4 }]), /no address/);
});

test("a handler with a validate binding keeps a session to each replica, listing CAPABILITY_EVERY_REPLICA, and answers the reviews of both", async (t) => {
  const [leader, follower, options] = await leaderAndFollower();
  const reviewed: string[] = [];
  const h = new Handler("widget-policy", options);
  h.onValidate(widgets, async (r) => {
    reviewed.push(r.name);
  });
  runOn(t, h, leader, follower);
  await Promise.all([leader.connected(), follower.connected()]);
  for (const b of [leader, follower]) assert.ok(b.hellos[0].capabilities.includes(Capability.EVERY_REPLICA), "the Hello lists CAPABILITY_EVERY_REPLICA");
  assert.equal((await leader.validate(widget("on-leader"))).allowed, true);
  assert.equal((await follower.validate(widget("on-follower"))).allowed, true);
  assert.deepEqual(reviewed.sort(), ["on-follower", "on-leader"]);
});

test("a reviews-only session takes nothing but reviews and says nothing of the leader's capabilities", async (t) => {
  const [leader, follower, options] = await leaderAndFollower();
  leader.capabilities = [Capability.CAPABILITIES, Capability.ADMISSION];
  const h = new Handler("widget-policy", options);
  h.onValidate(widgets, async () => {});
  h.onCreate(widgets, async () => {});
  runOn(t, h, leader, follower);
  await Promise.all([leader.connected(), follower.connected()]);
  const got = await follower.create(widget("a"));
  assert.equal(got.outcome, "FAIL");
  assert.match(got.message, /admission reviews only/);
  assert.deepEqual(h.brokerCapabilities().offered, ["CAPABILITIES", "ADMISSION"]);
  assert.equal((await leader.create(widget("a"))).outcome, "OK");
});

test("a handler without reviews keeps one session, dialling the addresses in turn", async (t) => {
  const a = await TestBroker.start();
  const b = await TestBroker.start();
  const h = new Handler("widgets", a.options());
  h.onCreate(widgets, async () => {});
  runOn(t, h, a, b);
  await a.connected();
  assert.equal(b.hellos.length, 0, "the second address got a Hello while the first kept the session");
  assert.ok(!a.hellos[0].capabilities.includes(Capability.EVERY_REPLICA), "a handler without reviews lists CAPABILITY_EVERY_REPLICA");
  a.disconnect(status.UNAVAILABLE, "not the leader");
  await b.connected(); // the next connection goes to the next address
});

test("a reviews-only session ended with Unavailable, its replica leading now, reconnects at once", async (t) => {
  const [leader, follower, options] = await leaderAndFollower();
  const h = new Handler("widget-policy", { ...options, reconnectMin: 3_600_000, reconnectMax: 3_600_000 });
  h.onValidate(widgets, async () => {});
  runOn(t, h, leader, follower);
  await Promise.all([leader.connected(), follower.connected()]);
  follower.reviewsOnly = false; // it leads now
  follower.disconnect(status.UNAVAILABLE, "this broker replica leads now; reconnect for a full session");
  await until("second Hello to the new leader", () => follower.hellos.length === 2); // far below the hour of backoff
});

test("a replica that refuses the handler ends run with a RejectedError, and the other replica's session", async (t) => {
  const [leader, follower, options] = await leaderAndFollower();
  follower.refuse = { code: status.PERMISSION_DENIED, details: "not granted" };
  const h = new Handler("widget-policy", { ...options, logger: quiet });
  h.onValidate(widgets, async () => {});
  const err = await runOn(t, h, leader, follower);
  assert.ok(err instanceof RejectedError, `run ended with ${err}`);
  assert.equal(err.code, "PermissionDenied");
});

test("the set starts a session for a replica that appears and ends that of one that goes, at each look-up", async () => {
  let addrs = ["a:1", "b:1"];
  const live = new Set<string>();
  const stop = new AbortController();
  const loop = async (replica: string, signal: AbortSignal) => {
    live.add(replica);
    await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
    live.delete(replica);
  };
  const ran = new Replicas(async () => addrs, loop, quiet, 20).run(stop.signal);
  await until("sessions to a and b", () => live.size === 2);
  addrs = ["b:1", "c:1"];
  await until("a gone and c come", () => !live.has("a:1") && live.has("c:1") && live.has("b:1"));
  stop.abort();
  await ran;
  assert.equal(live.size, 0, "sessions left running after run ended");
});

test("a session that ends has the replicas looked up at once; a failed look-up keeps the sessions there are", async () => {
  let lookups = 0;
  const ends: Array<() => void> = [];
  const live = new Set<string>();
  const stop = new AbortController();
  const resolve = async () => {
    lookups++;
    if (lookups === 2) throw new Error("no answer");
    return ["a:1", "b:1"];
  };
  const loop = async (replica: string, signal: AbortSignal, ended: () => void) => {
    live.add(replica);
    ends.push(ended);
    await new Promise((r) => signal.addEventListener("abort", r, { once: true }));
    live.delete(replica);
  };
  const ran = new Replicas(resolve, loop, quiet, 3_600_000).run(stop.signal);
  await until("sessions to a and b", () => live.size === 2);
  ends[0](); // the look-up that fails
  await until("a second look-up", () => lookups === 2);
  assert.equal(live.size, 2, "a failed look-up ended sessions");
  ends[0]();
  await until("a third look-up", () => lookups === 3);
  assert.equal(live.size, 2);
  stop.abort();
  await ran;
});
