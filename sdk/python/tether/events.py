"""Kubernetes Events from a handler function, as Kopf's kopf.event, info,
warn and exception: the Events go into the delivery's ack, and the broker
posts them as the handler's identity (its RBAC needs create and patch on
events), counting repeats into one Event and rate-limiting floods the way
client-go's recorder does. Only a function that answers a delivery with an
ack can post them: a lifecycle, event or timer function, not a daemon or an
admission function."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from . import hierarchies, limits, outcome
from .log import LOGGER
from .v1 import broker_pb2 as pb

NORMAL = "Normal"
WARNING = "Warning"
_TYPES = {NORMAL: pb.HandlerEvent.TYPE_NORMAL, WARNING: pb.HandlerEvent.TYPE_WARNING}


def event(objs: Any, *, type: str, reason: str, message: str = "") -> None:
    """Post an Event of type ("Normal" or "Warning") about each object in
    objs (an object as a dict, such as the function's body, or a list of
    them). The message is cut at 1024 bytes; past 10 Events in one delivery
    the rest are dropped with a warning. Outside a function handling a
    delivery it raises RuntimeError."""
    if type not in _TYPES:
        raise ValueError(f"an Event's type is {NORMAL!r} or {WARNING!r}, not {type!r}")
    if not reason or len(reason.encode()) > limits.MAX_EVENT_REASON_BYTES:
        raise ValueError(f"an Event's reason is 1 to {limits.MAX_EVENT_REASON_BYTES} bytes, not {reason!r}")
    now = hierarchies.current()
    if now is None or now.events is None:
        where = "outside a handler function" if now is None else "from a daemon or an admission function"
        raise RuntimeError(f"tether.event cannot post an Event {where}: only a function answering a delivery "
                           "(lifecycle, event, timer) has an ack to carry it")
    for obj in hierarchies._walk(objs):
        if len(now.events) >= limits.MAX_ACK_EVENTS:
            LOGGER.warning("dropping the Event %s: a delivery carries at most %d", reason, limits.MAX_ACK_EVENTS)
            continue
        now.events.append(pb.HandlerEvent(type=_TYPES[type], reason=reason, regarding=_regarding(obj),
                                          message=outcome.truncate(message, limits.MAX_EVENT_MESSAGE_BYTES)))


def info(objs: Any, *, reason: str, message: str = "") -> None:
    """Post a Normal Event about objs (see event)."""
    event(objs, type=NORMAL, reason=reason, message=message)


def warn(objs: Any, *, reason: str, message: str = "") -> None:
    """Post a Warning Event about objs (see event)."""
    event(objs, type=WARNING, reason=reason, message=message)


def exception(objs: Any, *, reason: str = "", message: str = "", exc: BaseException | None = None) -> None:
    """Post a Warning Event about exc (by default the exception being
    handled): its reason is the exception's class name unless given, its
    message the message given followed by the exception's."""
    if exc is None:
        exc = sys.exc_info()[1]
    reason = reason or (type(exc).__name__ if exc is not None else "Exception")
    text = " ".join(part for part in (message, str(exc) if exc is not None else "") if part)
    event(objs, type=WARNING, reason=reason, message=text)


def _regarding(obj: Mapping[str, Any]) -> pb.EventObject:
    meta = obj.get("metadata") or {}
    ref = pb.EventObject(api_version=obj.get("apiVersion") or "", kind=obj.get("kind") or "",
                         namespace=meta.get("namespace") or "", name=meta.get("name") or "", uid=meta.get("uid") or "")
    if not (ref.api_version and ref.kind and ref.name):
        raise ValueError("an Event's object needs apiVersion, kind and metadata.name")
    return ref
