#!/usr/bin/env node
// The TypeScript SDK's handler that test/typescript runs against broker
// replicas: a fail-closed validate binding on widgets in one namespace,
// given every replica's address, so that it keeps a session to each. It
// prints "REVIEW ns/name" for each review it answers, for the test to count,
// and stops on SIGTERM. It uses the SDK's build by path (npm run build in
// sdk/typescript).
//
//   node handler.js --broker 127.0.0.1:7443 --broker 127.0.0.1:7444 --name tsreviews --namespace ns
// @ts-check
"use strict";

const path = require("node:path");
const { parseArgs } = require("node:util");
const { Handler, untilSignal } = require(path.join(__dirname, "..", "..", "..", "sdk", "typescript", "build", "src"));

const widgets = { group: "test.tether.dev", version: "v1", resource: "widgets" };

async function main() {
  const { values } = parseArgs({
    options: {
      broker: { type: "string", multiple: true, default: ["127.0.0.1:7443"] },
      name: { type: "string", default: "tsreviews" },
      namespace: { type: "string", default: "" },
    },
  });
  const h = new Handler(values.name, { insecure: true, reconnectMin: 50, reconnectMax: 500 });
  h.onValidate(widgets, async (r) => {
    process.stdout.write(`REVIEW ${r.namespace}/${r.name}\n`);
  }, { namespaces: values.namespace ? [values.namespace] : undefined, admission: { failurePolicy: "fail" } });
  const brokers = values.broker ?? [];
  await h.run(brokers.length === 1 ? brokers[0] : brokers, { signal: untilSignal() });
}

main().catch((err) => {
  process.stderr.write(`tsreviews: ${err.stack ?? err}\n`);
  process.exit(1);
});
