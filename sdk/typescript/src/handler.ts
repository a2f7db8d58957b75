// A handler instance: its name, options and bindings, and run(), which
// connects, reconnects with backoff, and stops on a rejection or its signal.

import * as grpc from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { BindingKind, Capability, HelloSchema } from "./gen/tether/v1/broker_pb";
import { Backoff } from "./backoff";
import { check, duration, toProto, type BindingKindName, type BindingOptions, type DaemonOptions, type HandlerFunction, type Registered, type Resource, type ReviewOptions, type TimerOptions } from "./binding";
import type { ReviewFunction } from "./admission";
import { capabilities, type BrokerCapabilities } from "./capabilities";
import { connect } from "./connection";
import { ConfigError, RejectedError } from "./errors";
import { DEFAULT_DRAIN_TIMEOUT, DEFAULT_RECONNECT_MAX, DEFAULT_RECONNECT_MIN, DEFAULT_WINDOW, PROTOCOL_VERSION } from "./limits";
import { stderrLogger, withFields, type Logger } from "./logger";
import { dnsTarget, lookupReplicas, Replicas, type ReplicaLoop, type Resolve, type Target } from "./replicas";
import { Session, type Plan, type SessionEnd } from "./session";
import { sdkName } from "./version";

/** How a handler connects and runs. Every field is optional; durations are in milliseconds. */
export interface HandlerOptions {
  /** Deliveries run at once (default 16); the broker may cap it. */
  window?: number;
  /** This process among the handler's instances; default "<hostname>-<pid>-<random>". */
  instanceId?: string;
  /** Plain text and no token: only for a broker started with --insecure on loopback. */
  insecure?: boolean;
  /**
   * The bearer token; or tokenFile, read on every connection attempt (default: the first that exists
   * of /var/run/secrets/tether.dev/token, a token for the broker's audience, and the ServiceAccount token).
   */
  token?: string;
  tokenFile?: string;
  /** PEM of the CA that signed the broker's certificate (the ConfigMap tether-broker-ca); default: the system roots. */
  ca?: string | Buffer;
  /**
   * A PEM file of the CA bundle instead of ca, read on every connection attempt, so that a
   * rotated CA (the ConfigMap tether-broker-ca, mounted) is trusted at the next reconnect.
   */
  caFile?: string;
  /** Bounds of the delay between connection attempts (default 500 to 2000). */
  reconnectMin?: number;
  reconnectMax?: number;
  /** How long a stopping handler waits for deliveries in flight (default 10000). */
  drainTimeout?: number;
  /** Asked of the broker instead of its defaults. */
  grace?: number;
  absentReleaseAfter?: number;
  /** Ranks this instance among the handler's (0 to 1000). */
  priority?: number;
  logger?: Logger;
}

/** Run options: the signal that stops the handler (it then drains and says Goodbye). */
export interface RunOptions {
  signal?: AbortSignal;
}

const rejecting = new Set([
  grpc.status.INVALID_ARGUMENT,
  grpc.status.UNIMPLEMENTED,
  grpc.status.PERMISSION_DENIED,
  grpc.status.UNAUTHENTICATED,
  grpc.status.FAILED_PRECONDITION,
]);

/**
 * Handler is one handler instance: a name (a DNS-1123 label of at most 40
 * characters; it names the finalizer tether.dev/<name>), the functions
 * registered with the on* methods, and run().
 */
export class Handler {
  readonly name: string;
  readonly instanceId: string;
  private readonly opts: HandlerOptions;
  private readonly log: Logger;
  private readonly bindings: Registered[] = [];
  private readonly counts = new Map<BindingKindName, number>();
  private running = false;
  private readonly sessions = new Set<Session>();
  private offered: BrokerCapabilities = { listed: false, offered: [] };

  constructor(name: string, options: HandlerOptions = {}) {
    this.name = name;
    this.opts = options;
    this.instanceId = options.instanceId || `${hostname()}-${process.pid}-${randomBytes(3).toString("hex")}`;
    this.log = withFields(options.logger ?? stderrLogger(), { handler: name, instance: this.instanceId });
  }

  onCreate(resource: Resource, fn: HandlerFunction, options: BindingOptions = {}): this {
    return this.register("create", resource, fn, options);
  }
  onUpdate(resource: Resource, fn: HandlerFunction, options: BindingOptions = {}): this {
    return this.register("update", resource, fn, options);
  }
  /** Deletion work: the object is held (finalizer tether.dev/<name>) until the function answers OK or FAIL. */
  onDelete(resource: Resource, fn: HandlerFunction, options: BindingOptions = {}): this {
    return this.register("delete", resource, fn, options);
  }
  /** Objects already handled, seen again when the broker starts or the handler returns. */
  onResume(resource: Resource, fn: HandlerFunction, options: BindingOptions = {}): this {
    return this.register("resume", resource, fn, options);
  }
  /** Updates that change the value at the dotted path field ("spec.replicas"). */
  onField(resource: Resource, field: string, fn: HandlerFunction, options: BindingOptions = {}): this {
    return this.register("field", resource, fn, options, field);
  }
  /** Every raw watch event (ADDED, MODIFIED, DELETED); never holds. */
  onEvent(resource: Resource, fn: HandlerFunction, options: BindingOptions = {}): this {
    return this.register("event", resource, fn, options);
  }
  /** Periodic ticks per object, options.interval milliseconds apart. */
  onTimer(resource: Resource, fn: HandlerFunction, options: TimerOptions): this {
    return this.register("timer", resource, fn, options);
  }

  /**
   * A long-running function per object: it runs until d.signal is aborted
   * (the object deleted or no longer matching, or moved to another
   * instance, or the handler stopping), and holds the object meanwhile.
   * When it returns by itself, the broker restarts it with options.restart.
   */
  onDaemon(resource: Resource, fn: HandlerFunction, options: DaemonOptions = {}): this {
    return this.register("daemon", resource, fn, options);
  }

  /** Admission reviews, as a validating webhook the broker serves: return to allow, throw a DeniedError to refuse. */
  onValidate(resource: Resource, fn: ReviewFunction, options: ReviewOptions = {}): this {
    return this.register("validate", resource, fn, options);
  }
  /** Admission reviews, as a mutating webhook: change review.object in place; the SDK answers with the JSON patch. */
  onMutate(resource: Resource, fn: ReviewFunction, options: ReviewOptions = {}): this {
    return this.register("mutate", resource, fn, options);
  }

  private register(kind: BindingKindName, resource: Resource, fn: HandlerFunction | ReviewFunction, options: BindingOptions | ReviewOptions, field?: string): this {
    const n = this.counts.get(kind) ?? 0;
    this.counts.set(kind, n + 1);
    this.bindings.push({ id: options.id ?? `${kind}-${n}`, kind, resource, fn, options, field });
    return this;
  }

  /** The features the broker offered in its last Welcome. */
  brokerCapabilities(): BrokerCapabilities {
    return this.offered;
  }

  /** Asks the broker for another window from now on (0: its default); nothing in flight is withdrawn. */
  setWindow(window: number): void {
    for (const s of this.sessions) s.setWindow(window);
  }

  /** The Hello and the bindings by id, or a ConfigError naming every problem. */
  plan(): Plan {
    const errs: string[] = [];
    if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(this.name) || this.name.length > 40) {
      errs.push(`handler name "${this.name}" must be a DNS-1123 label of at most 40 characters`);
    }
    if (this.bindings.length === 0) errs.push("no bindings registered: call onCreate, onUpdate, ... before run");
    const window = this.opts.window ?? DEFAULT_WINDOW;
    if (!Number.isInteger(window) || window < 1) errs.push(`window ${window} must be a positive integer`);
    const bindings = new Map<string, Registered>();
    for (const b of this.bindings) {
      errs.push(...check(b));
      if (bindings.has(b.id)) errs.push(`binding "${b.id}": id used twice`);
      bindings.set(b.id, b);
    }
    if (errs.length > 0) throw new ConfigError(`tether: invalid configuration of handler "${this.name}": ${errs.join("; ")}`);
    const hello = create(HelloSchema, {
      handler: this.name,
      instanceId: this.instanceId,
      bindings: this.bindings.map(toProto),
      window,
      protocolVersion: PROTOCOL_VERSION,
      sdk: sdkName,
      grace: duration(this.opts.grace),
      absentReleaseAfter: duration(this.opts.absentReleaseAfter),
      priority: this.opts.priority ?? 0,
      capabilities,
    });
    return { hello, bindings };
  }

  /**
   * Connects to the broker at `broker` (host:port), announces the bindings
   * and handles deliveries until options.signal is aborted; then it drains
   * (Goodbye, the acks of what is in flight) and resolves. Lost connections
   * are re-established with backoff, forever, each on a new connection.
   * `broker` may be a list of the broker replicas' addresses instead, for
   * replicas reached without a Service in front: they are dialled in turn,
   * one per connection (the Go SDK's RoundRobin).
   *
   * A handler with validate or mutate bindings whose broker yields several
   * replicas (every A and AAAA record of a DNS name such as the headless
   * Service tether-broker-replicas, or a list of addresses) keeps one
   * session to each, looked up again every RESOLVE_EVERY and whenever a
   * session ends, and lists CAPABILITY_EVERY_REPLICA: whichever replica the
   * API server calls has an instance to answer the review. Lifecycle
   * deliveries, timers and daemons come only from the leader's session. A
   * name with one address when run starts keeps one session, as before.
   *
   * Rejects with a ConfigError for an invalid configuration and a
   * RejectedError when the broker refuses the handler.
   */
  async run(broker: string | string[], options: RunOptions = {}): Promise<void> {
    if (this.running) throw new ConfigError("tether: run is already running for this handler");
    const plan = this.plan();
    const addrs = typeof broker === "string" ? [broker] : [...broker];
    if (addrs.length === 0 || addrs.some((a) => !a)) throw new ConfigError(`tether: broker addresses ${JSON.stringify(broker)}: none may be empty`);
    const signal = options.signal ?? new AbortController().signal;
    const log = withFields(this.log, { broker });
    this.running = true;
    try {
      const replicas = await everyReplica(addrs, plan);
      if (replicas) {
        plan.hello.capabilities = [...plan.hello.capabilities, Capability.EVERY_REPLICA];
        const loop: ReplicaLoop = (replica, stop, ended) =>
          this.connectLoop(() => ({ address: replica, serverName: replicas.serverName }), plan, stop, withFields(log, { replica }), ended);
        await new Replicas(replicas.resolve, loop, log).run(signal);
      } else {
        let n = 0;
        await this.connectLoop(() => ({ address: addrs[n++ % addrs.length] }), plan, signal, log);
      }
      log.info("handler stopped");
    } finally {
      this.running = false;
    }
  }

  /**
   * Keeps a session with the broker at next() (asked anew for each
   * connection) until signal is aborted; rejects when the broker refuses
   * the handler. ended, when given, is told each time a session ends.
   */
  private async connectLoop(next: () => Target, plan: Plan, signal: AbortSignal, log: Logger, ended?: () => void): Promise<void> {
    const backoff = new Backoff(this.opts.reconnectMin ?? DEFAULT_RECONNECT_MIN, this.opts.reconnectMax ?? DEFAULT_RECONNECT_MAX);
    while (!signal.aborted) {
      const end = await this.connectOnce(next(), plan, signal, log);
      if (signal.aborted) return;
      const code = end.error?.code;
      if (!end.welcomed && code !== undefined && rejecting.has(code)) {
        const err = new RejectedError(this.name, codeName(code), end.error?.details ?? end.error?.message ?? "");
        log.error("broker rejected the handler", { code: err.code, details: err.details });
        throw err;
      }
      ended?.();
      if (end.welcomed) backoff.reset();
      let delay = backoff.next();
      // The replica of a reviews-only session leads now: the full session is to be had at once.
      if (end.reviewsOnly && code === grpc.status.UNAVAILABLE) delay = 0;
      log.warn("connection to broker lost; reconnecting", { error: end.error, delay });
      await sleep(delay, signal);
    }
  }

  /** One session on a new connection: behind a Service, the next connection may reach another replica, the leader. */
  private async connectOnce(target: Target, plan: Plan, signal: AbortSignal, log: Logger): Promise<SessionEnd> {
    const conn = await connect(target, this.opts, signal);
    if ("error" in conn) return { welcomed: false, reviewsOnly: false, error: conn.error };
    const session = new Session(conn.stream, plan, {
      log,
      drainTimeout: this.opts.drainTimeout ?? DEFAULT_DRAIN_TIMEOUT,
      onWelcome: (c) => (this.offered = c),
    });
    this.sessions.add(session);
    try {
      return await session.run(signal);
    } finally {
      this.sessions.delete(session);
      conn.close();
    }
  }
}

/**
 * The replicas to keep a session to, when the handler answers reviews and
 * addrs yields several: a list of distinct addresses, or a DNS name with
 * several addresses now (TLS then verifies the name); undefined keeps one
 * session as always (one address, an IP address, localhost, a failed look-up).
 */
async function everyReplica(addrs: string[], plan: Plan): Promise<{ resolve: Resolve; serverName?: string } | undefined> {
  if (!plan.hello.bindings.some((b) => b.kind === BindingKind.VALIDATE || b.kind === BindingKind.MUTATE)) return undefined;
  if (addrs.length > 1) {
    const distinct = [...new Set(addrs)];
    return distinct.length > 1 ? { resolve: async () => distinct } : undefined;
  }
  const t = dnsTarget(addrs[0]);
  if (!t) return undefined;
  const resolve = () => lookupReplicas(t.host, t.port);
  try {
    if ((await resolve()).length < 2) return undefined;
  } catch {
    return undefined; // the connection says why
  }
  return { resolve, serverName: t.host };
}

/** A gRPC status code's name as the protocol's documents spell it: INVALID_ARGUMENT is "InvalidArgument". */
function codeName(code: grpc.status): string {
  return String(grpc.status[code] ?? code)
    .toLowerCase()
    .replace(/(^|_)([a-z])/g, (_m, _sep, c: string) => c.toUpperCase());
}

/** Resolves after ms, or at once when signal is aborted. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

/** An AbortSignal aborted on SIGTERM or SIGINT: pass it to run() so that the handler drains and says Goodbye. */
export function untilSignal(...signals: NodeJS.Signals[]): AbortSignal {
  const ac = new AbortController();
  for (const s of signals.length ? signals : (["SIGTERM", "SIGINT"] as NodeJS.Signals[])) {
    process.once(s, () => ac.abort(new Error(`received ${s}`)));
  }
  return ac.signal;
}
