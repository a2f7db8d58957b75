// One Connect stream: the Hello, the Welcome, deliveries to the registered
// functions within the window, their acks, and the drain with Goodbye. Node
// runs it on one thread, so its state needs no locks: every callback below
// runs to completion before the next.

import type * as grpc from "@grpc/grpc-js";
import { status as grpcStatus } from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import {
  Capability,
  DeliveryKind,
  Outcome,
  ConnectRequestSchema,
  type Ack,
  type ConnectRequest,
  type ConnectResponse,
  type Delivery as DeliveryProto,
  type Hello,
  type Welcome,
} from "./gen/tether/v1/broker_pb";
import { millis, type HandlerFunction, type Registered } from "./binding";
import { review, type ReviewFunction } from "./admission";
import { Daemons } from "./daemon";
import { brokerCapabilities, lacks, type BrokerCapabilities } from "./capabilities";
import { decode, errorAck, failAck, kindName, okAck, retryAck, type HandlerEvent } from "./delivery";
import { CLOSE_TIMEOUT, MAX_MESSAGE_BYTES, WELCOME_TIMEOUT } from "./limits";
import { withFields, type Logger } from "./logger";
import { requestBytes } from "./service";
import { traced, traceFields } from "./trace";

/** What one run of a handler works with: the Hello and the bindings by id. */
export interface Plan {
  hello: Hello;
  bindings: Map<string, Registered>;
}

/**
 * How a session ended: whether the broker welcomed it, whether for reviews
 * only (a replica that does not lead, Welcome.reviews_only), and the error
 * (a gRPC status error has a numeric code).
 */
export interface SessionEnd {
  welcomed: boolean;
  reviewsOnly: boolean;
  error?: Error & { code?: number; details?: string };
}

export interface SessionOptions {
  log: Logger;
  drainTimeout: number;
  onWelcome: (capabilities: BrokerCapabilities) => void;
}

type Stream = grpc.ClientDuplexStream<ConnectRequest, ConnectResponse>;

interface InFlight {
  controller: AbortController;
  deadline?: NodeJS.Timeout;
}

export class Session {
  private welcomed = false;
  private reviewsOnly = false;
  private draining = false;
  private ended = false;
  private window: number;
  private offered: BrokerCapabilities = { listed: false, offered: [] };
  private readonly inflight = new Map<string, InFlight>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private log: Logger;
  private saidGoodbye = false;
  private closing = false;
  private readonly daemons = new Daemons({
    ack: (a) => this.ack(a),
    exited: (e) => this.send({ case: "daemonExited", value: e }),
    returned: () => this.closeIfDrained(),
    offered: () => this.offered,
  });
  private resolve!: (end: SessionEnd) => void;

  constructor(
    private readonly stream: Stream,
    private readonly plan: Plan,
    private readonly opts: SessionOptions,
  ) {
    this.window = plan.hello.window;
    this.log = opts.log;
  }

  /** Runs the session until the stream ends, or, once stop is aborted, until the drain is done. */
  run(stop: AbortSignal): Promise<SessionEnd> {
    const done = new Promise<SessionEnd>((resolve) => (this.resolve = resolve));
    this.stream.on("data", (msg: ConnectResponse) => this.receive(msg));
    this.stream.on("error", (err: Error) => this.end(err));
    this.stream.on("status", (s: grpc.StatusObject) => {
      if (s.code === grpcStatus.OK) this.end(this.draining ? undefined : new Error("broker closed the stream"));
    });
    const onStop = () => this.stop();
    stop.addEventListener("abort", onStop, { once: true });
    this.after(WELCOME_TIMEOUT, () => {
      if (!this.welcomed) this.abort(new Error(`no Welcome from the broker within ${WELCOME_TIMEOUT} ms`));
    });
    this.send({ case: "hello", value: this.plan.hello });
    if (stop.aborted) this.stop();
    return done.finally(() => stop.removeEventListener("abort", onStop));
  }

  /** Asks the broker for another window (0: its default). */
  setWindow(window: number): void {
    this.window = window || this.plan.hello.window;
    this.send({ case: "flowControl", value: { $typeName: "tether.v1.FlowControl", window } });
  }

  private receive(msg: ConnectResponse): void {
    if (this.ended) return; // the session is over; the broker sends this again
    const m = msg.message;
    if (!this.welcomed) {
      if (m.case !== "welcome") return this.abort(new Error(`protocol error: broker sent ${m.case} before Welcome`));
      return this.welcome(m.value);
    }
    switch (m.case) {
      case "delivery":
        return this.accept(m.value);
      case "cancel": {
        const f = this.inflight.get(m.value.deliveryId);
        if (!f) return this.log.debug("cancel for a delivery not in flight", { delivery: m.value.deliveryId });
        this.log.info("delivery cancelled by the broker", { delivery: m.value.deliveryId, reason: m.value.reason });
        return f.controller.abort(new Error(`delivery cancelled by the broker: ${m.value.reason}`));
      }
      case "welcome":
        return this.log.warn("ignoring a second Welcome");
      default:
        return this.log.warn("ignoring a message this SDK does not know", { type: m.case ?? "unknown" });
    }
  }

  private welcome(w: Welcome): void {
    this.welcomed = true;
    if (w.window > 0 && w.window < this.window) this.window = w.window;
    this.log = withFields(this.opts.log, { session: w.sessionId });
    this.offered = brokerCapabilities(w.capabilities);
    this.reviewsOnly = w.reviewsOnly;
    // A reviews-only session's replica says nothing of the leader's.
    if (!this.reviewsOnly) this.opts.onWelcome(this.offered);
    this.log.info("connected to broker", {
      broker_version: w.brokerVersion,
      window: this.window,
      capabilities: this.offered.listed ? this.offered.offered : ["not listed (a broker older than capabilities)"],
      reviews_only: this.reviewsOnly,
    });
  }

  /** Starts a delivery's function, or acks it at once when it cannot run. */
  private accept(d: DeliveryProto): void {
    const id = d.id;
    const log = withFields(this.log, { delivery: id, binding: d.bindingId, attempt: d.attempt, object: `${d.ref?.namespace ?? ""}/${d.ref?.name ?? ""}`, ...traceFields(d) });
    if (!id) return log.warn("dropping a delivery without id");
    if (this.inflight.has(id)) return log.warn("delivery already in flight; the running attempt will ack it");
    const b = this.plan.bindings.get(d.bindingId);
    if (!b) return this.ack(failAck(id, `binding "${d.bindingId}" is not declared by this instance`));
    if (this.reviewsOnly && d.kind !== DeliveryKind.ADMISSION) {
      return this.ack(failAck(id, `this session is for admission reviews only (its broker replica does not lead); it does not take ${DeliveryKind[d.kind] ?? d.kind} deliveries`));
    }
    if (d.kind === DeliveryKind.DAEMON_START || d.kind === DeliveryKind.DAEMON_STOP) {
      if (b.kind !== "daemon") return this.ack(failAck(id, `binding "${b.id}" is a ${b.kind} binding; it does not take ${DeliveryKind[d.kind]} deliveries`));
      return d.kind === DeliveryKind.DAEMON_START ? this.daemons.start(d, b, log, this.draining) : this.daemons.stop(d, b);
    }
    const reviews = b.kind === "validate" || b.kind === "mutate";
    const kind = d.kind === DeliveryKind.ADMISSION ? "admission" : kindName(d.kind);
    if (!kind) return this.ack(failAck(id, `delivery kind ${DeliveryKind[d.kind] ?? d.kind} is not supported by this SDK (${this.plan.hello.sdk})`));
    if ((kind === "tick") !== (b.kind === "timer") || (kind === "admission") !== reviews || b.kind === "daemon") {
      return this.ack(failAck(id, `binding "${b.id}" is a ${b.kind} binding; it does not take ${kind} deliveries`));
    }
    if (this.draining) return this.ack(retryAck(id, "handler shutting down"));
    if (this.inflight.size >= this.window) {
      log.warn("broker exceeded the window; asking it to retry", { window: this.window });
      return this.ack(retryAck(id, `handler window of ${this.window} exceeded`));
    }
    const f: InFlight = { controller: new AbortController() };
    if (d.deadline) {
      const ms = Number(d.deadline.seconds) * 1000 + d.deadline.nanos / 1e6 - Date.now();
      f.deadline = setTimeout(() => f.controller.abort(new Error("the delivery's deadline passed")), Math.max(0, ms));
    }
    this.inflight.set(id, f);
    const events: HandlerEvent[] = [];
    if (kind === "admission") {
      const answer = () => review(d, b.fn as ReviewFunction, b.kind === "mutate", f.controller.signal, log).catch((err) => errorAck(id, err, events));
      traced(d, this.plan.hello.handler, answer).then(
        (ack) => this.finish(id, f, ack, log),
        (err) => this.finish(id, f, errorAck(id, err, events), log),
      );
      return;
    }
    const call = async (): Promise<Ack> => {
      let answer;
      try {
        answer = await (b.fn as HandlerFunction)(decode(d, kind, f.controller.signal, log, events));
      } catch (err) {
        return errorAck(id, err, events);
      }
      try {
        return okAck(id, answer, events);
      } catch (err) {
        return failAck(id, `cannot encode what the function returned: ${(err as Error).message}`);
      }
    };
    traced(d, this.plan.hello.handler, call).then(
      (ack) => this.finish(id, f, ack, log),
      (err) => this.finish(id, f, errorAck(id, err, events), log),
    );
  }

  private finish(id: string, f: InFlight, ack: Ack, log: Logger): void {
    if (this.inflight.get(id) !== f) return; // abandoned at the drain timeout, or the session ended
    this.inflight.delete(id);
    clearTimeout(f.deadline);
    if (ack.events.length > 0 && lacks(this.offered, Capability.HANDLER_EVENTS)) {
      log.warn("the broker does not post handler Events; dropping this delivery's", { events: ack.events.length });
      ack.events = [];
    }
    if (ack.outcome === Outcome.FAIL) log.error("delivery failed permanently", { error: ack.message });
    else if (ack.outcome === Outcome.RETRY) log.warn("delivery will be retried", { error: ack.message, retry_after_ms: millis(ack.retryAfter) });
    else log.debug("delivery handled");
    this.ack(ack);
    this.closeIfDrained();
  }

  /** Sends a, or, when it is more than the broker takes in one message, a FAIL that says so. */
  private ack(a: Ack): void {
    const req = create(ConnectRequestSchema, { message: { case: "ack", value: a } });
    const n = requestBytes(req);
    if (n > MAX_MESSAGE_BYTES) {
      this.log.error("the answer is too large for the broker; failing the delivery", { delivery: a.deliveryId, bytes: n });
      a = failAck(a.deliveryId, `the answer is ${n} bytes, more than the ${MAX_MESSAGE_BYTES} the broker takes in one message: patch less, or keep large state elsewhere`);
    }
    this.send({ case: "ack", value: a });
  }

  private send(message: ConnectRequest["message"]): void {
    if (!this.ended) this.stream.write(create(ConnectRequestSchema, { message }));
  }

  /** Drains: stops the daemons, says Goodbye once none runs, acks what is in flight, then ends the request stream. */
  private stop(): void {
    if (this.ended || this.draining) return;
    if (!this.welcomed) return this.abort(new Error("handler shutting down"));
    this.draining = true;
    this.log.info("stopping: draining deliveries in flight and stopping daemons", {
      in_flight: this.inflight.size,
      daemons: this.daemons.size,
      timeout: this.opts.drainTimeout,
    });
    this.daemons.stopAll("handler shutting down");
    this.after(this.opts.drainTimeout, () => this.abandonAll());
    this.closeIfDrained();
  }

  /** At the drain timeout: cancels what still runs and acks it RETRY. */
  private abandonAll(): void {
    for (const [id, f] of this.inflight) {
      this.log.warn("drain timeout: cancelling delivery", { delivery: id });
      f.controller.abort(new Error("handler shutting down"));
      clearTimeout(f.deadline);
      this.inflight.delete(id);
      this.ack(retryAck(id, "handler shutting down"));
    }
    this.daemons.abandon(this.log);
    this.closeIfDrained();
  }

  /**
   * While draining: Goodbye as soon as no daemon runs here (a daemon must
   * not start elsewhere while this one still runs; the broker then sends
   * nothing new), and the end of the request stream once nothing is in
   * flight either.
   */
  private closeIfDrained(): void {
    if (!this.draining || this.ended || this.daemons.size > 0) return;
    if (!this.saidGoodbye) {
      this.saidGoodbye = true;
      this.send({ case: "goodbye", value: { $typeName: "tether.v1.Goodbye", reason: "instance shutting down" } });
    }
    if (this.inflight.size > 0 || this.closing) return;
    this.closing = true;
    this.stream.end();
    this.after(CLOSE_TIMEOUT, () => {
      this.log.warn("broker did not close the stream after goodbye", { timeout: CLOSE_TIMEOUT });
      this.end(undefined);
      this.stream.cancel();
    });
  }

  private abort(err: Error): void {
    this.end(err);
    this.stream.cancel();
  }

  private end(err: Error | undefined): void {
    if (this.ended) return;
    this.ended = true;
    for (const t of this.timers) clearTimeout(t);
    for (const f of this.inflight.values()) {
      clearTimeout(f.deadline);
      f.controller.abort(new Error("session with the broker ended"));
    }
    this.inflight.clear();
    this.daemons.stopAll("session with the broker ended");
    if (this.draining && err) this.log.debug("stream ended after goodbye", { error: err });
    this.resolve({ welcomed: this.welcomed, reviewsOnly: this.reviewsOnly, error: this.draining ? undefined : err });
  }

  private after(ms: number, fn: () => void): void {
    const t = setTimeout(() => {
      this.timers.delete(t);
      fn();
    }, ms);
    this.timers.add(t);
  }
}
