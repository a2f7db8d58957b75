// Daemons: a long-running function per (binding, object UID), started by
// DAEMON_START (acked as soon as it runs), stopped by DAEMON_STOP (acked
// once it has returned), and reported with DaemonExited when it returns by
// itself. A daemon runs within its session: when the stream ends, it is
// stopped, and the broker starts it again where it belongs.

import { create } from "@bufbuild/protobuf";
import { Capability, DaemonExitedSchema, Outcome, type Ack, type DaemonExited, type Delivery as DeliveryProto } from "./gen/tether/v1/broker_pb";
import type { HandlerFunction, Registered } from "./binding";
import { lacks, type BrokerCapabilities } from "./capabilities";
import { decode, errorAck, okAck, retryAck, type HandlerEvent } from "./delivery";
import type { Logger } from "./logger";

/** One running daemon. */
interface Running {
  controller: AbortController;
  /** The ids of the DAEMON_STOP deliveries to ack when it returns. */
  stops: string[];
  /** Its signal was aborted on purpose: a stop, the drain, or the session's end. */
  stopping: boolean;
}

/** What the daemons of a session need from it. */
export interface DaemonHost {
  ack(a: Ack): void;
  exited(e: DaemonExited): void;
  /** Called when a daemon has returned, so that a drain waiting for it goes on. */
  returned(): void;
  offered(): BrokerCapabilities;
}

export class Daemons {
  private readonly running = new Map<string, Running>();

  constructor(private readonly host: DaemonHost) {}

  get size(): number {
    return this.running.size;
  }

  /** DAEMON_START: runs the function and acks at once; the daemon holds no window slot. */
  start(d: DeliveryProto, b: Registered, log: Logger, draining: boolean): void {
    const uid = d.ref?.uid ?? "";
    if (!uid) return this.host.ack(retryAck(d.id, "daemon start without object uid"));
    const key = `${b.id}/${uid}`;
    const cur = this.running.get(key);
    if (cur?.stopping) return this.host.ack(retryAck(d.id, "the previous daemon of this object is still stopping"));
    if (cur) return this.host.ack(okAck(d.id, undefined, []));
    if (draining) return this.host.ack(retryAck(d.id, "handler shutting down"));
    const r: Running = { controller: new AbortController(), stops: [], stopping: false };
    this.running.set(key, r);
    const events: HandlerEvent[] = [];
    const run = async () => (b.fn as HandlerFunction)(decode(d, "daemon", r.controller.signal, log, events));
    this.host.ack(okAck(d.id, undefined, []));
    run().then(
      (answer) => this.returned(key, r, d, log, () => okAck(d.id, answer, events)),
      (err) => this.returned(key, r, d, log, () => errorAck(d.id, err, events)),
    );
  }

  /** DAEMON_STOP: aborts the daemon's signal; acked once it has returned (at once when none runs). */
  stop(d: DeliveryProto, b: Registered): void {
    const r = this.running.get(`${b.id}/${d.ref?.uid ?? ""}`);
    if (!r) return this.host.ack(okAck(d.id, undefined, []));
    r.stops.push(d.id);
    this.abort(r, new Error("daemon stopped by the broker"));
  }

  /** Stops every daemon (the drain, the session's end). */
  stopAll(reason: string): void {
    for (const r of this.running.values()) this.abort(r, new Error(reason));
  }

  /** Forgets the daemons that have not returned (the drain timeout): their ends are reported to no one. */
  abandon(log: Logger): void {
    for (const key of [...this.running.keys()]) {
      log.warn("drain timeout: daemon has not returned; it ignores its signal", { daemon: key });
      this.running.delete(key);
    }
  }

  private abort(r: Running, reason: Error): void {
    if (r.stopping) return;
    r.stopping = true;
    r.controller.abort(reason);
  }

  /** A daemon returned: ack its stops, or report its exit when it returned by itself. */
  private returned(key: string, r: Running, d: DeliveryProto, log: Logger, outcome: () => Ack): void {
    if (this.running.get(key) !== r) return; // abandoned
    this.running.delete(key);
    if (r.stopping) {
      for (const id of r.stops) this.host.ack(okAck(id, undefined, []));
    } else {
      this.host.exited(exitReport(d, outcome(), this.host.offered()));
      log.info("daemon returned by itself");
    }
    this.host.returned();
  }
}

/**
 * The DaemonExited of a daemon that returned with the outcome ack: failed
 * unless OK, its delay and what it asked to write when the broker lists
 * that it takes them (a broker older than capabilities drops them).
 */
function exitReport(d: DeliveryProto, a: Ack, offered: BrokerCapabilities): DaemonExited {
  const writes = offered.listed && !lacks(offered, Capability.DAEMON_EXIT_PATCH);
  return create(DaemonExitedSchema, {
    bindingId: d.bindingId,
    uid: d.ref?.uid ?? "",
    failed: a.outcome !== Outcome.OK,
    message: a.message,
    retryAfter: lacks(offered, Capability.DAEMON_EXIT_RETRY_AFTER) ? undefined : a.retryAfter,
    patch: writes ? a.patch : undefined,
    statusPatch: writes ? a.statusPatch : undefined,
    result: writes ? a.result : undefined,
  });
}
