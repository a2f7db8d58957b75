"""Patches: the merge patch a function builds in its ``patch`` argument
(sent in the ack, or for a mutate binding turned into the JSON patch the
API server takes), and the two RFC operations that needs."""

from __future__ import annotations

import copy
from typing import Any


class MetaPatch(dict):
    """The metadata part of a patch: ``patch.metadata.labels["k"] = "v"``."""

    @property
    def labels(self) -> dict[str, Any]:
        return self.setdefault("labels", {})

    @property
    def annotations(self) -> dict[str, Any]:
        return self.setdefault("annotations", {})


class Patch(dict):
    """A JSON merge patch (RFC 7386) for the object, as in Kopf: set keys to
    change fields, None to remove one. ``patch.status``, ``patch.spec`` and
    ``patch.metadata`` (or ``patch.meta``) are the sub-dicts, made on first
    use; empty ones are dropped when the patch is sent.

    The broker applies it when the function succeeds: labels, annotations,
    spec and other top-level fields, and status (to the status subresource).
    It refuses apiVersion, kind, other metadata and its own annotations."""

    @property
    def metadata(self) -> MetaPatch:
        current = self.get("metadata")
        if not isinstance(current, MetaPatch):
            current = self["metadata"] = MetaPatch(current or {})
        return current

    meta = metadata

    @property
    def spec(self) -> dict[str, Any]:
        return self.setdefault("spec", {})

    @property
    def status(self) -> dict[str, Any]:
        return self.setdefault("status", {})


def pruned(patch: dict[str, Any]) -> dict[str, Any]:
    """A plain copy of patch without empty objects, which say nothing (a
    merge patch's {} would still create a missing field); nulls stay, as
    they remove."""
    out = {}
    for key, value in patch.items():
        if isinstance(value, dict):
            value = pruned(value)
            if not value:
                continue
        out[key] = value
    return out


def merge(target: Any, patch: Any) -> Any:
    """Apply a JSON merge patch (RFC 7386) to a copy of target."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def json_patch(source: dict[str, Any], target: dict[str, Any]) -> list[dict[str, Any]]:
    """The RFC 6902 JSON patch that turns source into target, as the Go SDK
    makes it: objects member by member in key order, anything else (arrays
    included) replaced whole; [] when they are equal."""
    ops: list[dict[str, Any]] = []
    _diff_objects("", source, target, ops)
    return ops


def pointer_token(key: str) -> str:
    """Escape one JSON pointer token (RFC 6901): "~" first, so that the "~"
    of "~1" is not escaped again."""
    return key.replace("~", "~0").replace("/", "~1")


def _diff_objects(path: str, source: dict[str, Any], target: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    for key in sorted(set(source) | set(target)):
        p = f"{path}/{pointer_token(key)}"
        if key not in target:
            ops.append({"op": "remove", "path": p})
        elif key not in source:
            ops.append({"op": "add", "path": p, "value": target[key]})
        elif isinstance(source[key], dict) and isinstance(target[key], dict):
            _diff_objects(p, source[key], target[key], ops)
        elif not equal(source[key], target[key]):
            ops.append({"op": "replace", "path": p, "value": target[key]})


def equal(a: Any, b: Any) -> bool:
    """Equality of decoded JSON: numbers by value (1 == 1.0), but a bool is
    no number, as Python's True == 1 would have it."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b
