// The replicator example (examples/replicator.ts) through the test kit,
// with an in-memory Kubernetes API in place of the cluster.

import { test } from "node:test";
import assert from "node:assert/strict";
import { Handler } from "../src";
import { TestBroker } from "../src/testing";
import { ApiError, type Api, type KubeObject, type Resource } from "../examples/kube";
import { COPY, ENABLED, EXCLUDE, SOURCE, register, selectNamespaces } from "../examples/replicator";

/** An in-memory API: objects by resource, namespace and name, with resourceVersions and delete preconditions. */
class FakeApi implements Api {
  readonly objects = new Map<string, KubeObject>();
  private rv = 0;

  constructor(namespaces: string[]) {
    for (const ns of namespaces) this.put({ resource: "namespaces" } as Resource, { metadata: { name: ns } });
  }
  private key(r: Resource, ns: string, name: string) {
    return `${r.resource}/${ns}/${name}`;
  }
  private put(r: Resource, obj: KubeObject): KubeObject {
    const stored = structuredClone(obj);
    stored.metadata.resourceVersion = String(++this.rv);
    stored.metadata.uid ??= `uid-${this.rv}`;
    this.objects.set(this.key(r, stored.metadata.namespace ?? "", stored.metadata.name), stored);
    return structuredClone(stored);
  }
  async list(r: Resource, namespace = "", labelSelector = "") {
    const [lk, lv] = labelSelector.split("=");
    return [...this.objects.entries()]
      .filter(([k, o]) => k.startsWith(`${r.resource}/`) && (!namespace || o.metadata.namespace === namespace) && (!lk || o.metadata.labels?.[lk] === lv))
      .map(([, o]) => structuredClone(o));
  }
  async get(r: Resource, ns: string, name: string) {
    const o = this.objects.get(this.key(r, ns, name));
    if (!o) throw new ApiError(404, "NotFound", `${name} not found`);
    return structuredClone(o);
  }
  async create(r: Resource, ns: string, obj: KubeObject) {
    if (this.objects.has(this.key(r, ns, obj.metadata.name))) throw new ApiError(409, "AlreadyExists", "exists");
    return this.put(r, obj);
  }
  async replace(r: Resource, ns: string, obj: KubeObject) {
    const cur = await this.get(r, ns, obj.metadata.name);
    if (obj.metadata.resourceVersion !== cur.metadata.resourceVersion) throw new ApiError(409, "Conflict", "stale");
    return this.put(r, obj);
  }
  async delete(r: Resource, ns: string, name: string, pre: { uid?: string; resourceVersion?: string } = {}) {
    const cur = await this.get(r, ns, name);
    if ((pre.uid && pre.uid !== cur.metadata.uid) || (pre.resourceVersion && pre.resourceVersion !== cur.metadata.resourceVersion)) {
      throw new ApiError(409, "Conflict", "precondition failed");
    }
    this.objects.delete(this.key(r, ns, name));
  }
}

const secret = (annotations: Record<string, string> = {}) => ({
  apiVersion: "v1",
  kind: "Secret",
  metadata: { name: "creds", namespace: "src", uid: "uid-src", annotations: { [ENABLED]: "true", ...annotations } },
  type: "Opaque",
  data: { password: "c2VjcmV0" },
});

async function started(api: FakeApi): Promise<TestBroker> {
  const broker = await TestBroker.start();
  await broker.run(register(new Handler("replicator", broker.options()), api, 60_000));
  return broker;
}

test("a source is copied into every other namespace but the excluded, and its copies deleted with it", async (t) => {
  const api = new FakeApi(["src", "a", "b", "skip"]);
  const broker = await started(api);
  t.after(() => broker.stop());
  const got = await broker.deliverTo("create-secrets", secret({ [EXCLUDE]: "skip" }));
  assert.equal(got.outcome, "OK", got.message);
  const copies = await api.list({ group: "", version: "v1", resource: "secrets" }, "", `${COPY}=true`);
  assert.deepEqual(copies.map((c) => c.metadata.namespace).sort(), ["a", "b"]);
  assert.equal(copies[0].metadata.annotations[SOURCE], "src/creds");
  assert.equal(copies[0].metadata.annotations[ENABLED], undefined, "a copy is never a source");
  assert.deepEqual(copies[0].data, { password: "c2VjcmV0" });

  const gone = await broker.deliverTo("cleanup-secrets", secret());
  assert.equal(gone.outcome, "OK", gone.message);
  assert.equal((await api.list({ group: "", version: "v1", resource: "secrets" }, "", `${COPY}=true`)).length, 0);
});

test("the reconcile tick repairs a copy edited by hand, and leaves an object that is not a copy alone with a FAIL", async (t) => {
  const api = new FakeApi(["src", "a", "b"]);
  const secrets = { group: "", version: "v1", resource: "secrets" };
  await api.create(secrets, "b", { metadata: { name: "creds", namespace: "b" }, data: { mine: "eA==" } });
  const broker = await started(api);
  t.after(() => broker.stop());
  const first = await broker.deliverTo("create-secrets", secret());
  assert.equal(first.outcome, "FAIL");
  assert.match(first.message, /b\/creds exists and is not a copy/);
  const edited = await api.get(secrets, "a", "creds");
  edited.data = { password: "d3Jvbmc=" };
  await api.replace(secrets, "a", edited);
  const tick = await broker.deliverTo("reconcile-secrets", secret());
  assert.equal(tick.outcome, "FAIL", "b still holds its own Secret");
  assert.deepEqual((await api.get(secrets, "a", "creds")).data, { password: "c2VjcmV0" });
  assert.deepEqual((await api.get(secrets, "b", "creds")).data, { mine: "eA==" });
});

test("an API error is a RETRY naming what was being done", async (t) => {
  const api = new FakeApi(["src", "a"]);
  api.list = async () => {
    throw new ApiError(503, "ServiceUnavailable", "etcd is away");
  };
  const broker = await started(api);
  t.after(() => broker.stop());
  const got = await broker.deliverTo("update-secrets", secret(), { old: secret() });
  assert.equal(got.outcome, "RETRY");
  assert.match(got.message, /listing namespaces and copies of src\/creds: 503 ServiceUnavailable: etcd is away/);
});

test("the target namespaces: the include list or all, less the excluded and the source's own", () => {
  assert.deepEqual(selectNamespaces(["src", "a", "b", "c"], "src", "", "c"), ["a", "b"]);
  assert.deepEqual(selectNamespaces(["src", "a", "b", "c"], "src", " b, src ,x", ""), ["b"]);
});
