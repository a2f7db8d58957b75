"""Kopf's object helpers: make the objects a function creates children of
the object it handles (owner reference, name, namespace, labels). They
change plain dicts (an object, or a list or tuple of them, nested to any
depth) in place. Without owner=, the owner is the object of the delivery
the calling function runs for, as in Kopf; outside a function that is a
LookupError."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any

_UNSET: Any = object()

# A function that returns the body of the delivery being handled; it decodes
# the delivery only when a helper needs the owner.
Owner = Callable[[], Mapping[str, Any]]


@dataclasses.dataclass(frozen=True)
class Handling:
    """The delivery a function runs for: its body, and the list its
    Kubernetes Events go to for the ack (None where the ack carries none:
    reviews and daemons), and for a function that may register subhandlers,
    their Subhandling (None for any other)."""
    body: Owner
    events: list[Any] | None = None
    subs: Any = None


_current: contextvars.ContextVar[Handling | None] = contextvars.ContextVar("tether_handling", default=None)


@contextlib.contextmanager
def handling(body: Owner, events: list[Any] | None = None, subs: Any = None) -> Iterator[None]:
    """Within it, the helpers' default owner is what body() returns,
    tether.event and its kin append to events, and tether.subhandler to
    subs."""
    token = _current.set(Handling(body, events, subs))
    try:
        yield
    finally:
        _current.reset(token)


def current() -> Handling | None:
    """The delivery being handled in this context, if any."""
    return _current.get()


def delivered_body(raw: bytes, old_raw: bytes = b"") -> Owner:
    """The owner getter for a delivery's object (its old object when it has
    none, as in a DELETE review), decoded once when first asked for."""
    cache: list[Mapping[str, Any]] = []

    def body() -> Mapping[str, Any]:
        if not cache:
            value = json.loads(raw or old_raw or b"{}")
            cache.append(value if isinstance(value, Mapping) else {})
        return cache[0]

    return body


def _owner(owner: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if owner is not None:
        return owner
    now = _current.get()
    if now is None:
        raise LookupError("owner= must be given outside a handler function: there is no object being handled")
    return now.body()


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _walk(objs: Any, nested: Iterable[str] = ()) -> Iterator[MutableMapping[str, Any]]:
    """Each object in objs (a dict, or iterables of them), and after each
    the dicts at its nested dotted paths that exist."""
    if objs is None:
        return
    if isinstance(objs, MutableMapping):
        yield objs
        for path in nested:
            sub: Any = objs
            for key in path.split("."):
                sub = sub.get(key) if isinstance(sub, Mapping) else None
            if isinstance(sub, MutableMapping):
                yield sub
        return
    if isinstance(objs, (str, bytes)) or not isinstance(objs, Iterable):
        raise TypeError(f"not a Kubernetes object as a dict, nor a list of them: {objs!r}")
    for obj in objs:
        yield from _walk(obj, nested)


def _metadata(obj: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    if obj.get("metadata") is None:
        obj["metadata"] = {}
    return obj["metadata"]


def build_owner_reference(owner: Mapping[str, Any], *, controller: bool | None = True,
                    block_owner_deletion: bool | None = True) -> dict[str, Any]:
    """The ownerReferences entry naming owner; fields owner lacks are left out."""
    ref = {"controller": controller, "blockOwnerDeletion": block_owner_deletion,
           "apiVersion": owner.get("apiVersion"), "kind": owner.get("kind"),
           "name": _meta(owner).get("name"), "uid": _meta(owner).get("uid")}
    return {k: v for k, v in ref.items() if v is not None}


def append_owner_reference(objs: Any, owner: Mapping[str, Any] | None = None, *, controller: bool | None = True,
                           block_owner_deletion: bool | None = True) -> None:
    """Add a reference to owner to each object's ownerReferences, unless one
    with owner's uid is there."""
    ref = build_owner_reference(_owner(owner), controller=controller, block_owner_deletion=block_owner_deletion)
    for obj in _walk(objs):
        refs = _metadata(obj).setdefault("ownerReferences", [])
        if not any(r.get("uid") == ref.get("uid") for r in refs):
            refs.append(dict(ref))


def remove_owner_reference(objs: Any, owner: Mapping[str, Any] | None = None) -> None:
    """Remove the references with owner's uid from each object."""
    uid = _meta(_owner(owner)).get("uid")
    for obj in _walk(objs):
        refs = _metadata(obj).setdefault("ownerReferences", [])
        refs[:] = [r for r in refs if r.get("uid") != uid]


def label(objs: Any, labels: Mapping[str, Any] = _UNSET, *, forced: bool = False,
          nested: str | Iterable[str] | None = None) -> None:
    """Set labels (default: the owner's) on each object, and on the dicts at
    its nested paths (``nested="spec.template"`` labels a Deployment's pods).
    An existing label keeps its value unless forced."""
    if labels is _UNSET:
        labels = _meta(_owner(None)).get("labels") or {}
    paths = [nested] if isinstance(nested, str) else list(nested or ())
    for obj in _walk(objs, paths):
        meta = _metadata(obj)
        if meta.get("labels") is None:
            meta["labels"] = {}
        for key, value in labels.items():
            if forced:
                meta["labels"][key] = value
            else:
                meta["labels"].setdefault(key, value)


def harmonize_naming(objs: Any, name: str | None = _UNSET, *, forced: bool = False, strict: bool = False) -> None:
    """Name each object after name (default: the owner's): strict, exactly
    name; otherwise the prefix ``name-`` (generateName) for the API server to
    complete. An object with a name or generateName keeps it unless forced."""
    if name is _UNSET:
        name = _meta(_owner(None)).get("name")
    if name is None:
        raise LookupError("name= must be given: the owner has no name")
    for obj in _walk(objs):
        meta = obj.get("metadata") or {}
        if not forced and ("name" in meta or "generateName" in meta):
            continue
        meta = _metadata(obj)
        if strict:
            meta["name"] = name
            meta.pop("generateName", None)
        else:
            meta["generateName"] = f"{name}-"
            meta.pop("name", None)


def adjust_namespace(objs: Any, namespace: str | None = _UNSET, *, forced: bool = False) -> None:
    """Put each object in namespace (default: the owner's; None for a
    cluster-scoped owner), unless it has one and not forced."""
    if namespace is _UNSET:
        namespace = _meta(_owner(None)).get("namespace")
    for obj in _walk(objs):
        if forced or (obj.get("metadata") or {}).get("namespace") is None:
            _metadata(obj)["namespace"] = namespace


def adopt(objs: Any, owner: Mapping[str, Any] | None = None, *, forced: bool = False, strict: bool = False,
          nested: str | Iterable[str] | None = None) -> None:
    """Make objs the owner's children (default: the object being handled):
    owned by it, named after it, in its namespace, with its labels."""
    owner = _owner(owner)
    meta = _meta(owner)
    append_owner_reference(objs, owner)
    harmonize_naming(objs, meta.get("name"), forced=forced, strict=strict)
    adjust_namespace(objs, meta.get("namespace"), forced=forced)
    label(objs, meta.get("labels") or {}, forced=forced, nested=nested)
