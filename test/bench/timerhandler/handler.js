#!/usr/bin/env node
// The TypeScript timer handler of the timer benchmark (go run ./test/bench
// -timers -timer-handler typescript): the Go handler beside this file
// (main.go) and its Python twin (handler.py) on the TypeScript SDK
// (sdk/typescript, in plain JavaScript on its build: npm run build there).
// One timer binding on the Widgets of one namespace, whose function only
// records the tick and returns, so that it is acked at once.
//
// For every tick it records the object's uid, when the function was called
// (the arrival), the tick's scheduled time (when the broker had it due) and
// when the function returned. Every second it writes the progress file
// (--stats). On SIGTERM the SDK drains and says goodbye, and the handler
// writes every tick to --ticks in the JSON format of timerstats.Ticks
// (test/bench/timerstats/ticks.go); the bench summarizes them with the same
// Go code as the Go handler's. Both files are written to a temporary name
// and renamed, so a reader never sees half of one.
//
//   node test/bench/timerhandler/handler.js --addr 127.0.0.1:7443 \
//     --namespace bench-timers-1000 --interval 1s --stats stats.json --ticks ticks.json
// @ts-check
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const { parseArgs } = require("node:util");
const tether = require(path.join(__dirname, "..", "..", "..", "sdk", "typescript", "build", "src"));

const widgets = { group: "test.tether.dev", version: "v1", resource: "widgets" };

// The wall clock at start, and the monotonic clock's reading then: times
// are the one plus what the other measured since, in nanoseconds.
const epochNs = BigInt(Date.now()) * 1000000n;
const startHr = process.hrtime.bigint();

/** Nanoseconds since the epoch, as the Go side reads them. */
function nowNs() {
  return epochNs + (process.hrtime.bigint() - startHr);
}

/** A growable typed array: 8 or 4 bytes a value, so that the handler's RSS is not mostly its own records. */
class Column {
  /** @param {BigInt64ArrayConstructor | Int32ArrayConstructor} type */
  constructor(type) {
    this.type = type;
    this.data = new type(1 << 16);
    this.length = 0;
  }

  /** @param {any} v */
  push(v) {
    if (this.length === this.data.length) {
      const grown = new this.type(this.data.length * 2);
      grown.set(/** @type {any} */ (this.data));
      this.data = grown;
    }
    this.data[this.length++] = v;
  }

  values() {
    return Array.from(this.data.subarray(0, this.length));
  }
}

/** Every tick, as timerstats.Ticks has it: parallel columns of 28 bytes a tick. */
class Recorder {
  constructor() {
    /** @type {Map<string, number>} */
    this.ids = new Map();
    /** @type {string[]} */
    this.uids = [];
    this.object = new Column(Int32Array);
    this.arrival = new Column(BigInt64Array);
    this.scheduled = new Column(BigInt64Array);
    this.ack = new Column(BigInt64Array);
  }

  /** @param {string} uid @param {bigint} arrival @param {Date | undefined} scheduled */
  record(uid, arrival, scheduled) {
    let i = this.ids.get(uid);
    if (i === undefined) {
      i = this.uids.length;
      this.ids.set(uid, i);
      this.uids.push(uid);
    }
    this.object.push(i);
    this.arrival.push(arrival);
    this.scheduled.push(BigInt(scheduled ? scheduled.getTime() : 0) * 1000000n);
    // The ack leaves when the function returns, right after this.
    this.ack.push(nowNs());
  }

  progress() {
    return { ticks: this.object.length, objects: this.uids.length, last_unix_nano: nowNs() };
  }

  ticks() {
    return {
      uids: this.uids, object: this.object.values(),
      arrival_unix_nano: this.arrival.values(), scheduled_unix_nano: this.scheduled.values(), ack_unix_nano: this.ack.values(),
    };
  }
}

/** JSON with bigints as bare numbers (Go reads int64 from them exactly). */
function toJSON(/** @type {unknown} */ value) {
  return JSON.stringify(value, (_, v) => (typeof v === "bigint" ? `@@${v}@@` : v)).replace(/"@@(-?\d+)@@"/g, "$1") + "\n";
}

/** value to file through a temporary file and a rename. */
function writeJSON(/** @type {string} */ file, /** @type {unknown} */ value) {
  const tmp = `${file}.tmp${process.pid}`;
  fs.writeFileSync(tmp, toJSON(value));
  fs.renameSync(tmp, file);
}

/** "1s", "500ms", "2m" or a number of seconds, in milliseconds. */
function parseDuration(/** @type {string} */ s) {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(s);
  if (!m) throw new tether.ConfigError(`--interval: ${JSON.stringify(s)} is not a duration such as 1s or 500ms`);
  const n = Number(m[1]);
  return m[2] === "ms" ? n : m[2] === "m" ? n * 60000 : n * 1000;
}

async function main() {
  const { values: a } = parseArgs({
    options: {
      addr: { type: "string", default: "127.0.0.1:7443" },
      name: { type: "string", default: "timers" },
      namespace: { type: "string" },
      interval: { type: "string", default: "1s" },
      sharp: { type: "boolean", default: false },
      "no-hold": { type: "boolean", default: false },
      window: { type: "string", default: "256" },
      stats: { type: "string" },
      ticks: { type: "string" },
    },
  });
  if (!a.namespace) throw new tether.ConfigError("--namespace is required");
  const rec = new Recorder();
  const h = new tether.Handler(a.name ?? "timers", { insecure: true, window: Number(a.window), reconnectMax: 1000 });
  h.onTimer(widgets, async (d) => { rec.record(d.ref.uid, nowNs(), d.scheduled); }, {
    id: "tick", namespaces: [a.namespace], interval: parseDuration(a.interval ?? "1s"),
    ...(a.sharp ? { sharp: true } : {}), ...(a["no-hold"] ? { finalizer: "none" } : {}),
  });
  const stats = a.stats;
  const writer = stats ? setInterval(() => writeJSON(stats, rec.progress()), 1000) : undefined;
  try {
    // Until SIGTERM or SIGINT; then it drains and says goodbye.
    await h.run(a.addr ?? "", { signal: tether.untilSignal() });
  } finally {
    clearInterval(writer);
  }
  if (a.ticks) writeJSON(a.ticks, rec.ticks());
}

main().catch((err) => {
  console.error(`timerhandler: ${err.message}`);
  process.exitCode = err instanceof tether.RejectedError || err instanceof tether.ConfigError ? 2 : 1;
});
