// The TypeScript SDK's handler that test/tracing runs as a real process: it
// binds widgets with a create and a delete binding in one namespace and
// sends the spans of its functions to the OTLP endpoint the OTEL_* variables
// name, set up as a Node program that traces sets itself up (a
// NodeTracerProvider registered as the global one). It prints
// "CREATE ns/name" and "DELETE ns/name" for the test to follow, and on
// SIGTERM stops and sends the spans it still holds.
//
//   node handler.js --broker 127.0.0.1:7443 --name tshandler --namespace ns

"use strict";

const { parseArgs } = require("node:util");
const { OTLPTraceExporter } = require("@opentelemetry/exporter-trace-otlp-grpc");
const { detectResources, envDetector } = require("@opentelemetry/resources");
const { BatchSpanProcessor, NodeTracerProvider } = require("@opentelemetry/sdk-trace-node");
const { Handler, untilSignal } = require("@tether-dev/tether");

async function main() {
  const { values } = parseArgs({
    options: { broker: { type: "string", default: "127.0.0.1:7443" }, name: { type: "string", default: "tshandler" }, namespace: { type: "string", default: "" } },
  });
  // The exporter reads OTEL_EXPORTER_OTLP_ENDPOINT, the resource
  // OTEL_SERVICE_NAME, the batcher OTEL_BSP_SCHEDULE_DELAY.
  const provider = new NodeTracerProvider({
    resource: detectResources({ detectors: [envDetector] }),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
  });
  provider.register();

  const h = new Handler(values.name, { insecure: true, reconnectMin: 50, reconnectMax: 500 });
  const widgets = { group: "test.tether.dev", version: "v1", resource: "widgets" };
  const say = (kind) => async (d) => {
    process.stdout.write(`${kind} ${d.ref.namespace}/${d.ref.name}\n`);
  };
  const namespaces = values.namespace ? [values.namespace] : undefined;
  h.onCreate(widgets, say("CREATE"), { id: "create", namespaces });
  h.onDelete(widgets, say("DELETE"), { id: "delete", namespaces });
  try {
    await h.run(values.broker, { signal: untilSignal() });
  } finally {
    await provider.shutdown();
  }
}

main().catch((err) => {
  process.stderr.write(`tshandler: ${err.stack ?? err}\n`);
  process.exit(1);
});
