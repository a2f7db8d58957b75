// Admission reviews: validate and mutate bindings, the Review a function is
// given, and the answer its outcome becomes. A review is never retried (the
// API server is waiting): it is allowed, denied (a thrown DeniedError), or
// the webhook failed (any other error), when the binding's failure policy
// decides.

import { create } from "@bufbuild/protobuf";
import {
  AckSchema,
  AdmissionOperation,
  AdmissionResponseSchema,
  Outcome,
  type Ack,
  type Delivery as DeliveryProto,
} from "./gen/tether/v1/broker_pb";
import { failAck, truncate, type KubeObject } from "./delivery";
import type { Logger } from "./logger";

/** One admission request, as a validate or mutate function sees it. */
export interface Review {
  binding: string;
  /** Identifies the review (not the object). */
  uid: string;
  operation: "CREATE" | "UPDATE" | "DELETE" | "CONNECT";
  /** Set when the request is for a subresource ("status", "scale"). */
  subResource: string;
  /** The request will not be persisted: a function with side effects skips them. */
  dryRun: boolean;
  userName: string;
  userGroups: string[];
  resource: { group: string; version: string; resource: string; kind: string };
  namespace: string;
  name: string;
  /** The request's object, the SDK's own copy: a mutate function changes it in place. Undefined for DELETE. */
  object?: KubeObject;
  /** The object before the request, for UPDATE and DELETE. */
  oldObject?: KubeObject;
  /** The admission.k8s.io/v1 AdmissionRequest, without object and oldObject. */
  request: KubeObject;
  /** Aborted at the review's deadline or when the broker withdraws it. */
  signal: AbortSignal;
  log: Logger;
}

/** What a review function may return: warnings the client is shown, allowed or denied. */
export interface ReviewAnswer {
  warnings?: string[];
}

export type ReviewFunction = (review: Review) => Promise<ReviewAnswer | void> | ReviewAnswer | void;

/** DeniedError refuses an admission request: the client gets code (400 to 599; otherwise 403) and the message. */
export class DeniedError extends Error {
  readonly code: number;
  readonly warnings: string[];

  constructor(message: string, options: { code?: number; warnings?: string[] } = {}) {
    super(message);
    this.name = "DeniedError";
    this.code = options.code !== undefined && options.code >= 400 && options.code <= 599 ? options.code : 0;
    this.warnings = options.warnings ?? [];
  }
}

const operations: Record<number, Review["operation"]> = {
  [AdmissionOperation.CREATE]: "CREATE",
  [AdmissionOperation.UPDATE]: "UPDATE",
  [AdmissionOperation.DELETE]: "DELETE",
  [AdmissionOperation.CONNECT]: "CONNECT",
};

const text = new TextDecoder();
const json = (b: Uint8Array) => (b.length === 0 ? undefined : JSON.parse(text.decode(b)));

/** The Review of an admission delivery; throws on one without a review. */
export function decodeReview(d: DeliveryProto, signal: AbortSignal, log: Logger): Review {
  const a = d.admission;
  if (!a) throw new Error("admission delivery without a review");
  const r = d.ref?.resource;
  return {
    binding: d.bindingId,
    uid: a.uid,
    operation: operations[a.operation] ?? "CREATE",
    subResource: a.subResource,
    dryRun: a.dryRun,
    userName: a.userName,
    userGroups: [...a.userGroups],
    resource: { group: r?.group ?? "", version: r?.version ?? "", resource: r?.resource ?? "", kind: r?.kind ?? "" },
    namespace: d.ref?.namespace ?? "",
    name: d.ref?.name ?? "",
    object: json(d.object),
    oldObject: json(d.oldObject),
    request: json(a.request) ?? {},
    signal,
    log,
  };
}

/** Runs fn on the review and builds the ack: OK with the answer, or FAIL when the function failed (the failure policy decides). */
export async function review(d: DeliveryProto, fn: ReviewFunction, mutate: boolean, signal: AbortSignal, log: Logger): Promise<Ack> {
  let r: Review;
  try {
    r = decodeReview(d, signal, log);
  } catch (err) {
    return failAck(d.id, `malformed delivery: ${(err as Error).message}`);
  }
  let answer: ReviewAnswer | void;
  try {
    answer = await fn(r);
  } catch (err) {
    if (!(err instanceof DeniedError)) return failAck(d.id, err instanceof Error ? err.message : String(err));
    return ack(d.id, { message: truncate(err.message || "denied"), code: err.code, warnings: err.warnings.map(truncate) });
  }
  const warnings = (answer?.warnings ?? []).map(truncate);
  if (!mutate) return ack(d.id, { allowed: true, warnings });
  const original = json(d.object);
  if (original === undefined) return ack(d.id, { allowed: true, warnings });
  if (r.object === undefined || r.object === null) return failAck(d.id, "the function removed review.object; a mutation cannot delete the object");
  const ops = jsonPatch(original, JSON.parse(JSON.stringify(r.object)));
  const patch = ops.length > 0 ? new TextEncoder().encode(JSON.stringify(ops)) : new Uint8Array();
  return ack(d.id, { allowed: true, warnings, patch });
}

function ack(id: string, response: { allowed?: boolean; message?: string; code?: number; warnings?: string[]; patch?: Uint8Array }): Ack {
  return create(AckSchema, { deliveryId: id, outcome: Outcome.OK, admission: create(AdmissionResponseSchema, response) });
}

/** One RFC 6902 operation. */
export interface PatchOp {
  op: "add" | "remove" | "replace";
  path: string;
  value?: unknown;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const pointer = (key: string) => key.replace(/~/g, "~0").replace(/\//g, "~1");

/** The JSON patch from a to b: objects member by member, any other change (arrays included) replaced whole. */
export function jsonPatch(a: unknown, b: unknown, path = ""): PatchOp[] {
  if (!isObject(a) || !isObject(b)) {
    return JSON.stringify(a) === JSON.stringify(b) ? [] : [{ op: "replace", path, value: b }];
  }
  const ops: PatchOp[] = [];
  for (const k of Object.keys(a)) if (!(k in b)) ops.push({ op: "remove", path: `${path}/${pointer(k)}` });
  for (const [k, v] of Object.entries(b)) {
    if (!(k in a)) ops.push({ op: "add", path: `${path}/${pointer(k)}`, value: v });
    else ops.push(...jsonPatch(a[k], v, `${path}/${pointer(k)}`));
  }
  return ops;
}
