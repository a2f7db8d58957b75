"""The decorators, in Kopf's shape: ``@tether.on.create(resource, *,
options)`` registers the function for that binding; the resource is named in
any of Kopf's forms (see resources.py). Each option
maps to a field of the protocol's Binding; an option the protocol has no
field for (many of Kopf's) is an error at decoration time that names it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, Union

from . import bindings, durations, fieldcreate, fieldfilters, filters, indexing
from .activities import cleanup, login, probe, startup  # noqa: F401  (tether.on.startup, ...)
from .bindings import Finalizer, Kind
from .errors import ErrorsMode
from .kopfonly import WHY_ON, missing
from .subhandlers import subhandler
from .registry import Registry, get_default_registry

F = TypeVar("F", bound=Callable[..., Any])
# labels=: a label selector string, or Kopf's {key: value | PRESENT | ABSENT | callable}
Selector = Union[str, Mapping[str, Any], None]
# when=: a CEL expression for the broker, or a callable for the SDK
When = Union[str, Callable[..., Any], None]

# Kopf's options with no field in the protocol, and what to do instead.
_KOPF_ONLY = {
    "param": "close over the value, or use functools.partial",
    "deleted": "objects being deleted are delivered to the delete binding",
    "requires_finalizer": "use finalizer= on a delete, timer or daemon binding",
    "cancellation_polling": "a daemon's stopped flag is set at once; wait on it",
    "category": "name one resource per binding, and register the function once for each",
    "persistent": "webhooks stay while the handler is within its grace; finalizer=tether.STRICT keeps them, "
                  "failing closed, while it is absent",
}
# Tether's own options, and the kinds of binding they apply to.
_ONLY = {
    "optional": "delete", "interval": "timer", "sharp": "timer", "idle": "timer",
    "initial_delay": "timer", "cancellation_timeout": "daemon", "cancellation_backoff": "daemon", "restart": "daemon",
    "finalizer": "delete, timer, daemon, validate and mutate", "retries": "lifecycle, timer and daemon",
    "errors": "lifecycle, timer and daemon",
    "backoff": "lifecycle, timer and daemon", "max_backoff": "lifecycle, timer and daemon",
    "field_selector": "lifecycle, timer and daemon", "operations": "validate and mutate",
    "operation": "validate and mutate", "failure_policy": "validate and mutate",
    "ignore_failures": "validate and mutate", "side_effects": "validate and mutate",
    "subresource": "validate and mutate", "namespace_selector": "validate and mutate",
    "match_conditions": "validate and mutate", "results": "lifecycle, timer and daemon",
}


def _where(kind: Kind) -> str:
    return f"@tether.{kind.value}()" if kind in (Kind.TIMER, Kind.DAEMON) else f"@tether.on.{kind.value}()"


def _reject(kind: Kind, unsupported: Mapping[str, Any]) -> None:
    name = sorted(unsupported)[0]
    where = _where(kind)
    if name in _KOPF_ONLY:
        raise TypeError(f"{where}: Kopf's {name}= has no field in the Tether protocol: {_KOPF_ONLY[name]}")
    if name == "initial_delay" and kind is Kind.DAEMON:
        raise TypeError(f"{where}: a daemon has no initial_delay= (DaemonOptions has no such field): "
                        "start the daemon with stopped.wait(delay)")
    if name in ("retries", "backoff", "max_backoff") and kind.admission:
        raise TypeError(f"{where}: {name}= does not apply: a review is answered once")
    if name in _ONLY:
        raise TypeError(f"{where}: {name}= applies to {_ONLY[name]} bindings only")
    raise TypeError(f"{where} got an unexpected keyword argument {name!r}")


def _register(kind: Kind, registry: Registry | None, resource: tuple[Any, ...],
              unsupported: Mapping[str, Any], options: Mapping[str, Any]) -> Callable[[F], F]:
    unsupported = dict(unsupported)
    # Kopf's field filters, on any decorator (fieldfilters.py); a field
    # binding's field= is its own option and the path they test.
    field_filter = {k: unsupported.pop(k) for k in ("value", "old", "new") if k in unsupported}
    path = options.get("field") if kind is Kind.FIELD else unsupported.pop("field", None)
    if unsupported:
        _reject(kind, unsupported)

    def decorator(fn: F) -> F:
        where = f"{_where(kind)} on {getattr(fn, '__qualname__', fn)!s}"
        try:
            field_when, more = fieldfilters.build(kind, path, **field_filter)
            result_field = bindings.field_path(path) if path else None
            spec = bindings.build(kind, fn, resource,
                                  {**options, "field_when": field_when, "result_field": result_field})
            checks = filters.collect(kind, options.get("labels"), options.get("annotations"), options.get("when"),
                                     more)
            reg = registry if registry is not None else get_default_registry()
            reg.register(spec, fn, checks)
            if kind is Kind.FIELD:
                fieldcreate.register(reg, fn, resource, spec, options, field_filter)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{where}: {e}") from None
        return fn

    return decorator


def create(*resource: str, group: str | None = None, version: str | None = None,
           plural: str | None = None, singular: str | None = None, shortcut: str | None = None, kind: str | None = None,
           id: str | None = None, labels: Selector = None, annotations: Mapping[str, Any] | None = None,
           when: When = None, namespaces: Iterable[str] | None = None, field_selector: str | None = None,
           retries: int | None = None,
           errors: ErrorsMode | None = None, timeout: float | None = None, backoff: float | None = None,
           max_backoff: float | None = None, results: str | None = None, registry: Registry | None = None,
           **unsupported: Any) -> Callable[[F], F]:
    """Objects the handler has not handled before."""
    return _register(Kind.CREATE, registry, resource, unsupported, dict(
        group=group, version=version, plural=plural, singular=singular, shortcut=shortcut,
        kind=kind, id=id, labels=labels, annotations=annotations, when=when, namespaces=namespaces,
        field_selector=field_selector, retries=retries,
        errors=errors, timeout=timeout, backoff=backoff, max_backoff=max_backoff, results=results))


def update(*resource: str, group: str | None = None, version: str | None = None,
           plural: str | None = None, singular: str | None = None, shortcut: str | None = None, kind: str | None = None,
           id: str | None = None, labels: Selector = None, annotations: Mapping[str, Any] | None = None,
           when: When = None, namespaces: Iterable[str] | None = None, field_selector: str | None = None,
           retries: int | None = None,
           errors: ErrorsMode | None = None, timeout: float | None = None, backoff: float | None = None,
           max_backoff: float | None = None, results: str | None = None, registry: Registry | None = None,
           **unsupported: Any) -> Callable[[F], F]:
    """A change of an object's essence (everything but status) since the
    handler last finished with it: old, new and diff say what changed."""
    return _register(Kind.UPDATE, registry, resource, unsupported, dict(
        group=group, version=version, plural=plural, singular=singular, shortcut=shortcut,
        kind=kind, id=id, labels=labels, annotations=annotations, when=when, namespaces=namespaces,
        field_selector=field_selector, retries=retries,
        errors=errors, timeout=timeout, backoff=backoff, max_backoff=max_backoff, results=results))


def delete(*resource: str, group: str | None = None, version: str | None = None,
           plural: str | None = None, singular: str | None = None, shortcut: str | None = None, kind: str | None = None,
           id: str | None = None, labels: Selector = None, annotations: Mapping[str, Any] | None = None,
           when: When = None, namespaces: Iterable[str] | None = None, field_selector: str | None = None,
           optional: bool | None = None, finalizer: Finalizer | None = None, retries: int | None = None,
           errors: ErrorsMode | None = None,
           timeout: float | None = None, backoff: float | None = None, max_backoff: float | None = None,
           results: str | None = None, registry: Registry | None = None, **unsupported: Any) -> Callable[[F], F]:
    """An object being deleted. The broker holds it (tether.HOLD) until the
    function succeeds or fails permanently, unless optional=True or
    finalizer=tether.NONE."""
    return _register(Kind.DELETE, registry, resource, unsupported, dict(
        group=group, version=version, plural=plural, singular=singular, shortcut=shortcut,
        kind=kind, id=id, labels=labels, annotations=annotations, when=when, namespaces=namespaces,
        field_selector=field_selector, optional=optional, finalizer=finalizer, retries=retries,
        errors=errors, timeout=timeout,
        backoff=backoff, max_backoff=max_backoff, results=results))


def resume(*resource: str, group: str | None = None, version: str | None = None,
           plural: str | None = None, singular: str | None = None, shortcut: str | None = None, kind: str | None = None,
           id: str | None = None, labels: Selector = None, annotations: Mapping[str, Any] | None = None,
           when: When = None, namespaces: Iterable[str] | None = None, field_selector: str | None = None,
           retries: int | None = None,
           errors: ErrorsMode | None = None, timeout: float | None = None, backoff: float | None = None,
           max_backoff: float | None = None, results: str | None = None, registry: Registry | None = None,
           **unsupported: Any) -> Callable[[F], F]:
    """Objects already handled, seen again after a broker start or the
    handler's return."""
    return _register(Kind.RESUME, registry, resource, unsupported, dict(
        group=group, version=version, plural=plural, singular=singular, shortcut=shortcut,
        kind=kind, id=id, labels=labels, annotations=annotations, when=when, namespaces=namespaces,
        field_selector=field_selector, retries=retries,
        errors=errors, timeout=timeout, backoff=backoff, max_backoff=max_backoff, results=results))


def field(*resource: str, group: str | None = None, version: str | None = None,
          plural: str | None = None, singular: str | None = None, shortcut: str | None = None, field: str | tuple[str, ...],
          kind: str | None = None, id: str | None = None, labels: Selector = None,
          annotations: Mapping[str, Any] | None = None, when: When = None,
          namespaces: Iterable[str] | None = None, field_selector: str | None = None, retries: int | None = None,
          errors: ErrorsMode | None = None,
          timeout: float | None = None, backoff: float | None = None, max_backoff: float | None = None,
          results: str | None = None, registry: Registry | None = None, **unsupported: Any) -> Callable[[F], F]:
    """A change of the value at field (a dotted path): old and new are the
    field's values."""
    return _register(Kind.FIELD, registry, resource, unsupported, dict(
        group=group, version=version, plural=plural, singular=singular, shortcut=shortcut,
        field=field, kind=kind, id=id, labels=labels, annotations=annotations, when=when, namespaces=namespaces,
        field_selector=field_selector, retries=retries,
        errors=errors, timeout=timeout, backoff=backoff, max_backoff=max_backoff, results=results))


def event(*resource: str, group: str | None = None, version: str | None = None,
          plural: str | None = None, singular: str | None = None, shortcut: str | None = None, kind: str | None = None,
          id: str | None = None, labels: Selector = None, annotations: Mapping[str, Any] | None = None,
          when: When = None, namespaces: Iterable[str] | None = None, field_selector: str | None = None,
          retries: int | None = None,
          errors: ErrorsMode | None = None, timeout: float | None = None, backoff: float | None = None,
          max_backoff: float | None = None, results: str | None = None, registry: Registry | None = None,
           **unsupported: Any) -> Callable[[F], F]:
    """Every raw watch event (type is ADDED, MODIFIED or DELETED). Never holds."""
    return _register(Kind.EVENT, registry, resource, unsupported, dict(
        group=group, version=version, plural=plural, singular=singular, shortcut=shortcut,
        kind=kind, id=id, labels=labels, annotations=annotations, when=when, namespaces=namespaces,
        field_selector=field_selector, retries=retries,
        errors=errors, timeout=timeout, backoff=backoff, max_backoff=max_backoff, results=results))


def timer(*resource: str, group: str | None = None, version: str | None = None,
          plural: str | None = None, singular: str | None = None, shortcut: str | None = None, interval: float,
          initial_delay: float | None = None, idle: float | None = None, sharp: bool | None = None,
          kind: str | None = None, id: str | None = None, labels: Selector = None,
          annotations: Mapping[str, Any] | None = None, when: When = None,
          namespaces: Iterable[str] | None = None, field_selector: str | None = None,
          finalizer: Finalizer | None = None, retries: int | None = None,
          errors: ErrorsMode | None = None, timeout: float | None = None,
          backoff: float | None = None, max_backoff: float | None = None, results: str | None = None,
          registry: Registry | None = None, **unsupported: Any) -> Callable[[F], F]:
    """Every interval seconds (at least 0.1) per object, scheduled by the
    broker one tick at a time. Holds each object (tether.HOLD) unless
    finalizer=tether.NONE."""
    return _register(Kind.TIMER, registry, resource, unsupported, dict(
        group=group, version=version, plural=plural, singular=singular, shortcut=shortcut,
        interval=interval, initial_delay=initial_delay, idle=idle, sharp=sharp, kind=kind, id=id, labels=labels,
        annotations=annotations, when=when, namespaces=namespaces, field_selector=field_selector,
        finalizer=finalizer, retries=retries,
        errors=errors, timeout=timeout, backoff=backoff, max_backoff=max_backoff, results=results))


def daemon(*resource: str, group: str | None = None, version: str | None = None,
           plural: str | None = None, singular: str | None = None, shortcut: str | None = None,
           cancellation_timeout: float | None = None, cancellation_backoff: float | None = None,
           restart: bool | None = None, kind: str | None = None,
           id: str | None = None, labels: Selector = None, annotations: Mapping[str, Any] | None = None,
           when: When = None, namespaces: Iterable[str] | None = None, field_selector: str | None = None,
           finalizer: Finalizer | None = None, retries: int | None = None,
           errors: ErrorsMode | None = None, timeout: float | None = None,
           backoff: float | None = None, max_backoff: float | None = None, results: str | None = None,
           registry: Registry | None = None, **unsupported: Any) -> Callable[[F], F]:
    """A long-running function per object, until its ``stopped`` flag is
    set. restart=True has the broker start it again (with backoff) when it
    returns by itself. Holds each object (tether.HOLD) unless finalizer=tether.NONE.
    A stop sets ``stopped``; with cancellation_backoff= and
    cancellation_timeout= both given, an async daemon still running
    cancellation_backoff seconds later is cancelled, and the broker waits
    both in all for it to return, as Kopf's daemons are stopped."""
    return _register(Kind.DAEMON, registry, resource, unsupported, dict(
        group=group, version=version, plural=plural, singular=singular, shortcut=shortcut,
        cancellation_timeout=cancellation_timeout, cancellation_backoff=cancellation_backoff, restart=restart, kind=kind, id=id, labels=labels,
        annotations=annotations, when=when, namespaces=namespaces, field_selector=field_selector,
        finalizer=finalizer, retries=retries,
        errors=errors, timeout=timeout, backoff=backoff, max_backoff=max_backoff, results=results))


def validate(*resource: str, group: str | None = None, version: str | None = None,
             plural: str | None = None, singular: str | None = None, shortcut: str | None = None,
             operations: Iterable[str] | None = None, operation: str | None = None,
             failure_policy: str | None = None, ignore_failures: bool | None = None,
             side_effects: bool | None = None, subresource: str | None = None,
             namespace_selector: str | None = None, match_conditions: Any = None, timeout: float | None = None,
             kind: str | None = None, id: str | None = None, labels: Selector = None,
             annotations: Mapping[str, Any] | None = None, when: When = None,
             namespaces: Iterable[str] | None = None, finalizer: Finalizer | None = None,
             registry: Registry | None = None, **unsupported: Any) -> Callable[[F], F]:
    """Admission reviews, as a validating webhook the broker serves: return
    to allow, raise tether.AdmissionError to refuse."""
    return _admission(Kind.VALIDATE, locals())


def mutate(*resource: str, group: str | None = None, version: str | None = None,
           plural: str | None = None, singular: str | None = None, shortcut: str | None = None,
           operations: Iterable[str] | None = None, operation: str | None = None,
           failure_policy: str | None = None, ignore_failures: bool | None = None,
           side_effects: bool | None = None, subresource: str | None = None,
           namespace_selector: str | None = None, match_conditions: Any = None, timeout: float | None = None,
           kind: str | None = None, id: str | None = None, labels: Selector = None,
           annotations: Mapping[str, Any] | None = None, when: When = None,
           namespaces: Iterable[str] | None = None, finalizer: Finalizer | None = None,
           registry: Registry | None = None, **unsupported: Any) -> Callable[[F], F]:
    """Admission reviews, as a mutating webhook: what the function puts in
    ``patch`` is answered as a JSON patch; tether.AdmissionError refuses."""
    return _admission(Kind.MUTATE, locals())


def _admission(kind: Kind, args: dict[str, Any]) -> Callable[[F], F]:
    resource, registry, unsupported = args.pop("resource"), args.pop("registry"), args.pop("unsupported")
    return _register(kind, registry, resource, unsupported, args)


def __getattr__(name: str) -> object:
    """kopf.on's decorators that Tether has no counterpart for (this):
    an AttributeError that says why."""
    raise missing(name, "tether.on", WHY_ON)


def index(*resource: str, group: str | None = None, version: str | None = None,
          plural: str | None = None, singular: str | None = None, shortcut: str | None = None,
          kind: str | None = None, id: str | None = None, labels: Selector = None,
          annotations: Mapping[str, Any] | None = None, when: When = None,
          namespaces: Iterable[str] | None = None, field_selector: str | None = None,
          errors: ErrorsMode | None = None, backoff: float | None = None,
          registry: Registry | None = None, **unsupported: Any) -> Callable[[F], F]:
    """An in-memory index of the resource (Kopf's @kopf.index): the function
    is called for every object that matches, in this process, and what it
    returns is kept under its name (or id=), which functions declared after
    it take as a keyword argument. Deliveries wait until the index has every
    object. errors= is IGNORED by default (the stale values stay)."""
    unsupported = dict(unsupported)
    field_filter = {k: unsupported.pop(k) for k in ("value",) if k in unsupported}
    path = unsupported.pop("field", None)
    if unsupported:
        name = sorted(unsupported)[0]
        why = {"retries": "an index function is not retried: its errors= decides",
               "timeout": "an index function is not timed out: keep it quick"}.get(name)
        raise TypeError(f"@tether.index() got an unexpected keyword argument {name!r}" + (f": {why}" if why else ""))

    def decorator(fn: F) -> F:
        where = f"@tether.index() on {getattr(fn, '__qualname__', fn)!s}"
        reg = registry if registry is not None else get_default_registry()
        try:
            name = id if id is not None else getattr(fn, "__name__", "")
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"the index's name {name!r} is not a Python identifier: pass id=")
            field_when, more = fieldfilters.build(Kind.INDEX, path, **field_filter)
            spec = bindings.build(Kind.INDEX, fn, resource, dict(
                group=group, version=version, plural=plural, singular=singular, shortcut=shortcut, kind=kind,
                id=None if id is None else bindings.default_id(Kind.INDEX, _named(id)), labels=labels,
                annotations=annotations, when=when, namespaces=namespaces, field_selector=field_selector,
                field_when=field_when))
            checks = filters.collect(Kind.INDEX, labels, annotations, when, more)
            registration = reg.register(spec, fn, checks)
            mode = bindings._errors_mode(errors) if errors is not None else ErrorsMode.IGNORED
            reg.add_index(indexing.Indexer(name, spec.id, indexing.caller(registration), mode,
                                           durations.seconds("backoff", backoff) if backoff is not None else None))
        except (TypeError, ValueError) as e:
            raise type(e)(f"{where}: {e}") from None
        return fn

    return decorator


def _named(name: str) -> Callable[..., Any]:
    """A stand-in with __name__, for the binding id of an index named by id=."""
    def fn() -> None:
        pass
    fn.__name__ = name
    return fn
