"""The broker's view of what changed (broker/progress), for tether.testing
to deliver updates as the broker would: the essence of an object (every
top-level field but apiVersion, kind, status and metadata, plus the labels
and the annotations that are not Tether's own), the diff of two essences,
and the value at a field path."""

from __future__ import annotations

import hashlib
from typing import Any

from .delivery import DiffItem
from .patch import equal

_IGNORED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})
_DOMAIN = "tether.dev"


def ours(key: str) -> bool:
    """Whether an annotation is the broker's bookkeeping for some handler."""
    prefix, _, name = key.partition("/")
    if not name or (prefix != _DOMAIN and not prefix.endswith("." + _DOMAIN)):
        return False
    return name == "last-handled" or name.startswith("result.")


def essence(obj: dict[str, Any]) -> dict[str, Any]:
    secret = obj.get("kind") == "Secret" and obj.get("apiVersion") == "v1"
    out = {}
    for key, value in obj.items():
        if key in ("apiVersion", "kind", "status", "metadata"):
            continue
        if secret and key in ("data", "stringData") and isinstance(value, dict):
            # A Secret's values are recorded by digest only, never in clear.
            value = {k: "sha256:" + hashlib.sha256(str(v).encode()).hexdigest() for k, v in value.items()}
        out[key] = value
    meta = obj.get("metadata") or {}
    kept: dict[str, Any] = {}
    if meta.get("labels"):
        kept["labels"] = meta["labels"]
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if not ours(k) and k not in _IGNORED_ANNOTATIONS}
    if annotations:
        kept["annotations"] = annotations
    if kept:
        out["metadata"] = kept
    return out


def diff(old: Any, new: Any, at: tuple[str, ...] = ()) -> list[DiffItem]:
    """The changes from old to new, sorted by path; lists compare whole."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            path = at + (key,)
            if key not in old:
                out.append(DiffItem("add", path, None, new[key]))
            elif key not in new:
                out.append(DiffItem("remove", path, old[key], None))
            else:
                out.extend(diff(old[key], new[key], path))
        return out
    return [] if equal(old, new) else [DiffItem("change", at, old, new)]


def field(obj: Any, path: str) -> Any:
    """The value at a dotted path, None when absent."""
    for part in path.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj
