"""Kopf's keyword arguments: what a function is given is what it declares
(or everything, with **kwargs). Which names a function takes is worked out
once, when it is registered, so that a name Tether cannot pass is an error
then and not at the first delivery."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any

from .bindings import Kind
from .delivery import Cause
from .patch import Patch

COMMON = ("body", "spec", "meta", "status", "name", "namespace", "uid", "labels", "annotations",
          "old", "new", "diff", "patch", "logger", "retry", "started", "resource", "reason", "memo")
EXTRA = {
    Kind.EVENT: ("type", "event"),
    Kind.TIMER: ("scheduled",),
    Kind.DAEMON: ("stopped",),
    Kind.VALIDATE: ("operation", "dryrun", "subresource", "userinfo", "warnings", "request", "headers", "sslpeer"),
    Kind.MUTATE: ("operation", "dryrun", "subresource", "userinfo", "warnings", "request", "headers", "sslpeer"),
}
# What an index function gets: the object, as Kopf's do.
INDEX = ("body", "spec", "meta", "status", "name", "namespace", "uid", "labels", "annotations", "logger", "type",
         "event")
# Kopf's arguments that have no Tether counterpart, and what to do instead.
_KOPF_ONLY = {
    "param": "Tether's decorators have no param= (the protocol has no field for it): close over the value",
    "runtime": "use started (when this attempt started) and retry",
    "settings": "startup functions (@tether.on.startup) get the settings; the runner's flags set them too",
    "indices": "each index is passed under its own name: declare @tether.index functions before those that use them",
}


def names(kind: Kind) -> tuple[str, ...]:
    """The keyword arguments Tether passes to functions of a kind of binding."""
    if kind is Kind.INDEX:
        return INDEX
    return COMMON + EXTRA.get(kind, ())


def accepted(fn: Callable[..., Any], kind: Kind, indices: tuple[str, ...] = ()) -> frozenset[str] | None:
    """The names fn declares among those a kind passes and the indices;
    None when it takes **kwargs (then it gets them all). A parameter
    without a default that Tether cannot pass is a TypeError."""
    return declared(fn, names(kind) + indices, f"{kind.value} functions")


def declared(fn: Callable[..., Any], available: tuple[str, ...], what: str) -> frozenset[str] | None:
    """The names fn declares among available, the arguments Tether passes to
    what (say "create functions"); None when it takes **kwargs."""
    wants = set()
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            return None
        if p.kind is p.VAR_POSITIONAL or p.default is not p.empty and p.name not in available:
            continue
        if p.kind is p.POSITIONAL_ONLY:
            raise TypeError(f"{_name(fn)}() has the positional-only parameter {p.name!r}: "
                            "Tether passes keyword arguments only")
        if p.name not in available:
            why = _KOPF_ONLY.get(p.name, f"it passes {', '.join(available)}")
            raise TypeError(f"{_name(fn)}() requires {p.name!r}, which Tether does not pass to {what}: {why}")
        wants.add(p.name)
    return frozenset(wants)


def values(cause: Cause, *, patch: Patch, logger: logging.LoggerAdapter, **extra: Any) -> dict[str, Any]:
    """Every keyword argument for the cause; extra has the kind's own
    (stopped, warnings)."""
    body = cause.body
    meta = body.get("metadata") or {}
    out = {
        "body": body, "spec": body.get("spec") or {}, "meta": meta, "status": body.get("status") or {},
        "name": cause.name, "namespace": cause.namespace, "uid": cause.uid,
        "labels": meta.get("labels") or {}, "annotations": meta.get("annotations") or {},
        "old": cause.old, "new": cause.new, "diff": cause.diff, "patch": patch, "logger": logger,
        "retry": cause.attempt - 1, "started": cause.started, "resource": cause.resource, "reason": cause.reason,
        "type": cause.event_type, "event": {"type": cause.event_type, "object": body},
        "operation": cause.operation, "dryrun": cause.dryrun, "subresource": cause.subresource,
        "userinfo": cause.userinfo, "request": cause.request, "scheduled": cause.scheduled,
        # The API server's HTTP request ends at the broker, which forwards
        # the review and not its headers or TLS peer: both are empty, as
        # Kopf's sslpeer is for a server that asks for no client certificate.
        "headers": {}, "sslpeer": {},
    }
    out.update(extra)
    return out


def select(wants: frozenset[str] | None, kind: Kind, all_values: dict[str, Any],
           indices: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The arguments for one call: those fn declared, or all of the kind's,
    and the indices it declared (all with **kwargs), which win over
    Tether's arguments of the same name, as in Kopf."""
    indices = indices or {}
    out = {k: all_values[k] for k in (names(kind) if wants is None else wants) if k not in indices}
    out.update(indices if wants is None else {k: v for k, v in indices.items() if k in wants})
    return out


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
