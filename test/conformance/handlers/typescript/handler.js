#!/usr/bin/env node
// The TypeScript SDK's handler for the conformance kit: the bindings and
// answers of test/conformance/README.md, on the TypeScript SDK
// (sdk/typescript), in plain JavaScript on its build (npm run build there).
//
//   node test/conformance/handlers/typescript/handler.js
// @ts-check
"use strict";

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
  }
}

async function main() {
  const h = new tether.Handler(env.TETHER_HANDLER ?? "", { insecure: env.TETHER_INSECURE === "true" });
  h.onCreate(widgets, create, { id: "create", namespaces });
  h.onDelete(widgets, async () => {}, { id: "delete", namespaces });
  await h.run(env.TETHER_BROKER ?? "", { signal: tether.untilSignal() });
}

main().catch((err) => {
  console.error(`conformance handler: ${err.message}`);
  process.exitCode = err instanceof tether.RejectedError || err instanceof tether.ConfigError ? 2 : 1;
});
