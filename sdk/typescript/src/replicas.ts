// One session to each broker replica, for a handler that answers admission
// reviews (CAPABILITY_EVERY_REPLICA, docs/protocol.md [admission.every]):
// whichever replica the API server calls then has an instance to answer,
// and no review waits for a leader. The replicas are the addresses of a
// DNS name (every A and AAAA record of a headless Service), looked up again
// every RESOLVE_EVERY and whenever a session ends, or a list of addresses.

import { lookup as dnsLookup } from "node:dns/promises";
import { isIP } from "node:net";
import { CONNECT_TIMEOUT, RESOLVE_EVERY } from "./limits";
import type { Logger } from "./logger";

/** Where one session connects: address, and the name TLS verifies when it is not the address's (a replica found by DNS). */
export interface Target {
  address: string;
  serverName?: string;
}

/** Answers the replicas' addresses (HOST:PORT) now. */
export type Resolve = () => Promise<string[]>;

/** What node's dns.lookup({ all: true }) answers. */
export type DNSLookup = (host: string, options: { all: true }) => Promise<Array<{ address: string; family: number }>>;

/**
 * The host and port of a broker address naming a host by DNS: HOST:PORT or
 * dns:///HOST:PORT, not an IP address and not localhost; undefined for any
 * other, which keeps one session as always.
 */
export function dnsTarget(target: string): { host: string; port: string } | undefined {
  target = target.replace(/^dns:\/\/\//, "");
  if (target.includes("://") || target.includes(":///")) return undefined;
  const m = /^([^:[\]]+):(\d+)$/.exec(target);
  if (!m || isIP(m[1]) !== 0 || m[1] === "localhost") return undefined;
  return { host: m[1], port: m[2] };
}

/** Every address of host with port (HOST:PORT, an IPv6 one in brackets), sorted, without loopback ones: one broker, whichever loopback address. */
export async function lookupReplicas(host: string, port: string, lookup: DNSLookup = dnsLookup): Promise<string[]> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`looking up ${host}: no answer within ${CONNECT_TIMEOUT} ms`)), CONNECT_TIMEOUT);
  });
  const found = await Promise.race([lookup(host, { all: true }), timeout]).finally(() => clearTimeout(timer));
  const addrs = found.filter((a) => !isLoopback(a.address)).map((a) => (a.family === 6 ? `[${a.address}]:${port}` : `${a.address}:${port}`));
  if (addrs.length === 0) throw new Error(`looking up ${host}: no address`);
  return [...new Set(addrs)].sort();
}

function isLoopback(ip: string): boolean {
  return ip === "::1" || ip.startsWith("127.");
}

/** One replica's session loop: it ends when signal is aborted, or rejects when the broker refuses the handler; ended is told each time a session ends. */
export type ReplicaLoop = (replica: string, signal: AbortSignal, ended: () => void) => Promise<void>;

/** The loops by replica, and those of replicas gone, still draining. */
interface Loops {
  running: Map<string, { stop: AbortController; done: Promise<void> }>;
  gone: Set<Promise<void>>;
}

/**
 * Replicas keeps one session loop to each replica that resolve answers,
 * starting one for each address that appears and stopping the loop of each
 * that goes. A failed look-up keeps the loops there are.
 */
export class Replicas {
  private wake?: () => void;
  private again = false;

  constructor(
    private readonly resolve: Resolve,
    private readonly loop: ReplicaLoop,
    private readonly log: Logger,
    private readonly every: number = RESOLVE_EVERY,
  ) {}

  /** Runs the loops until signal is aborted; rejects with the first refusal, having stopped the others. */
  async run(signal: AbortSignal): Promise<void> {
    const all = new AbortController();
    const stopAll = () => all.abort();
    signal.addEventListener("abort", stopAll, { once: true });
    if (signal.aborted) all.abort();
    const loops: Loops = { running: new Map(), gone: new Set() };
    let refusal: { err: unknown } | undefined;
    const refused = (err: unknown) => {
      refusal ??= { err };
      all.abort();
    };
    try {
      while (!all.signal.aborted) {
        let addrs: string[] = [];
        try {
          addrs = await this.resolve();
        } catch (err) {
          this.log.warn("cannot look up the broker replicas; keeping the sessions there are", { error: err });
        }
        if (addrs.length > 0 && !all.signal.aborted) this.follow(addrs, loops, refused);
        await this.next(all.signal);
      }
    } finally {
      signal.removeEventListener("abort", stopAll);
      for (const r of loops.running.values()) r.stop.abort();
      await Promise.all([...loops.running.values()].map((r) => r.done).concat([...loops.gone]));
    }
    if (refusal) throw refusal.err;
  }

  /** Starts a loop for each new address and stops those of the addresses gone. */
  private follow(addrs: string[], { running, gone }: Loops, refused: (err: unknown) => void): void {
    for (const [a, r] of running) {
      if (addrs.includes(a)) continue;
      this.log.info("broker replica gone; ending its session", { replica: a });
      r.stop.abort();
      running.delete(a);
      gone.add(r.done);
      void r.done.then(() => gone.delete(r.done));
    }
    for (const a of addrs) {
      if (running.has(a)) continue;
      const stop = new AbortController(); // aborted when the address goes, or by run's end
      const done = this.loop(a, stop.signal, () => this.lookAgain()).catch(refused);
      running.set(a, { stop, done });
    }
  }

  /** Resolves after every, when a session ends, or when all is aborted. */
  private next(all: AbortSignal): Promise<void> {
    if (this.again || all.aborted) {
      this.again = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        all.removeEventListener("abort", done);
        this.wake = undefined;
        resolve();
      };
      const t = setTimeout(done, this.every);
      all.addEventListener("abort", done, { once: true });
      this.wake = done;
    });
  }

  private lookAgain(): void {
    if (this.wake) this.wake();
    else this.again = true;
  }
}
