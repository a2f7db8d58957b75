// The test kit: a broker played in the test's process, over real gRPC on
// loopback, so that a handler's functions are tested without a cluster.
// Deliver a create, update, delete, resume, tick or event to the registered
// function and read back its outcome, patches and result as plain values.
//
//   const broker = await TestBroker.start();
//   const h = new Handler("replicator", broker.options());
//   h.onCreate(secrets, replicate);
//   broker.run(h);
//   const got = await broker.create(secret);
//   assert.equal(got.outcome, "OK");
//   await broker.stop();
//
// It delivers what it is told to, to the binding it is told to, with no
// selectors, holds or retries of its own: those are the broker's, tested by
// the broker's end-to-end suites.

import * as grpc from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate, timestampNow } from "@bufbuild/protobuf/wkt";
import {
  AdmissionOperation,
  BindingKind,
  Capability,
  ConnectResponseSchema,
  DeliveryKind,
  DeliverySchema,
  DiffEntry_Operation,
  HandlerEvent_Type,
  Outcome,
  type Ack,
  type Binding,
  type ConnectRequest,
  type ConnectResponse,
  type Delivery as DeliveryProto,
  type Hello,
} from "./gen/tether/v1/broker_pb";
import { millis } from "./binding";
import { capabilities as sdkCapabilities } from "./capabilities";
import type { PatchOp, Review } from "./admission";
import type { DiffEntry, HandlerEvent, KubeObject } from "./delivery";
import type { Handler, HandlerOptions } from "./handler";
import { stderrLogger } from "./logger";
import { brokerServiceDefinition } from "./service";

/** Bounds every wait of a TestBroker, in milliseconds: for the handler to connect, and for one answer. */
export const TIMEOUT = 10_000;

/** What the function answered to one delivery. */
export interface Result {
  binding: string;
  outcome: "OK" | "RETRY" | "FAIL";
  /** The error's text, for RETRY and FAIL. */
  message: string;
  /** The delay a TemporaryError asked for, in milliseconds; 0: the binding's backoff. */
  retryAfter: number;
  /** Decoded from JSON; undefined when the function set none. */
  patch?: KubeObject;
  statusPatch?: KubeObject;
  result?: unknown;
  events: HandlerEvent[];
}

/** What a validate or mutate function answered to one review. */
export interface ReviewResult {
  binding: string;
  /** OK: the function answered (allowed or denied); FAIL: it failed, and the binding's failure policy would decide. */
  outcome: "OK" | "FAIL";
  allowed: boolean;
  /** Why it was denied, or why the function failed. */
  message: string;
  /** The HTTP status of a denial; 0 means 403. */
  code: number;
  warnings: string[];
  /** A mutate function's JSON patch; undefined when it changed nothing. */
  patch?: PatchOp[];
}

/** How the broker answers a Hello: a Welcome (the default), or a refusal with a gRPC status. */
export interface Refusal {
  code: grpc.status;
  details: string;
}

type Stream = grpc.ServerDuplexStream<ConnectRequest, ConnectResponse>;

export class TestBroker {
  /** The Hellos received, one per session. */
  readonly hellos: Hello[] = [];
  /** The authorization metadata of each stream, "" when it had none. */
  readonly authorizations: string[] = [];
  /** Messages other than Hello and Ack the handler sent (goodbye, flowControl), in order. */
  readonly received: ConnectRequest["message"][] = [];
  /** The capabilities the Welcome lists (by default the SDK's own); empty plays a broker older than capabilities. */
  capabilities: Capability[] = [...sdkCapabilities];
  /** When set, the next Hellos are refused with it. */
  refuse?: Refusal;
  /** Plays a broker replica that does not lead: the next Welcomes say reviews_only (CAPABILITY_EVERY_REPLICA). */
  reviewsOnly = false;

  private stream?: Stream;
  private waiters: Array<() => void> = [];
  private readonly pending = new Map<string, (a: Ack) => void>();
  private seq = 0;
  private stopper?: AbortController;
  private running?: Promise<unknown>;

  private constructor(
    private readonly server: grpc.Server,
    readonly address: string,
  ) {}

  /**
   * Starts a broker on a loopback port: plain text, or TLS with the given
   * certificate and key (PEM), as a broker outside insecure mode serves.
   */
  static async start(options: { tls?: { cert: Buffer; key: Buffer } } = {}): Promise<TestBroker> {
    const server = new grpc.Server();
    const creds = options.tls
      ? grpc.ServerCredentials.createSsl(null, [{ cert_chain: options.tls.cert, private_key: options.tls.key }], false)
      : grpc.ServerCredentials.createInsecure();
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync("127.0.0.1:0", creds, (err, p) => (err ? reject(err) : resolve(p))),
    );
    const b = new TestBroker(server, `${options.tls ? "localhost" : "127.0.0.1"}:${port}`);
    server.addService(brokerServiceDefinition, { connect: (s: Stream) => b.serve(s) });
    return b;
  }

  /** The handler options that make a handler talk to this broker: plain text, quick reconnects, warnings only. */
  options(): HandlerOptions {
    return { insecure: true, reconnectMin: 10, reconnectMax: 100, logger: stderrLogger("warn") };
  }

  /** Runs h until stop(); resolves once it is connected. h must be made with options(). */
  async run(h: Handler): Promise<void> {
    this.stopper = new AbortController();
    this.running = h.run(this.address, { signal: this.stopper.signal }).catch((err: Error) => err);
    await this.connected();
  }

  /** Stops the handler (it drains and says Goodbye), then the broker; resolves to what run() ended with. */
  async stop(): Promise<unknown> {
    this.stopper?.abort();
    const ended = await this.running;
    this.server.forceShutdown();
    return ended;
  }

  /** Resolves when a handler is connected (a Hello welcomed). */
  connected(): Promise<void> {
    if (this.stream) return Promise.resolve();
    return within(new Promise<void>((resolve) => this.waiters.push(resolve)), "the handler to connect");
  }

  /** The bindings of the last Hello. */
  bindings(): Binding[] {
    return this.hellos.at(-1)?.bindings ?? [];
  }

  create(obj: KubeObject): Promise<Result> {
    return this.deliverTo(this.binding(BindingKind.CREATE, obj), obj);
  }
  update(old: KubeObject, obj: KubeObject): Promise<Result> {
    return this.deliverTo(this.binding(BindingKind.UPDATE, obj), obj, { old });
  }
  delete(obj: KubeObject): Promise<Result> {
    return this.deliverTo(this.binding(BindingKind.DELETE, obj), obj);
  }
  resume(obj: KubeObject): Promise<Result> {
    return this.deliverTo(this.binding(BindingKind.RESUME, obj), obj);
  }
  tick(obj: KubeObject): Promise<Result> {
    return this.deliverTo(this.binding(BindingKind.TIMER, obj), obj);
  }
  event(obj: KubeObject, eventType = "MODIFIED"): Promise<Result> {
    return this.deliverTo(this.binding(BindingKind.EVENT, obj), obj, { eventType });
  }
  /** Starts the handler's daemon for obj: the ack comes as soon as it runs; its exit, if it returns by itself, is in received. */
  startDaemon(obj: KubeObject): Promise<Result> {
    return this.deliverTo(this.binding(BindingKind.DAEMON, obj), obj);
  }
  /** Stops the daemon of obj: the ack comes once it has returned. */
  stopDaemon(obj: KubeObject): Promise<Result> {
    return this.deliverTo(this.binding(BindingKind.DAEMON, obj), obj, { stop: true });
  }

  /** Sends obj for review to the handler's validate binding for its resource. */
  validate(obj: KubeObject, extra: { operation?: Review["operation"]; old?: KubeObject } = {}): Promise<ReviewResult> {
    return this.reviewBy(this.binding(BindingKind.VALIDATE, obj), obj, extra);
  }
  /** Sends obj for review to the handler's mutate binding for its resource. */
  mutate(obj: KubeObject, extra: { operation?: Review["operation"]; old?: KubeObject } = {}): Promise<ReviewResult> {
    return this.reviewBy(this.binding(BindingKind.MUTATE, obj), obj, extra);
  }

  /** Sends an admission review of obj (a CREATE unless told) to the binding with id. */
  async reviewBy(id: string, obj: KubeObject, extra: { operation?: Review["operation"]; old?: KubeObject } = {}): Promise<ReviewResult> {
    const b = this.bindings().find((x) => x.id === id);
    if (!b) throw new Error(`TestBroker: the handler has no binding "${id}"`);
    const operation = extra.operation ?? "CREATE";
    const d = create(DeliverySchema, {
      bindingId: id,
      kind: DeliveryKind.ADMISSION,
      attempt: 1,
      object: operation === "DELETE" ? new Uint8Array() : json(obj),
      oldObject: extra.old ? json(extra.old) : new Uint8Array(),
      ref: { resource: { group: b.resource?.group, version: b.resource?.version, resource: b.resource?.resource, kind: obj.kind ?? "" }, namespace: obj.metadata?.namespace ?? "", name: obj.metadata?.name ?? "" },
      deadline: timestampFromDate(new Date(Date.now() + TIMEOUT)),
      admission: { uid: `review-${this.seq + 1}`, operation: AdmissionOperation[operation], userName: "test", request: json({ operation }) },
    });
    const a = await this.deliver(d);
    const r = a.admission;
    return {
      binding: id,
      outcome: a.outcome === Outcome.OK ? "OK" : "FAIL",
      allowed: r?.allowed ?? false,
      message: a.outcome === Outcome.OK ? (r?.message ?? "") : a.message,
      code: r?.code ?? 0,
      warnings: [...(r?.warnings ?? [])],
      patch: parse(r?.patch ?? new Uint8Array()),
    };
  }

  /** Delivers obj to the binding with id, as the broker would for its kind, and waits for the answer. */
  async deliverTo(id: string, obj: KubeObject, extra: { old?: KubeObject; eventType?: string; attempt?: number; stop?: boolean } = {}): Promise<Result> {
    const b = this.bindings().find((x) => x.id === id);
    if (!b) throw new Error(`TestBroker: the handler has no binding "${id}"`);
    const kind = extra.stop ? DeliveryKind.DAEMON_STOP : deliveryKinds[b.kind];
    if (kind === undefined) throw new Error(`TestBroker: binding "${id}" is a ${BindingKind[b.kind]} binding, which the kit does not deliver to`);
    const d = create(DeliverySchema, {
      bindingId: id,
      kind,
      attempt: extra.attempt ?? 1,
      object: json(obj),
      ref: {
        resource: { group: b.resource?.group, version: b.resource?.version, resource: b.resource?.resource, kind: obj.kind ?? "", namespaced: !!obj.metadata?.namespace },
        namespace: obj.metadata?.namespace ?? "",
        name: obj.metadata?.name ?? "",
        uid: obj.metadata?.uid ?? "",
        resourceVersion: obj.metadata?.resourceVersion ?? "",
      },
      deadline: timestampFromDate(new Date(Date.now() + TIMEOUT)),
      eventType: extra.eventType ?? "",
    });
    if (kind === DeliveryKind.UPDATE || kind === DeliveryKind.FIELD) {
      if (!extra.old) throw new Error(`TestBroker: an update of ${obj.metadata?.name} needs the old object`);
      d.oldObject = json(essence(extra.old));
      d.diff = diff(essence(extra.old), essence(obj)).map((e) => ({
        $typeName: "tether.v1.DiffEntry",
        operation: { add: DiffEntry_Operation.ADD, change: DiffEntry_Operation.CHANGE, remove: DiffEntry_Operation.REMOVE }[e.op],
        path: e.path,
        oldValue: e.old === undefined ? new Uint8Array() : json(e.old),
        newValue: e.new === undefined ? new Uint8Array() : json(e.new),
      }));
    }
    if (kind === DeliveryKind.TICK) d.scheduled = timestampNow();
    return result(id, await this.deliver(d));
  }

  /** Sends d as it is (an id is given when it has none) and waits for its ack. */
  deliver(d: DeliveryProto): Promise<Ack> {
    if (!this.stream) return Promise.reject(new Error("TestBroker: no handler connected"));
    d.id ||= `test-${++this.seq}`;
    const acked = new Promise<Ack>((resolve) => this.pending.set(d.id, resolve));
    this.stream.write(create(ConnectResponseSchema, { message: { case: "delivery", value: d } }));
    return within(acked, `the ack of ${d.id}`);
  }

  /** Withdraws a delivery in flight; the handler still acks it. */
  cancel(deliveryId: string, reason = "cancelled by the test"): void {
    this.stream?.write(create(ConnectResponseSchema, { message: { case: "cancel", value: { deliveryId, reason } } }));
  }

  /** Ends the handler's stream with a status, as a broker going away does; the handler reconnects. */
  disconnect(code = grpc.status.UNAVAILABLE, details = "broker restarting"): void {
    const s = this.stream;
    this.stream = undefined;
    s?.emit("error", { code, details });
  }

  private serve(s: Stream): void {
    let welcomed = false;
    this.authorizations.push(String(s.metadata.get("authorization")[0] ?? ""));
    s.on("data", (req: ConnectRequest) => {
      const m = req.message;
      if (!welcomed && m.case === "hello") {
        this.hellos.push(m.value);
        if (this.refuse) return s.emit("error", { code: this.refuse.code, details: this.refuse.details });
        welcomed = true;
        s.write(create(ConnectResponseSchema, {
          message: { case: "welcome", value: { sessionId: `test-session-${this.hellos.length}`, window: m.value.window || 16, brokerVersion: "testbroker", capabilities: this.capabilities, reviewsOnly: this.reviewsOnly } },
        }));
        this.stream = s;
        for (const w of this.waiters.splice(0)) w();
      } else if (m.case === "ack") {
        this.pending.get(m.value.deliveryId)?.(m.value);
        this.pending.delete(m.value.deliveryId);
      } else {
        this.received.push(m);
      }
    });
    // The handler closed its side (after its Goodbye): the broker ends the stream with OK.
    s.on("end", () => {
      if (this.stream === s) this.stream = undefined;
      s.end();
    });
    s.on("error", () => undefined);
  }

  /** The id of the one binding of kind whose resource is obj's. */
  private binding(kind: BindingKind, obj: KubeObject): string {
    const [group, version] = String(obj.apiVersion ?? "").includes("/") ? String(obj.apiVersion).split("/") : ["", String(obj.apiVersion ?? "")];
    const ids = this.bindings()
      .filter((b) => b.kind === kind && (b.resource?.group ?? "") === group && (b.resource?.version ?? "") === version)
      .filter((b) => !b.resource?.kind || b.resource.kind === obj.kind)
      .map((b) => b.id);
    if (ids.length !== 1) {
      throw new Error(`TestBroker: ${ids.length} ${BindingKind[kind]} bindings for ${obj.apiVersion} ${obj.kind} (${ids.join(", ")}); use deliverTo`);
    }
    return ids[0];
  }
}

const deliveryKinds: Partial<Record<BindingKind, DeliveryKind>> = {
  [BindingKind.CREATE]: DeliveryKind.CREATE,
  [BindingKind.UPDATE]: DeliveryKind.UPDATE,
  [BindingKind.DELETE]: DeliveryKind.DELETE,
  [BindingKind.RESUME]: DeliveryKind.RESUME,
  [BindingKind.EVENT]: DeliveryKind.EVENT,
  [BindingKind.TIMER]: DeliveryKind.TICK,
  [BindingKind.DAEMON]: DeliveryKind.DAEMON_START,
};

const enc = new TextEncoder();
const dec = new TextDecoder();

function json(v: unknown): Uint8Array {
  return enc.encode(JSON.stringify(v));
}

function parse(b: Uint8Array): any {
  return b.length === 0 ? undefined : JSON.parse(dec.decode(b));
}

function result(binding: string, a: Ack): Result {
  return {
    binding,
    outcome: a.outcome === Outcome.OK ? "OK" : a.outcome === Outcome.RETRY ? "RETRY" : "FAIL",
    message: a.message,
    retryAfter: millis(a.retryAfter),
    patch: parse(a.patch),
    statusPatch: parse(a.statusPatch),
    result: parse(a.result),
    events: a.events.map((e) => ({
      type: e.type === HandlerEvent_Type.WARNING ? "Warning" : "Normal",
      reason: e.reason,
      message: e.message,
      ...(e.regarding ? { regarding: { apiVersion: e.regarding.apiVersion, kind: e.regarding.kind, namespace: e.regarding.namespace, name: e.regarding.name, uid: e.regarding.uid } } : {}),
    })),
  };
}

/** An object's essence, as the broker keeps it: top-level fields but status, metadata narrowed to labels and annotations. */
function essence(obj: KubeObject): KubeObject {
  const { status: _status, metadata, ...rest } = obj;
  const m: KubeObject = {};
  if (metadata?.labels) m.labels = metadata.labels;
  if (metadata?.annotations) m.annotations = metadata.annotations;
  return { ...rest, metadata: m };
}

/** The changes from a to b, leaf by leaf through objects. */
function diff(a: unknown, b: unknown, path: string[] = []): DiffEntry[] {
  const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
  if (isObj(a) && isObj(b)) {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
    return keys.flatMap((k) => diff(a[k], b[k], [...path, k]));
  }
  if (a === undefined && b === undefined) return [];
  if (a === undefined) return [{ op: "add", path, new: b }];
  if (b === undefined) return [{ op: "remove", path, old: a }];
  return JSON.stringify(a) === JSON.stringify(b) ? [] : [{ op: "change", path, old: a, new: b }];
}

function within<T>(p: Promise<T>, what: string): Promise<T> {
  let t: NodeJS.Timeout;
  const timeout = new Promise<never>((_, reject) => {
    t = setTimeout(() => reject(new Error(`TestBroker: no ${what} within ${TIMEOUT} ms`)), TIMEOUT);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(t));
}
