// Outside insecure mode: TLS with the broker's CA, and the bearer token
// read from its file on every connection attempt, so that a rotated
// ServiceAccount token is used (docs/protocol.md, conn.auth).

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { status } from "@grpc/grpc-js";
import { Handler } from "../src";
import { TestBroker } from "../src/testing";
import { readToken } from "../src/connection";
import { DEFAULT_TOKEN_FILES } from "../src/limits";

// A self-signed certificate for localhost and 127.0.0.1, valid until 2126, made for these tests.
const testdata = join(__dirname, "..", "..", "test", "testdata");
const tls = { cert: readFileSync(join(testdata, "broker.crt")), key: readFileSync(join(testdata, "broker.key")) };
const widgets = { group: "test.tether.dev", version: "v1", resource: "widgets" };

test("over TLS, each connection sends the token its file holds at that moment", async (t) => {
  const broker = await TestBroker.start({ tls });
  const tokenFile = join(mkdtempSync(join(tmpdir(), "tether-token-")), "token");
  writeFileSync(tokenFile, "first-token\n");
  const h = new Handler("widgets", { ...broker.options(), insecure: false, ca: tls.cert, tokenFile });
  h.onCreate(widgets, async () => {});
  await broker.run(h);
  t.after(() => broker.stop());
  writeFileSync(tokenFile, "rotated-token\n");
  broker.disconnect(status.UNAVAILABLE, "broker restarting");
  await until(() => broker.hellos.length === 2);
  assert.deepEqual(broker.authorizations, ["Bearer first-token", "Bearer rotated-token"]);
});

test("a broker whose certificate the CA did not sign is not talked to", async () => {
  const broker = await TestBroker.start({ tls });
  const lost: string[] = [];
  const quiet = () => {};
  const logger = { debug: quiet, info: quiet, error: quiet, warn: (m: string, f?: Record<string, unknown>) => m.includes("lost") && lost.push(String(f?.error)) };
  // No ca: the system roots, which do not include the test certificate.
  const h = new Handler("widgets", { ...broker.options(), insecure: false, token: "t", logger });
  h.onCreate(widgets, async () => {});
  const stop = new AbortController();
  const ran = h.run(broker.address, { signal: stop.signal });
  try {
    // An attempt ends at the connect timeout (5 s): TLS keeps failing until then.
    await until(() => lost.length >= 1);
  } finally {
    stop.abort();
    await ran;
    await broker.stop();
  }
  assert.match(lost[0], /connecting to localhost:\d+: Failed to connect before the deadline/);
  assert.equal(broker.hellos.length, 0, "no attempt gets as far as a Hello");
});

test("the CA file is read again at every connection attempt", async (t) => {
  // At first the file holds another CA than the broker's: the attempt
  // fails. Once the file holds the broker's CA (a rotated CA, mounted),
  // the next attempt trusts it.
  const dir = mkdtempSync(join(tmpdir(), "tether-ca-"));
  const caFile = join(dir, "ca.crt");
  execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", join(dir, "other.key"),
    "-out", caFile, "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"], { stdio: "ignore" });
  const broker = await TestBroker.start({ tls });
  t.after(() => broker.stop());
  const lost: string[] = [];
  const quiet = () => {};
  const logger = { debug: quiet, info: quiet, error: quiet, warn: (m: string) => m.includes("lost") && lost.push(m) };
  const h = new Handler("widgets", { ...broker.options(), insecure: false, token: "t", caFile, logger });
  h.onCreate(widgets, async () => {});
  const stop = new AbortController();
  const ran = h.run(broker.address, { signal: stop.signal });
  t.after(async () => {
    stop.abort();
    await ran;
  });
  await until(() => lost.length >= 1);
  assert.equal(broker.hellos.length, 0, "a broker the CA file does not vouch for was talked to");
  writeFileSync(caFile, tls.cert);
  await until(() => broker.hellos.length === 1);
});

test("in insecure mode no token is sent", async (t) => {
  const broker = await TestBroker.start();
  const h = new Handler("widgets", { ...broker.options(), token: "secret" });
  h.onCreate(widgets, async () => {});
  await broker.run(h);
  t.after(() => broker.stop());
  assert.deepEqual(broker.authorizations, [""]);
});

async function until(cond: () => boolean): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error("condition not met within 15 s");
    await new Promise((r) => setTimeout(r, 5));
  }
}

test("without a token or tokenFile, the first default file that exists is read, the broker's audience first", async () => {
  const dir = mkdtempSync(join(tmpdir(), "tether-token-"));
  const brokerToken = join(dir, "tether.dev-token"), serviceToken = join(dir, "sa-token");
  writeFileSync(serviceToken, "service\n");
  assert.deepEqual(await readToken([brokerToken, serviceToken]), [serviceToken, "service\n"]);
  writeFileSync(brokerToken, "broker\n");
  assert.deepEqual(await readToken([brokerToken, serviceToken]), [brokerToken, "broker\n"]);
  await assert.rejects(readToken([brokerToken + "-missing", serviceToken + "-missing"]), /ENOENT/);
  assert.equal(DEFAULT_TOKEN_FILES[0], "/var/run/secrets/tether.dev/token");
});
