// The parts that need no broker: the reconnect backoff, message cutting,
// binding checks, and the version Hello.sdk names.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Backoff } from "../src/backoff";
import { truncate } from "../src/delivery";
import { ConfigError, Handler, version } from "../src";

test("the backoff doubles from min to max, each delay in the upper half of its step, and resets", () => {
  const top = new Backoff(500, 2000, () => 1);
  assert.deepEqual([top.next(), top.next(), top.next(), top.next()], [500, 1000, 2000, 2000]);
  const bottom = new Backoff(500, 2000, () => 0);
  assert.deepEqual([bottom.next(), bottom.next(), bottom.next()], [250, 500, 1000]);
  bottom.reset();
  assert.equal(bottom.next(), 250);
});

test("messages are cut at 1024 bytes without splitting a character", () => {
  assert.equal(truncate("short"), "short");
  const cut = truncate("é".repeat(1000));
  assert.ok(Buffer.byteLength(cut) <= 1024);
  assert.ok(cut.endsWith("é…"));
});

test("an invalid configuration names every problem before connecting", async () => {
  const h = new Handler("Bad_Name", { insecure: true });
  h.onTimer({ resource: "widgets" }, async () => {}, { interval: 10 });
  h.onField({ resource: "widgets" }, "", async () => {});
  await assert.rejects(h.run("127.0.0.1:1"), (err: unknown) => {
    assert.ok(err instanceof ConfigError);
    assert.match(err.message, /handler name "Bad_Name"/);
    assert.match(err.message, /timer needs an interval of at least 100 ms/);
    assert.match(err.message, /field binding needs a field path/);
    return true;
  });
});

test("the SDK's version is package.json's", () => {
  const pkg = JSON.parse(readFileSync(join(__dirname, "..", "..", "package.json"), "utf8"));
  assert.equal(version, pkg.version);
});
