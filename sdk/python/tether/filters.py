"""Kopf's callback filters: a ``when=`` callable, or a callable as the value
of a ``labels=``/``annotations=`` key. The broker cannot run Python, so it
narrows the stream with what it can (the CEL, the selectors, and the key of
a callable sent as PRESENT), and the SDK calls the callables before the
function: when one says no, the delivery is answered as if the function had
run and returned None."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Collection, Mapping
from typing import Any

from . import kwargs
from .bindings import Kind

Callback = Callable[..., Any]


@dataclasses.dataclass(frozen=True)
class Check:
    """One callable filter of a binding."""

    # the option as written: "when=", "labels['app']"
    option: str
    fn: Callback
    # the label or annotation key whose value is passed as value; "" for when=
    key: str = ""
    # "labels" or "annotations"; "" for when=
    source: str = ""
    # the keyword arguments fn declares; None when it takes **kwargs
    wants: frozenset[str] | None = None

    def passes(self, values: Mapping[str, Any]) -> bool:
        available = dict(values)
        if self.source:
            available["value"] = (values.get(self.source) or {}).get(self.key)
        names = available.keys() if self.wants is None else self.wants
        return bool(self.fn(**{k: available[k] for k in names if k in available}))


def collect(kind: Kind, labels: Any, annotations: Any, when: Any) -> tuple[Check, ...]:
    """The callables among a decorator's filters, checked for the keyword
    arguments they declare. Daemons take none: a daemon the broker started
    stays running until the broker stops it, so there is no later delivery
    at which a callable could start or stop it as the object changes."""
    found: list[tuple[str, Callback, str, str]] = []
    if callable(when):
        found.append(("when=", when, "", ""))
    for source, mapping in (("labels", labels), ("annotations", annotations)):
        if isinstance(mapping, Mapping):
            found += [(f"{source}[{key!r}]", fn, key, source) for key, fn in mapping.items() if callable(fn)]
    if found and kind is Kind.DAEMON:
        raise TypeError(f"{found[0][0]} is a callable, which daemons do not take: the broker starts a daemon "
                        "once per object and stops it when the object stops matching, and only the broker's "
                        "filters (when= as CEL, labels=, annotations=) can tell it that; test the condition in "
                        "the daemon's loop instead")
    checks = []
    for option, fn, key, source in found:
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):
            raise TypeError(f"{option}: a filter callable is sync (as in Kopf), not async")
        available = kwargs.names(kind) + (("value",) if source else ())
        wants = kwargs.declared(fn, available, f"the filter callables of {kind.value} bindings")
        checks.append(Check(option, fn, key, source, wants))
    return tuple(checks)


def failing(checks: Collection[Check], values: Mapping[str, Any]) -> str | None:
    """The option of the first check that says no; None when all pass. An
    exception in a callable is raised as the function's would be."""
    for check in checks:
        if not check.passes(values):
            return check.option
    return None


def _call(fn: Callback, kw: Mapping[str, Any]) -> bool:
    """fn with the arguments it declares among kw (all of them with **kwargs)."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return bool(fn(**kw))
    return bool(fn(**{p.name: kw[p.name] for p in params if p.name in kw}))


def not_(fn: Callback) -> Callback:
    """A filter callable that passes when fn does not."""
    def negated(**kw: Any) -> bool:
        return not _call(fn, kw)
    return negated


def all_(fns: Collection[Callback]) -> Callback:
    """A filter callable that passes when every one of fns does."""
    def every(**kw: Any) -> bool:
        return all(_call(fn, kw) for fn in fns)
    return every


def any_(fns: Collection[Callback]) -> Callback:
    """A filter callable that passes when one of fns does."""
    def some(**kw: Any) -> bool:
        return any(_call(fn, kw) for fn in fns)
    return some


def none_(fns: Collection[Callback]) -> Callback:
    """A filter callable that passes when none of fns does."""
    def no(**kw: Any) -> bool:
        return not any(_call(fn, kw) for fn in fns)
    return no
