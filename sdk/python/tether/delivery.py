"""A delivery as a handler function sees it: decoded from the wire into
plain Python values (dicts from JSON, tuples, datetimes)."""

from __future__ import annotations

import dataclasses
import datetime
import json
from typing import Any, NamedTuple

from .bindings import Spec
from .v1 import broker_pb2 as pb


class Resource(NamedTuple):
    """The resource of the object: ``plural`` is the resource name."""

    group: str
    version: str
    plural: str
    kind: str = ""
    namespaced: bool = False


class DiffItem(NamedTuple):
    """One change, as in Kopf: operation is "add", "change" or "remove";
    field is the path as a tuple, e.g. ("spec", "replicas")."""

    operation: str
    field: tuple[str, ...]
    old: Any
    new: Any


class MalformedDelivery(ValueError):
    """A delivery whose JSON cannot be decoded."""


_REASONS = {
    pb.DELIVERY_KIND_CREATE: "create", pb.DELIVERY_KIND_UPDATE: "update",
    pb.DELIVERY_KIND_DELETE: "delete", pb.DELIVERY_KIND_RESUME: "resume",
    pb.DELIVERY_KIND_FIELD: "field", pb.DELIVERY_KIND_EVENT: "event",
    pb.DELIVERY_KIND_TICK: "tick", pb.DELIVERY_KIND_DAEMON_START: "daemon",
    pb.DELIVERY_KIND_DAEMON_STOP: "daemon",
}
_DIFF_OPS = {pb.DiffEntry.OPERATION_ADD: "add", pb.DiffEntry.OPERATION_CHANGE: "change",
             pb.DiffEntry.OPERATION_REMOVE: "remove"}


@dataclasses.dataclass
class Cause:
    """Everything a function may be given about one delivery."""

    reason: str
    delivery_id: str
    binding_id: str
    attempt: int
    resource: Resource
    namespace: str
    name: str
    uid: str
    # body is the object (for a DELETE review, the old one); {} when none.
    body: dict[str, Any]
    old: Any = None
    new: Any = None
    diff: tuple[DiffItem, ...] = ()
    event_type: str = ""
    started: datetime.datetime = dataclasses.field(
        default_factory=lambda: datetime.datetime.now(datetime.timezone.utc))
    # ticks only: when the broker had the tick due (UTC); None otherwise
    scheduled: datetime.datetime | None = None
    # admission reviews only
    operation: str = ""
    subresource: str | None = None
    dryrun: bool = False
    userinfo: dict[str, Any] = dataclasses.field(default_factory=dict)
    request: dict[str, Any] = dataclasses.field(default_factory=dict)
    # the request's object as delivered: what a mutate patch applies to
    original: dict[str, Any] | None = None


def _json(what: str, raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError as e:
        raise MalformedDelivery(f"{what}: {e}") from None


# The keyword arguments that read the object or its old side; a function
# that takes none of them (a tick that only needs uid, say) is called
# without decoding either, which is most of the cost of an ack-only delivery.
BODY_ARGS = frozenset({"body", "spec", "meta", "status", "labels", "annotations", "old", "new", "event"})


def decode(d: pb.Delivery, spec: Spec, wants: frozenset[str] | None = None) -> Cause:
    """The Cause of d, delivered to the binding spec, for a function that
    takes the keyword arguments wants (None: all of them). The object is
    only decoded when the function reads it, or for admission."""
    reads = wants is None or spec.kind.admission or not BODY_ARGS.isdisjoint(wants)
    obj = _json("object", d.object) if reads else None
    old_obj = _json("old object", d.old_object) if reads else None
    for what, value in (("object", obj), ("old object", old_obj)):
        if value is not None and not isinstance(value, dict):
            raise MalformedDelivery(f"{what}: not a JSON object")
    meta = (obj or old_obj or {}).get("metadata") or {}
    r = d.ref.resource
    resource = Resource(r.group or spec.group, r.version or spec.version, r.resource or spec.plural,
                        r.kind or (obj or {}).get("kind", "") or spec.resource_kind, r.namespaced)
    cause = Cause(
        reason=spec.kind.value if spec.kind.admission else _REASONS.get(d.kind, spec.kind.value),
        delivery_id=d.id, binding_id=d.binding_id, attempt=d.attempt or 1, resource=resource,
        namespace=d.ref.namespace or meta.get("namespace", ""), name=d.ref.name or meta.get("name", ""),
        uid=d.ref.uid or meta.get("uid", ""), body=obj or {}, event_type=d.event_type)
    if spec.kind.admission:
        a = d.admission
        cause.body = obj or old_obj or {}
        cause.old, cause.new, cause.original = old_obj, obj, obj
        cause.operation = _operation(a.operation)
        # None for the main resource, as Kopf passes it
        cause.subresource, cause.dryrun = a.sub_resource or None, a.dry_run
        cause.userinfo = {"username": a.user_name, "groups": list(a.user_groups)}
        cause.request = _json("admission request", a.request) or {}
    elif d.kind == pb.DELIVERY_KIND_FIELD:
        cause.old, cause.new = _json("field old value", d.field_old), _json("field new value", d.field_new)
    elif d.kind == pb.DELIVERY_KIND_UPDATE:
        cause.old, cause.new = old_obj, obj
    elif d.kind == pb.DELIVERY_KIND_TICK and d.HasField("scheduled"):
        cause.scheduled = d.scheduled.ToDatetime(tzinfo=datetime.timezone.utc)
    cause.diff = tuple(
        DiffItem(_DIFF_OPS.get(e.operation, "unknown"), tuple(e.path),
                 _json(f"diff {i} old value", e.old_value), _json(f"diff {i} new value", e.new_value))
        for i, e in enumerate(d.diff))
    return cause


def _operation(op: int) -> str:
    """CREATE, UPDATE, DELETE or CONNECT; an operation newer than these
    stubs is left empty rather than refused, as in the Go SDK (the request
    names it)."""
    try:
        return pb.AdmissionOperation.Name(op).removeprefix("ADMISSION_OPERATION_")
    except ValueError:
        return ""
