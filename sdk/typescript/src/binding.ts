// Bindings as the handler's author declares them (plain objects), and their
// wire form for the Hello.

import { create } from "@bufbuild/protobuf";
import type { Duration } from "@bufbuild/protobuf/wkt";
import { DurationSchema } from "@bufbuild/protobuf/wkt";
import {
  AdmissionOperation,
  AnnotationFilter_Operator,
  AnnotationFilterSchema,
  BindingKind,
  BindingSchema,
  FailurePolicy,
  FinalizerPolicy,
  ResultStore,
  SideEffects,
  type Binding as BindingProto,
} from "./gen/tether/v1/broker_pb";
import type { Delivery, Answer } from "./delivery";
import type { ReviewFunction } from "./admission";

/**
 * Resource names what a binding watches: group, version and plural
 * resource (`{ group: "apps", version: "v1", resource: "deployments" }`), or
 * a kind, or any name kubectl takes (`{ name: "deploy" }`), which the broker
 * resolves with discovery. The core group is "".
 */
export interface Resource {
  group?: string;
  version?: string;
  resource?: string;
  kind?: string;
  name?: string;
}

/** The kinds of binding, as the `on*` methods of Handler name them. */
export type BindingKindName = "create" | "update" | "delete" | "resume" | "field" | "event" | "timer" | "daemon" | "validate" | "mutate";

/** A function bound to deliveries. What it returns is written on the object with the OK ack. */
export type HandlerFunction = (delivery: Delivery) => Promise<Answer | void> | Answer | void;

/** Options every binding takes. Durations are in milliseconds. */
export interface BindingOptions {
  /** Names the binding within the handler (a DNS-1123 label); results are stored under it. Default: "<kind>-<n>". */
  id?: string;
  /** Limits the binding to these namespaces; empty means all. */
  namespaces?: string[];
  /** A Kubernetes label selector ("app=web,tier!=cache"). */
  labelSelector?: string;
  /** A Kubernetes field selector ("metadata.name=x"). */
  fieldSelector?: string;
  /** Annotations that must hold: a value must equal it, true must be present, false must be absent. */
  annotations?: Record<string, string | boolean>;
  /** A CEL expression over `object` (and `oldObject` for updates) that must be true. */
  when?: string;
  /** For delete bindings: do not hold the object. */
  optional?: boolean;
  /** How the binding holds objects; the kind's default when unset (hold for delete and timer). */
  finalizer?: "hold" | "strict" | "none";
  /** Retries before a failing delivery counts as failed for good: 0 never, negative forever. */
  retries?: number;
  /** How long the broker waits for the ack. */
  timeout?: number;
  /** The first delay after a failed attempt, doubled up to maxBackoff. */
  backoff?: number;
  maxBackoff?: number;
  /** Where results are stored: the annotation (the protocol's default) or status.<resultKey>. */
  results?: "annotation" | "status";
  resultKey?: string;
}

/** Options of a timer binding, besides BindingOptions. */
export interface TimerOptions extends BindingOptions {
  /** Between ticks, in milliseconds (at least 100). */
  interval: number;
  /** Before the first tick after the object is first seen. */
  initialDelay?: number;
  /** Tick only after the object has been unchanged this long. */
  idle?: number;
  /** Tick on a fixed grid instead of interval after the last ack. */
  sharp?: boolean;
}

/** Options of a daemon binding, besides BindingOptions. */
export interface DaemonOptions extends BindingOptions {
  /** How long the broker waits for a stopped daemon to return (default 60000); past it, it counts it stopped. */
  cancellationTimeout?: number;
  /** Start the daemon again, with backoff, when it returns by itself. */
  restart?: boolean;
}

/** Options of a validate or mutate binding: the webhook the broker writes for it. */
export interface AdmissionOptions {
  /** Operations to intercept; default CREATE and UPDATE. */
  operations?: Array<"CREATE" | "UPDATE" | "DELETE" | "CONNECT">;
  /** A subresource to intercept instead of the resource ("status"); "*" means all. */
  subresource?: string;
  /** A label selector over the labels of the object's namespace. */
  namespaceSelector?: string;
  /** CEL expressions the API server evaluates before calling the webhook. */
  matchConditions?: Array<{ name: string; expression: string }>;
  /** The webhook's timeout, 1000 to 30000 ms; default 10000. */
  timeout?: number;
  /** What the API server does when the webhook cannot answer: "ignore" (the default) or "fail". */
  failurePolicy?: "ignore" | "fail";
  /** "none" (the default), or "noneOnDryRun" for a function with side effects it skips on dry runs. */
  sideEffects?: "none" | "noneOnDryRun";
}

/** Options of a validate or mutate binding, besides the filters of BindingOptions. */
export interface ReviewOptions extends Pick<BindingOptions, "id" | "namespaces" | "labelSelector" | "annotations" | "when" | "finalizer"> {
  admission?: AdmissionOptions;
}

/** One registered binding. */
export interface Registered {
  id: string;
  kind: BindingKindName;
  resource: Resource;
  fn: HandlerFunction | ReviewFunction;
  options: BindingOptions | TimerOptions | DaemonOptions | ReviewOptions;
  /** The dotted path of a field binding. */
  field?: string;
}

const kinds: Record<BindingKindName, BindingKind> = {
  create: BindingKind.CREATE,
  update: BindingKind.UPDATE,
  delete: BindingKind.DELETE,
  resume: BindingKind.RESUME,
  field: BindingKind.FIELD,
  event: BindingKind.EVENT,
  timer: BindingKind.TIMER,
  daemon: BindingKind.DAEMON,
  validate: BindingKind.VALIDATE,
  mutate: BindingKind.MUTATE,
};

const finalizers = { hold: FinalizerPolicy.HOLD, strict: FinalizerPolicy.STRICT, none: FinalizerPolicy.NONE };

const label = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

/** The problems of a binding's declaration, empty when there are none. */
export function check(b: Registered): string[] {
  const errs: string[] = [];
  const where = `binding "${b.id}"`;
  if (b.id.length > 40 || !label.test(b.id)) errs.push(`${where}: the id must be a DNS-1123 label of at most 40 characters`);
  const r = b.resource;
  if (!r || (!r.resource && !r.kind && !r.name)) errs.push(`${where}: the resource needs one of resource, kind or name`);
  if (typeof b.fn !== "function") errs.push(`${where}: the handler function is not a function`);
  if (b.kind === "field" && !b.field) errs.push(`${where}: a field binding needs a field path`);
  if (b.kind === "timer" && !((b.options as TimerOptions).interval >= 100)) {
    errs.push(`${where}: a timer needs an interval of at least 100 ms`);
  }
  const o = b.options as BindingOptions;
  if (o.finalizer !== undefined && !(o.finalizer in finalizers)) errs.push(`${where}: finalizer must be hold, strict or none`);
  if (o.results !== undefined && o.results !== "annotation" && o.results !== "status") {
    errs.push(`${where}: results must be annotation or status`);
  }
  return errs;
}

/** The binding's wire form. */
export function toProto(b: Registered): BindingProto {
  const o = b.options as BindingOptions;
  const t = o as TimerOptions;
  return create(BindingSchema, {
    id: b.id,
    kind: kinds[b.kind],
    resource: { ...b.resource },
    namespaces: o.namespaces ?? [],
    labelSelector: o.labelSelector ?? "",
    fieldSelector: o.fieldSelector ?? "",
    annotations: Object.entries(o.annotations ?? {}).map(([key, v]) =>
      create(AnnotationFilterSchema, {
        key,
        operator:
          v === true ? AnnotationFilter_Operator.PRESENT : v === false ? AnnotationFilter_Operator.ABSENT : AnnotationFilter_Operator.EQUALS,
        value: typeof v === "string" ? v : "",
      }),
    ),
    when: o.when ?? "",
    field: b.field ?? "",
    optional: o.optional ?? false,
    finalizer: o.finalizer ? finalizers[o.finalizer] : FinalizerPolicy.UNSPECIFIED,
    retries: o.retries,
    timeout: duration(o.timeout),
    backoff: duration(o.backoff),
    maxBackoff: duration(o.maxBackoff),
    timer:
      b.kind === "timer"
        ? { interval: duration(t.interval), initialDelay: duration(t.initialDelay), idle: duration(t.idle), sharp: t.sharp ?? false }
        : undefined,
    daemon:
      b.kind === "daemon"
        ? { cancellationTimeout: duration((o as DaemonOptions).cancellationTimeout), restart: (o as DaemonOptions).restart ?? false }
        : undefined,
    results: o.results === "status" ? ResultStore.STATUS : o.results === "annotation" ? ResultStore.ANNOTATION : ResultStore.UNSPECIFIED,
    resultKey: o.resultKey ?? "",
    admission: b.kind === "validate" || b.kind === "mutate" ? admissionProto((o as ReviewOptions).admission ?? {}) : undefined,
  });
}

function admissionProto(a: AdmissionOptions) {
  return {
    operations: (a.operations ?? []).map((op) => AdmissionOperation[op]),
    subresource: a.subresource ?? "",
    namespaceSelector: a.namespaceSelector ?? "",
    matchConditions: a.matchConditions ?? [],
    timeout: duration(a.timeout),
    failurePolicy: a.failurePolicy === "fail" ? FailurePolicy.FAIL : a.failurePolicy === "ignore" ? FailurePolicy.IGNORE : FailurePolicy.UNSPECIFIED,
    sideEffects: a.sideEffects === "noneOnDryRun" ? SideEffects.NONE_ON_DRY_RUN : a.sideEffects === "none" ? SideEffects.NONE : SideEffects.UNSPECIFIED,
  };
}

/** Milliseconds as a protobuf Duration; undefined stays unset. */
export function duration(ms: number | undefined): Duration | undefined {
  if (ms === undefined || ms <= 0) return undefined;
  const seconds = Math.floor(ms / 1000);
  return create(DurationSchema, { seconds: BigInt(seconds), nanos: Math.round((ms - seconds * 1000) * 1e6) });
}

/** A protobuf Duration in milliseconds. */
export function millis(d: Duration | undefined): number {
  return d ? Number(d.seconds) * 1000 + Math.round(d.nanos / 1e6) : 0;
}
