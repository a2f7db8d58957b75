// Validate and mutate bindings through the test kit: allowed, denied with
// a code and warnings, a failing function, and a mutation's JSON patch.

import { test } from "node:test";
import assert from "node:assert/strict";
import { DeniedError, Handler } from "../src";
import { jsonPatch } from "../src/admission";
import { TestBroker } from "../src/testing";
import { BindingKind, Capability } from "../src/gen/tether/v1/broker_pb";

const widgets = { group: "test.tether.dev", version: "v1", resource: "widgets" };
const widget = (spec: Record<string, unknown>) => ({ apiVersion: "test.tether.dev/v1", kind: "Widget", metadata: { name: "w", namespace: "default" }, spec });

test("a validate function allows by returning and denies by throwing a DeniedError; another error is the webhook failing", async (t) => {
  const broker = await TestBroker.start();
  const h = new Handler("widgets", broker.options());
  h.onValidate(widgets, async (r) => {
    const size = r.object?.spec.size;
    if (size === undefined) throw new Error("cannot read the size");
    if (size > 10) throw new DeniedError("a widget may be at most 10", { code: 422, warnings: ["sizes shrink"] });
    return { warnings: r.operation === "UPDATE" ? ["resized"] : [] };
  }, { admission: { operations: ["CREATE", "UPDATE"], failurePolicy: "fail", timeout: 5000 } });
  await broker.run(h);
  t.after(() => broker.stop());
  assert.deepEqual(pick(await broker.validate(widget({ size: 3 }))), { outcome: "OK", allowed: true, message: "", code: 0, warnings: [] });
  assert.deepEqual(pick(await broker.validate(widget({ size: 4 }), { operation: "UPDATE", old: widget({ size: 3 }) })), { outcome: "OK", allowed: true, message: "", code: 0, warnings: ["resized"] });
  assert.deepEqual(pick(await broker.validate(widget({ size: 11 }))), { outcome: "OK", allowed: false, message: "a widget may be at most 10", code: 422, warnings: ["sizes shrink"] });
  const failed = await broker.validate(widget({}));
  assert.equal(failed.outcome, "FAIL");
  assert.equal(failed.message, "cannot read the size");
  const b = broker.bindings()[0];
  assert.equal(b.kind, BindingKind.VALIDATE);
  assert.deepEqual([b.admission?.operations, b.admission?.failurePolicy, b.admission?.timeout?.seconds], [[1, 2], 2, 5n]);
  assert.ok(broker.hellos[0].capabilities.includes(Capability.ADMISSION));
});

test("a mutate function changes the object in place and the SDK answers with the JSON patch", async (t) => {
  const broker = await TestBroker.start();
  const h = new Handler("widgets", broker.options());
  h.onMutate(widgets, async (r) => {
    r.object!.metadata.labels = { "example.com/sized": "yes" };
    r.object!.spec.size ??= 1;
    delete r.object!.spec.draft;
  });
  await broker.run(h);
  t.after(() => broker.stop());
  const got = await broker.mutate(widget({ draft: true }));
  assert.equal(got.outcome, "OK");
  assert.equal(got.allowed, true);
  assert.deepEqual(got.patch, [
    { op: "add", path: "/metadata/labels", value: { "example.com/sized": "yes" } },
    { op: "remove", path: "/spec/draft" },
    { op: "add", path: "/spec/size", value: 1 },
  ]);
  const sized = widget({ size: 2 });
  const unchanged = await broker.mutate({ ...sized, metadata: { ...sized.metadata, labels: { "example.com/sized": "yes" } } });
  assert.equal(unchanged.patch, undefined);
});

test("JSON patch paths escape ~ and /, and a changed array is replaced whole", () => {
  assert.deepEqual(jsonPatch({ a: { "x/y~": 1 }, l: [1] }, { a: { "x/y~": 2 }, l: [1, 2] }), [
    { op: "replace", path: "/a/x~1y~0", value: 2 },
    { op: "replace", path: "/l", value: [1, 2] },
  ]);
});

function pick(r: { outcome: string; allowed: boolean; message: string; code: number; warnings: string[] }) {
  return { outcome: r.outcome, allowed: r.allowed, message: r.message, code: r.code, warnings: r.warnings };
}
