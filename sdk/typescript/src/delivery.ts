// What a handler function is given (a Delivery, plain objects decoded from
// the broker's JSON) and what it answers (an Answer), and their wire forms.

import { create } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import {
  AckSchema,
  DeliveryKind,
  DiffEntry_Operation,
  HandlerEvent_Type,
  HandlerEventSchema,
  Outcome,
  type Ack,
  type Delivery as DeliveryProto,
  type HandlerEvent as HandlerEventProto,
} from "./gen/tether/v1/broker_pb";
import { duration } from "./binding";
import { classify } from "./errors";
import { MAX_EVENT_MESSAGE_BYTES } from "./limits";
import type { Logger } from "./logger";

/** A Kubernetes object in its JSON form. */
export type KubeObject = Record<string, any>;

/** Why a delivery was sent. */
export type DeliveryKindName = "create" | "update" | "delete" | "resume" | "field" | "event" | "tick" | "daemon";

/** One change between the object as last handled and now. */
export interface DiffEntry {
  op: "add" | "change" | "remove";
  /** The field path, e.g. ["spec", "replicas"]. */
  path: string[];
  old?: unknown;
  new?: unknown;
}

/** A Kubernetes Event the function posts about its object (or `regarding`). */
export interface HandlerEvent {
  type: "Normal" | "Warning";
  /** A short CamelCase word. */
  reason: string;
  message?: string;
  regarding?: { apiVersion: string; kind: string; namespace?: string; name: string; uid?: string };
}

/** What a function is called with, one per delivery. */
export interface Delivery {
  id: string;
  /** The binding's id. */
  binding: string;
  kind: DeliveryKindName;
  /** Counts from 1 for each cause. */
  attempt: number;
  /** The object as the broker saw it. */
  object: KubeObject;
  /** For update and field: the object's essence when the handler last finished with it. */
  old?: KubeObject;
  /** For update and field: what changed from old to object. */
  diff: DiffEntry[];
  /** For field: the values at the binding's field path. */
  field?: { old?: unknown; new?: unknown };
  /** For event: ADDED, MODIFIED or DELETED. */
  eventType?: string;
  ref: { group: string; version: string; resource: string; kind: string; namespace: string; name: string; uid: string; resourceVersion: string };
  /** When the broker stops waiting for the answer. */
  deadline?: Date;
  /** For tick: when the tick was due. */
  scheduled?: Date;
  /** Aborted when the broker cancels the delivery, its deadline passes, or the handler stops. */
  signal: AbortSignal;
  /** The handler's logger, with the delivery's fields. */
  log: Logger;
  /** Posts a Kubernetes Event whatever the outcome (a broker without handler Events drops it). */
  record(event: HandlerEvent): void;
}

/**
 * What a function returns to be written on its object with the OK ack, in
 * one write: merge patches of the object and of its status, and a result
 * stored under the binding's id (any JSON value). Nothing to write: return
 * nothing.
 */
export interface Answer {
  patch?: KubeObject;
  statusPatch?: KubeObject;
  result?: unknown;
}

const kindNames: Partial<Record<DeliveryKind, DeliveryKindName>> = {
  [DeliveryKind.CREATE]: "create",
  [DeliveryKind.UPDATE]: "update",
  [DeliveryKind.DELETE]: "delete",
  [DeliveryKind.RESUME]: "resume",
  [DeliveryKind.FIELD]: "field",
  [DeliveryKind.EVENT]: "event",
  [DeliveryKind.TICK]: "tick",
};

/** The delivery kind's name, or undefined for one this SDK does not serve. */
export function kindName(k: DeliveryKind): DeliveryKindName | undefined {
  return kindNames[k];
}

const ops = { [DiffEntry_Operation.ADD]: "add", [DiffEntry_Operation.CHANGE]: "change", [DiffEntry_Operation.REMOVE]: "remove" } as const;

const text = new TextDecoder();
const bytes = new TextEncoder();

function json(b: Uint8Array): unknown {
  return b.length === 0 ? undefined : JSON.parse(text.decode(b));
}

/** The Delivery a function is called with; throws on JSON the broker should never send. */
export function decode(d: DeliveryProto, kind: DeliveryKindName, signal: AbortSignal, log: Logger, events: HandlerEvent[]): Delivery {
  const r = d.ref;
  return {
    id: d.id,
    binding: d.bindingId,
    kind,
    attempt: d.attempt,
    object: (json(d.object) as KubeObject) ?? {},
    old: json(d.oldObject) as KubeObject | undefined,
    diff: d.diff.map((e) => ({
      op: ops[e.operation as keyof typeof ops] ?? "change",
      path: [...e.path],
      old: json(e.oldValue),
      new: json(e.newValue),
    })),
    field: kind === "field" ? { old: json(d.fieldOld), new: json(d.fieldNew) } : undefined,
    eventType: d.eventType || undefined,
    ref: {
      group: r?.resource?.group ?? "",
      version: r?.resource?.version ?? "",
      resource: r?.resource?.resource ?? "",
      kind: r?.resource?.kind ?? "",
      namespace: r?.namespace ?? "",
      name: r?.name ?? "",
      uid: r?.uid ?? "",
      resourceVersion: r?.resourceVersion ?? "",
    },
    deadline: d.deadline ? timestampDate(d.deadline) : undefined,
    scheduled: d.scheduled ? timestampDate(d.scheduled) : undefined,
    signal,
    log,
    record: (e) => events.push(e),
  };
}

/** The OK ack of what a function returned. */
export function okAck(id: string, answer: Answer | void, events: HandlerEvent[]): Ack {
  const a = answer ?? {};
  return create(AckSchema, {
    deliveryId: id,
    outcome: Outcome.OK,
    patch: encode(a.patch),
    statusPatch: encode(a.statusPatch),
    result: encode(a.result),
    events: events.map(eventProto),
  });
}

/** The RETRY or FAIL ack of what a function threw. */
export function errorAck(id: string, err: unknown, events: HandlerEvent[]): Ack {
  const c = classify(err);
  return create(AckSchema, {
    deliveryId: id,
    outcome: c.outcome === "FAIL" ? Outcome.FAIL : Outcome.RETRY,
    message: truncate(c.message),
    retryAfter: duration(c.retryAfter),
    events: events.map(eventProto),
  });
}

export function failAck(id: string, message: string): Ack {
  return create(AckSchema, { deliveryId: id, outcome: Outcome.FAIL, message: truncate(message) });
}

export function retryAck(id: string, message: string): Ack {
  return create(AckSchema, { deliveryId: id, outcome: Outcome.RETRY, message: truncate(message) });
}

function encode(v: unknown): Uint8Array {
  return v === undefined ? new Uint8Array() : bytes.encode(JSON.stringify(v));
}

function eventProto(e: HandlerEvent): HandlerEventProto {
  return create(HandlerEventSchema, {
    type: e.type === "Warning" ? HandlerEvent_Type.WARNING : HandlerEvent_Type.NORMAL,
    reason: e.reason,
    message: truncate(e.message ?? ""),
    regarding: e.regarding ? { ...e.regarding } : undefined,
  });
}

/** Cuts s to the broker's bound on a message, in UTF-8 bytes, without splitting a character. */
export function truncate(s: string): string {
  const b = bytes.encode(s);
  if (b.length <= MAX_EVENT_MESSAGE_BYTES) return s;
  let cut = MAX_EVENT_MESSAGE_BYTES - bytes.encode("…").length;
  while (cut > 0 && (b[cut] & 0xc0) === 0x80) cut--;
  return text.decode(b.subarray(0, cut)) + "…";
}
