"""Kopf's object filters as the broker takes them: labels become a
Kubernetes label selector, annotations a list of filters, and ``when`` a
CEL expression. Python callables cannot travel to the broker: the key of a
callable label or annotation is sent as PRESENT, a callable when= as no
expression, and the SDK calls them (filters.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class _Marker:
    def __init__(self, name: str):
        self._name = name

    def __repr__(self) -> str:
        return f"tether.{self._name}"


PRESENT = _Marker("PRESENT")
"""A label or annotation filter value: the key must be set (any value)."""
ABSENT = _Marker("ABSENT")
"""A label or annotation filter value: the key must not be set."""

def label_selector(labels: str | Mapping[str, Any] | None) -> str:
    """A Kubernetes label selector: a string is taken as one ("app=web,tier!=cache"),
    a dict as Kopf's {key: value | PRESENT | ABSENT}."""
    if labels is None:
        return ""
    if isinstance(labels, str):
        return labels
    if not isinstance(labels, Mapping):
        raise TypeError(f"labels= takes a dict or a label selector string, not {labels!r}")
    parts = []
    for key, value in labels.items():
        if value is PRESENT or callable(value):
            parts.append(key)
        elif value is ABSENT:
            parts.append("!" + key)
        elif isinstance(value, str):
            parts.append(f"{key}={value}")
        else:
            raise TypeError(f"labels={{{key!r}: {value!r}}}: a label value is a string, PRESENT, ABSENT "
                            "or a callable")
    return ",".join(parts)


def annotation_filters(annotations: Mapping[str, Any] | None) -> tuple[tuple[str, str, str], ...]:
    """(key, operator, value) filters from Kopf's {key: value | PRESENT | ABSENT};
    operator is "present", "absent" or "equals"."""
    if annotations is None:
        return ()
    if not isinstance(annotations, Mapping):
        raise TypeError(f"annotations= takes a dict, not {annotations!r}")
    out = []
    for key, value in annotations.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"annotations=: {key!r} is not an annotation key")
        if value is PRESENT or callable(value):
            out.append((key, "present", ""))
        elif value is ABSENT:
            out.append((key, "absent", ""))
        elif isinstance(value, str):
            out.append((key, "equals", value))
        else:
            raise TypeError(f"annotations={{{key!r}: {value!r}}}: an annotation value is a string, PRESENT, "
                            "ABSENT or a callable")
    return tuple(out)


def when(expr: Any) -> str:
    """The CEL expression the broker evaluates; "" is none (a callable is
    the SDK's to call)."""
    if expr is None or callable(expr):
        return ""
    if isinstance(expr, str):
        return expr.strip()
    raise TypeError(f"when= takes a CEL expression string or a callable, not {expr!r}")
