// The replicator: copies Secrets and ConfigMaps annotated
// replicator.tether.dev/enabled: "true" into other namespaces, as the Go
// example handler (cmd/example-handler) and the Python example do.
//
// replicator.tether.dev/include-namespaces and exclude-namespaces (both
// comma-separated) pick the namespaces; no include list means every other
// namespace. Copies are labelled replicator.tether.dev/copy: "true", name
// their source in replicator.tether.dev/source: "<namespace>/<name>", and
// are kept in step on create, update and a reconcile timer that repairs
// drift; deleting the source deletes them. The timer and the delete binding
// hold each source until its copies are gone.
//
//   TETHER_BROKER=host:port node build/examples/replicator.js
//
// REPLICATOR_RECONCILE_INTERVAL (milliseconds, default 30000) sets the
// timer. The copies are written with the handler's own Kubernetes access
// (examples/kube.ts): it must list namespaces, and list, get, create,
// update and delete Secrets and ConfigMaps in every namespace.

import { Handler, PermanentError, TemporaryError, untilSignal, type Delivery } from "../src";
import { ApiError, CONFIGMAPS, Client, NAMESPACES, SECRETS, type Api, type KubeObject, type Resource } from "./kube";

const PREFIX = "replicator.tether.dev/";
export const ENABLED = PREFIX + "enabled";
export const INCLUDE = PREFIX + "include-namespaces";
export const EXCLUDE = PREFIX + "exclude-namespaces";
export const SOURCE = PREFIX + "source";
export const COPY = PREFIX + "copy";
// kubectl's record of an apply describes the source, not the copy (and on a Secret holds its data).
const LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration";
// Conflicting writes of one copy in one delivery; past them the broker retries on its backoff.
const WRITE_ATTEMPTS = 5;

/** Registers the four bindings per resource on h, all for sources only (copies never carry the enabled annotation). */
export function register(h: Handler, api: Api, interval = 30_000): Handler {
  const only = { annotations: { [ENABLED]: "true" } };
  for (const r of [SECRETS, CONFIGMAPS]) {
    const sync = (d: Delivery) => syncCopies(api, r, d);
    h.onCreate(r, sync, { ...only, id: `create-${r.resource}` });
    h.onUpdate(r, sync, { ...only, id: `update-${r.resource}` });
    // The first tick waits one interval: create has just synced.
    h.onTimer(r, sync, { ...only, id: `reconcile-${r.resource}`, interval, initialDelay: interval });
    h.onDelete(r, (d) => cleanup(api, r, d), { ...only, id: `cleanup-${r.resource}` });
  }
  return h;
}

/**
 * Makes the copies of the source match it: one in every target namespace,
 * none elsewhere. An object of the source's name that is not its copy is
 * left alone and named in a permanent error, after the other targets.
 */
async function syncCopies(api: Api, r: Resource, d: Delivery): Promise<void> {
  const src = d.object;
  const key = sourceKey(src);
  const anns = src.metadata.annotations ?? {};
  const [namespaces, copies] = await kube(`listing namespaces and copies of ${key}`, () =>
    Promise.all([api.list(NAMESPACES), copiesOf(api, r, key)]),
  );
  const targets = selectNamespaces(activeNamespaces(namespaces), src.metadata.namespace, anns[INCLUDE] ?? "", anns[EXCLUDE] ?? "");
  const skipped: string[] = [];
  for (const ns of targets) {
    const err = await kube(`replicating ${key} to namespace ${ns}`, () => ensure(api, r, src, ns, copies.get(ns)));
    if (err) skipped.push(err);
  }
  for (const [ns, stale] of copies) {
    if (targets.includes(ns)) continue;
    await kube(`removing the copy in ${ns}, no longer a target`, () => deleteExact(api, r, stale));
    d.log.info("removed a copy, no longer a target", { namespace: ns });
  }
  if (skipped.length > 0) throw new PermanentError(`not replicated: ${skipped.join("; ")}`);
}

/** Deletes every copy of the source being deleted; the hold keeps the source until this returns. */
async function cleanup(api: Api, r: Resource, d: Delivery): Promise<void> {
  const copies = await kube("listing the copies", () => copiesOf(api, r, sourceKey(d.object)));
  for (const c of copies.values()) await kube("deleting a copy", () => deleteExact(api, r, c));
  d.log.info("source deleted; copies removed", { copies: copies.size });
}

/** Creates or updates the copy of src in ns (cur as listed); returns why it left an object that is not the copy alone. */
async function ensure(api: Api, r: Resource, src: KubeObject, ns: string, cur: KubeObject | undefined): Promise<string | undefined> {
  const key = sourceKey(src);
  const name = src.metadata.name;
  for (let i = 0; i < WRITE_ATTEMPTS; i++) {
    if (cur === undefined) {
      if (await ok(() => api.create(r, ns, buildCopy(src, ns)), [409])) return undefined;
    } else {
      if (!isCopyOf(cur, key)) return notACopy(ns, name, cur);
      const want = buildCopy(src, ns, cur);
      if (upToDate(cur, want)) return undefined;
      const status = await failure(() => api.replace(r, ns, want), [409, 404, 422]);
      if (status === undefined) return undefined;
      if (status === 422) {
        // An immutable copy cannot be updated: replace it.
        await deleteExact(api, r, cur);
        cur = undefined;
        continue;
      }
    }
    cur = await api.get(r, ns, name).catch((e) => (e instanceof ApiError && e.status === 404 ? undefined : Promise.reject(e)));
    if (cur !== undefined && labels(cur)[COPY] !== "true") return notACopy(ns, name, cur);
  }
  throw new TemporaryError(`${WRITE_ATTEMPTS} conflicting writes of ${ns}/${name} in a row; trying again later`);
}

/** Deletes obj, but only the version that was read: a newer one, or another object under the name, stays. */
async function deleteExact(api: Api, r: Resource, obj: KubeObject): Promise<void> {
  const m = obj.metadata;
  await failure(() => api.delete(r, m.namespace, m.name, { uid: m.uid, resourceVersion: m.resourceVersion }), [404]);
}

async function copiesOf(api: Api, r: Resource, key: string): Promise<Map<string, KubeObject>> {
  const all = await api.list(r, "", `${COPY}=true`);
  return new Map(all.filter((c) => isCopyOf(c, key)).map((c) => [c.metadata.namespace, c]));
}

/** The copy of src in ns: its payload, its labels plus the copy label, its annotations without tether.dev ones plus the source; with cur, cur updated. */
export function buildCopy(src: KubeObject, ns: string, cur?: KubeObject): KubeObject {
  const out: KubeObject = structuredClone(payload(src));
  out.apiVersion = src.apiVersion;
  out.kind = src.kind;
  const anns = Object.fromEntries(Object.entries(annotations(src)).filter(([k]) => !tetherAnnotation(k) && k !== LAST_APPLIED));
  if (cur) {
    for (const [k, v] of Object.entries(annotations(cur))) if (tetherAnnotation(k) && !k.startsWith(PREFIX)) anns[k] = v;
  }
  anns[SOURCE] = sourceKey(src);
  out.metadata = { ...(cur ? structuredClone(cur.metadata) : {}), namespace: ns, name: src.metadata.name, labels: { ...labels(src), [COPY]: "true" }, annotations: anns };
  return out;
}

/** The namespaces a source in own is copied to: the include list (all when empty) minus the exclude list and own; sorted. */
export function selectNamespaces(existing: string[], own: string, include: string, exclude: string): string[] {
  const inc = splitList(include);
  const exc = splitList(exclude);
  return [...new Set(existing)].filter((ns) => ns !== own && !exc.includes(ns) && (inc.length === 0 || inc.includes(ns))).sort();
}

function activeNamespaces(items: KubeObject[]): string[] {
  return items.filter((ns) => !ns.metadata.deletionTimestamp && ns.status?.phase !== "Terminating").map((ns) => ns.metadata.name);
}

const splitList = (text: string) => text.split(",").map((s) => s.trim()).filter(Boolean);
const sourceKey = (obj: KubeObject) => `${obj.metadata.namespace}/${obj.metadata.name}`;
const labels = (obj: KubeObject): Record<string, string> => obj.metadata?.labels ?? {};
const annotations = (obj: KubeObject): Record<string, string> => obj.metadata?.annotations ?? {};
const isCopyOf = (obj: KubeObject, key: string) => labels(obj)[COPY] === "true" && annotations(obj)[SOURCE] === key;
const payload = (obj: KubeObject) => Object.fromEntries(Object.entries(obj).filter(([k]) => !["apiVersion", "kind", "metadata", "status"].includes(k)));
const same = (a: unknown, b: unknown) => JSON.stringify(sorted(a)) === JSON.stringify(sorted(b));
const upToDate = (cur: KubeObject, want: KubeObject) =>
  same(labels(cur), labels(want)) && same(annotations(cur), annotations(want)) && same(payload(cur), payload(want));

/** Whether an annotation is in the tether.dev domain: the replicator's settings and every handler's bookkeeping. */
function tetherAnnotation(key: string): boolean {
  const slash = key.indexOf("/");
  if (slash < 0) return false;
  const prefix = key.slice(0, slash);
  return prefix === "tether.dev" || prefix.endsWith(".tether.dev");
}

function notACopy(ns: string, name: string, cur: KubeObject): string {
  const owner = annotations(cur)[SOURCE];
  return owner ? `${ns}/${name} is a copy of ${owner}` : `${ns}/${name} exists and is not a copy; left as it is`;
}

function sorted(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sorted);
  if (typeof v !== "object" || v === null) return v;
  return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sorted((v as KubeObject)[k])]));
}

/** Runs call; an API error becomes a TemporaryError saying what was being done. */
async function kube<T>(what: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (err instanceof ApiError) throw new TemporaryError(`${what}: ${err.message}`, { cause: err });
    throw err;
  }
}

/** The HTTP status of call's ApiError when it is one of tolerated, undefined when call succeeds; other errors are thrown. */
async function failure(call: () => Promise<unknown>, tolerated: number[]): Promise<number | undefined> {
  try {
    await call();
    return undefined;
  } catch (err) {
    if (err instanceof ApiError && tolerated.includes(err.status)) return err.status;
    throw err;
  }
}

async function ok(call: () => Promise<unknown>, tolerated: number[]): Promise<boolean> {
  return (await failure(call, tolerated)) === undefined;
}

if (require.main === module) {
  const env = process.env;
  const h = register(
    new Handler(env.TETHER_HANDLER ?? "replicator", { insecure: env.TETHER_INSECURE === "true" }),
    new Client("tether-example-replicator"),
    Number(env.REPLICATOR_RECONCILE_INTERVAL ?? 30_000),
  );
  h.run(env.TETHER_BROKER ?? "tether-broker.tether-system.svc:7443", { signal: untilSignal() }).catch((err: Error) => {
    console.error(`replicator: ${err.message}`);
    process.exitCode = 2;
  });
}
