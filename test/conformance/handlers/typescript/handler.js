#!/usr/bin/env node
// The TypeScript SDK's handler for the conformance kit: the bindings and
// answers of test/conformance/README.md, on the TypeScript SDK
// (sdk/typescript), in plain JavaScript on its build (npm run build there).
//
//   node test/conformance/handlers/typescript/handler.js
// @ts-check
"use strict";

const crypto = require("node:crypto");
const fs = require("node:fs");
const path = require("node:path");
const tether = require(path.join(__dirname, "..", "..", "..", "..", "sdk", "typescript", "build", "src"));

const widgets = { group: "test.tether.dev", version: "v1", resource: "widgets" };
const env = process.env;
const namespaces = [env.TETHER_NAMESPACE ?? ""];

/** @param {import("../../../../sdk/typescript/build/src").Delivery} d */
async function create(d) {
  switch (d.object.spec?.scenario) {
    case "ok":
      return { result: { scenario: "ok" } };
    case "retry":
      if (d.attempt === 1) throw new tether.TemporaryError("conformance: try again", { retryAfter: 1000 });
      return { result: { attempt: d.attempt } };
    case "fail":
      throw new tether.PermanentError("conformance: permanent failure");
    case "patch":
      return { patch: { metadata: { labels: { "conformance.tether.dev/patched": "yes" } } }, statusPatch: { phase: "Patched" } };
    case "big":
      return { patch: { metadata: { annotations: { "conformance.tether.dev/big": "x".repeat(5 << 20) } } } };
    case "events":
      d.record({ type: "Normal", reason: "Conformance", message: "conformance: an Event" });
      return undefined;
    case "slow": // runs a second, so that the kit's second create finds the window full
      await new Promise((resolve) => setTimeout(resolve, 1000));
      return undefined;
    case "held":
      await awaitRelease(d.object.metadata?.name ?? "");
      return undefined;
  }
}

/** Returns once the kit has released the create of widget name: the file release-<name> is in
 * $TETHER_CONFORMANCE_DIR. Looks every 20 ms, and gives up waiting after 30 s.
 * @param {string} name */
async function awaitRelease(name) {
  const file = path.join(env.TETHER_CONFORMANCE_DIR ?? "", `release-${name}`);
  const giveUp = Date.now() + 30_000;
  while (!fs.existsSync(file) && Date.now() < giveUp) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Runs until stopped, then takes half a second to clean up, which its stop's ack waits for; for
 * scenario exit, returns at once, which the SDK reports with DaemonExited; for scenario session,
 * beats while it runs.
 * @param {import("../../../../sdk/typescript/build/src").Delivery} d */
async function daemon(d) {
  if (d.object.spec?.scenario === "exit") return;
  if (d.object.spec?.scenario === "session") await beat(d.signal);
  await new Promise((resolve) => {
    if (d.signal.aborted) resolve(undefined);
    else d.signal.addEventListener("abort", () => resolve(undefined), { once: true });
  });
  await new Promise((resolve) => setTimeout(resolve, 500));
}

/** Appends a line to a new file of $TETHER_CONFORMANCE_DIR every 100 ms until signal is aborted,
 * so that the kit sees when the daemon stops.
 * @param {AbortSignal} signal */
async function beat(signal) {
  const fd = fs.openSync(path.join(env.TETHER_CONFORMANCE_DIR ?? "", `session-${crypto.randomUUID()}`), "wx");
  try {
    while (!signal.aborted) {
      fs.writeSync(fd, "beat\n");
      await new Promise((resolve) => {
        const done = () => {
          clearTimeout(t);
          signal.removeEventListener("abort", done);
          resolve(undefined);
        };
        const t = setTimeout(done, 100);
        signal.addEventListener("abort", done, { once: true });
      });
    }
  } finally {
    fs.closeSync(fd);
  }
}

/** @param {import("../../../../sdk/typescript/build/src").Review} r */
function validate(r) {
  if (r.object?.spec?.scenario === "deny") throw new tether.DeniedError("conformance: denied");
}

/** @param {import("../../../../sdk/typescript/build/src").Review} r */
function mutate(r) {
  if (r.object?.spec?.scenario === "mutate") {
    r.object.metadata = r.object.metadata ?? {};
    r.object.metadata.labels = { ...r.object.metadata.labels, "conformance.tether.dev/mutated": "yes" };
  }
}

async function main() {
  const h = new tether.Handler(env.TETHER_HANDLER ?? "", { insecure: env.TETHER_INSECURE === "true" });
  h.onCreate(widgets, create, { id: "create", namespaces });
  h.onDelete(widgets, async () => {}, { id: "delete", namespaces });
  h.onTimer(widgets, async () => ({ result: { ticked: true } }), {
    id: "tick", namespaces, interval: 500, labelSelector: "conformance.tether.dev/timer=yes",
  });
  h.onDaemon(widgets, daemon, { id: "daemon", namespaces, labelSelector: "conformance.tether.dev/daemon=yes", cancellationTimeout: 10000 });
  const admission = { namespaces, labelSelector: "conformance.tether.dev/admission=yes" };
  h.onValidate(widgets, validate, { id: "validate", ...admission });
  h.onMutate(widgets, mutate, { id: "mutate", ...admission });
  await h.run(env.TETHER_BROKER ?? "", { signal: tether.untilSignal() });
}

main().catch((err) => {
  console.error(`conformance handler: ${err.message}`);
  process.exitCode = err instanceof tether.RejectedError || err instanceof tether.ConfigError ? 2 : 1;
});
