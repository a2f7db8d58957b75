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

    # the option as written: "when=", "labels['app']", "value="
    option: str
    fn: Callback
    # reads what fn gets as value from the function's arguments (a label's
    # value, a field's); None for when=, which gets no value
    value_of: Callable[[Mapping[str, Any]], Any] | None = None
    # the keyword arguments fn declares; None when it takes **kwargs
    wants: frozenset[str] | None = None

    def passes(self, values: Mapping[str, Any]) -> bool:
        available = dict(values)
        if self.value_of is not None:
            available["value"] = self.value_of(values)
        names = available.keys() if self.wants is None else self.wants
        return bool(self.fn(**{k: available[k] for k in names if k in available}))


def collect(kind: Kind, labels: Any, annotations: Any, when: Any, more: tuple[Check, ...] = ()) -> tuple[Check, ...]:
    """The callables among a decorator's filters, checked for the keyword
    arguments they declare; more are checks made elsewhere (field filters).
    Daemons take none: a daemon the broker started stays running until the
    broker stops it, so there is no later delivery at which a callable could
    start or stop it as the object changes."""
    found: list[tuple[str, Callback, Any]] = []
    if callable(when):
        found.append(("when=", when, None))
    for source, mapping in (("labels", labels), ("annotations", annotations)):
        if isinstance(mapping, Mapping):
            found += [(f"{source}[{key!r}]", fn, _value_of(source, key)) for key, fn in mapping.items() if callable(fn)]
    found += [(c.option, c.fn, c.value_of) for c in more]
    if found and kind is Kind.DAEMON:
        raise TypeError(f"{found[0][0]} is a callable, which daemons do not take: the broker starts a daemon "
                        "once per object and stops it when the object stops matching, and only the broker's "
                        "filters (when= as CEL, labels=, annotations=) can tell it that; test the condition in "
                        "the daemon's loop instead")
    checks = []
    for option, fn, value_of in found:
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):
            raise TypeError(f"{option}: a filter callable is sync (as in Kopf), not async")
        available = kwargs.names(kind) + (("value",) if value_of is not None else ())
        wants = kwargs.declared(fn, available, f"the filter callables of {kind.value} bindings")
        checks.append(Check(option, fn, value_of, wants))
    return tuple(checks)


def _value_of(source: str, key: str) -> Callable[[Mapping[str, Any]], Any]:
    """Reads the value of a label or annotation key."""
    return lambda values: (values.get(source) or {}).get(key)


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
