"""Kopf's @kopf.on.field fires on creation too: an object created with the
field set is a change of the field from absent (old=None) to its value.
The broker's field bindings see updates only, so the SDK registers, beside
each field binding, a create binding on the objects that have the field,
which calls the same function with old=None and new=the field's value."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from . import bindings, fieldfilters, filters, kwargs, limits
from .bindings import Kind
from .registry import Registry
from .selectors import ABSENT, PRESENT

SUFFIX = "-on-create"


def companion_id(field_id: str) -> str:
    """The create binding's id: the field binding's, with SUFFIX; past the
    length limit cut and ended with a hash of the whole, as default ids."""
    candidate = field_id + SUFFIX
    if len(candidate) > limits.MAX_NAME_LENGTH:
        digest = hashlib.sha256(candidate.encode()).hexdigest()[:8]
        candidate = f"{candidate[:limits.MAX_NAME_LENGTH - 9].rstrip('-')}-{digest}"
    return candidate


def register(registry: Registry, fn: Callable[..., Any], resource: tuple[Any, ...], field_spec: bindings.Spec,
             options: Mapping[str, Any], field_filter: Mapping[str, Any]) -> None:
    """The create binding that stands for the field's creation, unless
    old= asks for an old value, which a created object does not have."""
    old = field_filter.get("old", ABSENT)
    if old is not ABSENT and not callable(old):
        return
    path = tuple(field_spec.field.split("."))
    value = field_filter.get("new", field_filter.get("value", PRESENT))
    when, more = fieldfilters.build(Kind.CREATE, path, value=value)
    if "value" in field_filter and "new" in field_filter:
        extra, more2 = fieldfilters.build(Kind.CREATE, path, value=field_filter["value"])
        when, more = f"({when}) && ({extra})" if extra else when, more + more2
    if callable(old):
        more += (filters.Check("old=", old, value_of=lambda _: None),)
    opts = {k: v for k, v in options.items() if k not in ("field", "id")}
    spec = bindings.build(Kind.CREATE, fn, resource, {**opts, "id": companion_id(field_spec.id), "field_when": when})
    # Kopf stores the field handler's result under one id, on creation too.
    spec = dataclasses.replace(spec, result_key=field_spec.result_key)
    checks = filters.collect(Kind.CREATE, options.get("labels"), options.get("annotations"), options.get("when"),
                             more)
    registry.register(spec, _as_field_change(fn, path, registry.index_names()), checks)


def _as_field_change(fn: Callable[..., Any], path: tuple[str, ...], indices: tuple[str, ...]) -> Callable[..., Any]:
    """fn called as for a field change: old None, new the field's value."""
    wants = kwargs.accepted(fn, Kind.FIELD, indices)

    def arguments(kw: dict[str, Any]) -> dict[str, Any]:
        kw = {**kw, "old": None, "new": fieldfilters.dig(kw.get("body"), path), "reason": "field"}
        return kw if wants is None else {k: v for k, v in kw.items() if k in wants}

    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def call_async(**kw: Any) -> Any:
            return await fn(**arguments(kw))
        del call_async.__wrapped__  # the registry reads this signature: **kw, all the arguments
        return call_async

    @functools.wraps(fn)
    def call(**kw: Any) -> Any:
        return fn(**arguments(kw))
    del call.__wrapped__
    return call
