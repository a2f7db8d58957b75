"""Kopf's field filters: ``field=`` with ``value=``, ``old=`` and ``new=``
on any decorator (``@tether.on.create(..., field="spec.mode",
value="fast")``). A value, ``PRESENT`` or ``ABSENT`` becomes CEL that the
broker evaluates, so it narrows deliveries and holds like any ``when=``; a
callable is called by the SDK with the field's value as ``value``, as the
filter callables of filters.py are.

``value=`` tests the object; ``old=`` and ``new=`` test the field before and
after an update (update and field bindings only), over the broker's
last-handled essence as ``oldObject``. On an update binding, ``field=`` alone
also asks that the field changed, as in Kopf; on a field binding that is
what the binding is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .bindings import Kind
from .filters import Check
from .selectors import ABSENT, PRESENT

# Kopf's options, unset.
UNSET: Any = object()


def build(kind: Kind, field: str | Sequence[str] | None, value: Any = UNSET, old: Any = UNSET,
          new: Any = UNSET) -> tuple[str, tuple[Check, ...]]:
    """The CEL for the broker ("" for none) and the checks for the SDK that
    field= (a dotted path, or a tuple of keys that may hold dots) and its
    companions ask for."""
    given = {k: v for k, v in (("value", value), ("old", old), ("new", new)) if v is not UNSET}
    if not field:
        if given:
            raise TypeError(f"{sorted(given)[0]}= needs field= (a dotted path such as 'spec.mode')")
        return "", ()
    if ("old" in given or "new" in given) and kind not in (Kind.UPDATE, Kind.FIELD):
        raise TypeError("old= and new= apply to update and field bindings only: other bindings have no old state")
    path = tuple(field.split(".")) if isinstance(field, str) else tuple(field)
    if not path or not all(isinstance(step, str) and step for step in path):
        raise ValueError(f"field={field!r} is not a dotted path or a tuple of keys")
    cels, checks = [], []
    if kind is Kind.UPDATE and not ({"old", "new"} & given.keys()):
        cels.append(_changed(path))
    for option, test in given.items():
        root = "oldObject" if option == "old" else "object"
        if callable(test):
            if kind is Kind.DAEMON:
                raise TypeError(f"{option}= is a callable, which daemons do not take: use a value, PRESENT or "
                                "ABSENT, which the broker evaluates")
            checks.append(Check(f"{option}=", test, value_of=_reader(kind, option, path)))
        else:
            cels.append(_test(root, path, test))
    return " && ".join(f"({c})" for c in cels), tuple(checks)


def _steps(root: str, path: tuple[str, ...]) -> tuple[str, str]:
    """(whether every step of path is there, the value at its end) as CEL;
    index syntax so that any key works ("app.kubernetes.io/name")."""
    present, expr = [], root
    for step in path:
        key = json.dumps(step)
        present.append(f"{key} in {expr}")
        expr = f"{expr}[{key}]"
    return " && ".join(present), expr


def _test(root: str, path: tuple[str, ...], want: Any) -> str:
    present, expr = _steps(root, path)
    guard = f"{root} != null && " if root == "oldObject" else ""
    if want is PRESENT:
        return guard + present
    if want is ABSENT:
        return f"{root} == null || !({present})" if guard else f"!({present})"
    try:
        literal = json.dumps(want)
    except TypeError:
        raise TypeError(f"a field filter's value is PRESENT, ABSENT, a callable or a JSON value, not {want!r}") from None
    return f"{guard}{present} && {expr} == {literal}"


def _changed(path: tuple[str, ...]) -> str:
    """CEL: the field at path differs between oldObject and object (an
    object never handled before has no oldObject, and counts as changed)."""
    was, old = _steps("oldObject", path)
    now, new = _steps("object", path)
    same = f"(({was}) && ({now}) && {old} == {new}) || (!({was}) && !({now}))"
    return f"oldObject == null || !({same})"


def _reader(kind: Kind, option: str, path: tuple[str, ...]) -> Any:
    """How a callable's value is read from the function's arguments: a
    field binding's old and new are the field's values already; otherwise
    the path is followed in old, new or the body."""
    def read(values: Mapping[str, Any]) -> Any:
        source = {"old": "old", "new": "new"}.get(option, "body")
        if kind is Kind.FIELD and source != "body":
            return values.get(source)
        return dig(values.get(source), path)
    return read


def dig(obj: Any, path: tuple[str, ...]) -> Any:
    """The value at path in obj; None where a step is missing."""
    for step in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(step)
    return obj
