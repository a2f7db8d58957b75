// A small Kubernetes API client for the examples, on Node's own https: the
// SDK brings no Kubernetes client and the examples add none. It makes the
// five calls the replicator needs (list, get, create, replace, delete),
// JSON in and out, and throws an ApiError naming the status and reason.
//
// It finds the cluster as a pod does (the ServiceAccount's token and CA), or
// from $KUBECONFIG naming a kubeconfig in JSON (kubectl config view --minify
// --flatten -o json), for a handler run on a laptop. The examples call any
// object with Api's methods, so their tests give them an in-memory fake.

import { readFileSync } from "node:fs";
import { request, type RequestOptions } from "node:https";
import { request as plainRequest } from "node:http";

/** group, version and plural; the core group is "". */
export type Resource = { group: string; version: string; resource: string };
export type KubeObject = Record<string, any>;

export const NAMESPACES: Resource = { group: "", version: "v1", resource: "namespaces" };
export const SECRETS: Resource = { group: "", version: "v1", resource: "secrets" };
export const CONFIGMAPS: Resource = { group: "", version: "v1", resource: "configmaps" };

const SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount";
/** Milliseconds for one call; a delivery that waits longer is retried by the broker anyway. */
const TIMEOUT = 30_000;

/** The API server refused a call: status is the HTTP status, reason the Status's (NotFound, AlreadyExists, Conflict, Invalid). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly reason: string,
    message: string,
  ) {
    super(`${status} ${reason}: ${message}`);
    this.name = "ApiError";
  }
}

/** What the examples call; namespace is "" for cluster-scoped resources and, in list, for every namespace. */
export interface Api {
  list(r: Resource, namespace?: string, labelSelector?: string): Promise<KubeObject[]>;
  get(r: Resource, namespace: string, name: string): Promise<KubeObject>;
  create(r: Resource, namespace: string, obj: KubeObject): Promise<KubeObject>;
  replace(r: Resource, namespace: string, obj: KubeObject): Promise<KubeObject>;
  /** Deletes only the object with this uid and resourceVersion when they are given (else a 409 Conflict). */
  delete(r: Resource, namespace: string, name: string, pre?: { uid?: string; resourceVersion?: string }): Promise<void>;
}

interface Cluster {
  server: string;
  tls: Pick<RequestOptions, "ca" | "cert" | "key" | "rejectUnauthorized">;
  token: () => string;
}

/** Api over HTTP(S), for the cluster $KUBECONFIG or the pod's ServiceAccount names. */
export class Client implements Api {
  private cluster?: Cluster;

  constructor(private readonly fieldManager = "") {}

  list(r: Resource, namespace = "", labelSelector = ""): Promise<KubeObject[]> {
    const q = labelSelector ? { labelSelector } : undefined;
    return this.call("GET", this.path(r, namespace, "", q)).then((l) => l.items ?? []);
  }
  get(r: Resource, namespace: string, name: string): Promise<KubeObject> {
    return this.call("GET", this.path(r, namespace, name));
  }
  create(r: Resource, namespace: string, obj: KubeObject): Promise<KubeObject> {
    return this.call("POST", this.path(r, namespace, "", this.manager()), obj);
  }
  replace(r: Resource, namespace: string, obj: KubeObject): Promise<KubeObject> {
    return this.call("PUT", this.path(r, namespace, obj.metadata.name, this.manager()), obj);
  }
  async delete(r: Resource, namespace: string, name: string, pre: { uid?: string; resourceVersion?: string } = {}): Promise<void> {
    const preconditions = Object.fromEntries(Object.entries(pre).filter(([, v]) => v));
    await this.call("DELETE", this.path(r, namespace, name), { apiVersion: "v1", kind: "DeleteOptions", preconditions });
  }

  private manager(): Record<string, string> | undefined {
    return this.fieldManager ? { fieldManager: this.fieldManager } : undefined;
  }

  private path(r: Resource, namespace: string, name: string, query?: Record<string, string>): string {
    const parts = [r.group ? `/apis/${r.group}` : "/api", r.version];
    if (namespace) parts.push("namespaces", encodeURIComponent(namespace));
    parts.push(r.resource);
    if (name) parts.push(encodeURIComponent(name));
    return parts.join("/") + (query ? `?${new URLSearchParams(query)}` : "");
  }

  private call(method: string, path: string, body?: KubeObject): Promise<KubeObject> {
    const c = (this.cluster ??= findCluster());
    const url = new URL(c.server.replace(/\/$/, "") + path);
    const data = body === undefined ? undefined : JSON.stringify(body);
    const token = c.token();
    const send = url.protocol === "https:" ? request : plainRequest;
    return new Promise((resolve, reject) => {
      const req = send(url, {
        method,
        timeout: TIMEOUT,
        headers: { Accept: "application/json", "Content-Type": "application/json", ...(token ? { Authorization: `Bearer ${token}` } : {}) },
        ...c.tls,
      }, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (b: Buffer) => chunks.push(b));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString();
          const json = safeParse(text);
          if ((res.statusCode ?? 500) >= 300) {
            return reject(new ApiError(res.statusCode ?? 500, json.reason ?? "", json.message ?? text.slice(0, 200)));
          }
          resolve(json);
        });
      });
      req.on("timeout", () => req.destroy(new Error(`${method} ${path}: no answer within ${TIMEOUT} ms`)));
      req.on("error", reject);
      req.end(data);
    });
  }
}

function safeParse(text: string): KubeObject {
  try {
    const v = JSON.parse(text || "{}");
    return typeof v === "object" && v !== null ? v : {};
  } catch {
    return {};
  }
}

/** $KUBECONFIG when it is set, else the pod's ServiceAccount. */
function findCluster(env = process.env): Cluster {
  if (env.KUBECONFIG) return fromKubeconfig(env.KUBECONFIG);
  const host = env.KUBERNETES_SERVICE_HOST;
  if (!host) throw new Error("no cluster: not in a pod (no KUBERNETES_SERVICE_HOST) and KUBECONFIG is not set");
  const port = env.KUBERNETES_SERVICE_PORT ?? "443";
  return {
    server: host.includes(":") ? `https://[${host}]:${port}` : `https://${host}:${port}`,
    tls: { ca: readFileSync(`${SERVICE_ACCOUNT}/ca.crt`) },
    token: () => readFileSync(`${SERVICE_ACCOUNT}/token`, "utf8").trim(),
  };
}

/** The current context of a JSON kubeconfig: its server and CA, and a token or a client certificate given inline. */
function fromKubeconfig(path: string): Cluster {
  const cfg = JSON.parse(readFileSync(path, "utf8"));
  const named = (section: string, name: string) => (cfg[section] ?? []).find((e: { name: string }) => e.name === name) ?? {};
  const ctx = named("contexts", cfg["current-context"]).context ?? {};
  const cluster = named("clusters", ctx.cluster).cluster ?? {};
  const user = named("users", ctx.user).user ?? {};
  if (!cluster.server) throw new Error(`kubeconfig ${path}: no server for the current context`);
  const b64 = (s?: string) => (s ? Buffer.from(s, "base64") : undefined);
  return {
    server: cluster.server,
    tls: {
      ca: b64(cluster["certificate-authority-data"]),
      cert: b64(user["client-certificate-data"]),
      key: b64(user["client-key-data"]),
      rejectUnauthorized: !cluster["insecure-skip-tls-verify"],
    },
    token: () => user.token ?? "",
  };
}
