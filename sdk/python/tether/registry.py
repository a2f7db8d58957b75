"""Registries: the bindings of one handler, as the decorators registered
them. The decorators use a module-level default registry unless given
registry=; tests and programs with several handlers make their own."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from . import kwargs
from .bindings import Kind, Spec

# The kinds whose functions may register subhandlers (Kopf's changing handlers).
PARENTS = frozenset({Kind.CREATE, Kind.UPDATE, Kind.DELETE, Kind.RESUME, Kind.FIELD})

if TYPE_CHECKING:
    from .activities import Activity, Hook
    from .indexing import Indexer, Indices
    from .filters import Check


@dataclasses.dataclass(frozen=True)
class Registration:
    """A function and the binding it serves."""

    spec: Spec
    fn: Callable[..., Any]
    is_async: bool
    # the keyword arguments fn declares; None when it takes **kwargs
    wants: frozenset[str] | None
    # the callable filters, called before fn
    checks: tuple[Check, ...] = ()
    # whether fn may register subhandlers (a create, update, delete, resume
    # or field function): worked out once, off the path of every delivery
    parent: bool = False


class Registry:
    """The bindings of one handler, in the order they were registered."""

    def __init__(self) -> None:
        self._by_id: dict[str, Registration] = {}
        # startup, cleanup and probe functions: the process's, not bindings
        self._hooks: list[Hook] = []
        self._indexers: list[Indexer] = []
        self._indices: Indices | None = None

    def register(self, spec: Spec, fn: Callable[..., Any], checks: tuple[Check, ...] = ()) -> Registration:
        if not callable(fn):
            raise TypeError(f"{fn!r} is not a function")
        if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
            raise TypeError(f"{fn.__qualname__}() is a generator; a handler function returns its result")
        if spec.id in self._by_id:
            other = self._by_id[spec.id]
            raise ValueError(f"binding id {spec.id!r} is already used by the {other.spec.kind.value} binding of "
                             f"{getattr(other.fn, '__qualname__', other.fn)}(); give one of them id=")
        is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))
        reg = Registration(spec, fn, is_async, kwargs.accepted(fn, spec.kind, self.index_names()), checks,
                           spec.kind in PARENTS)
        self._by_id[spec.id] = reg
        return reg

    def add_index(self, indexer: Indexer) -> None:
        """An index, kept from the stream of its binding (registered too)."""
        if indexer.name in self.index_names():
            raise ValueError(f"an index named {indexer.name!r} is already registered; give one of them id=")
        self._indexers.append(indexer)
        self._indices = None

    def index_names(self) -> tuple[str, ...]:
        """The indices' names: functions declared after them may take them."""
        return tuple(i.name for i in self._indexers)

    @property
    def indices(self) -> Indices:
        """The process's indices, made once from those registered."""
        if self._indices is None:
            from .indexing import Indices
            self._indices = Indices(list(self._indexers))
        return self._indices

    def add_hook(self, hook: Hook) -> None:
        for other in self._hooks:
            if (other.activity, other.id) == (hook.activity, hook.id):
                raise ValueError(f"the {hook.activity.value} id {hook.id!r} is already used by "
                                 f"{getattr(other.fn, '__qualname__', other.fn)}(); give one of them id=")
        self._hooks.append(hook)

    def hooks(self, activity: Activity) -> list[Hook]:
        """The startup, cleanup or probe functions, in the order registered."""
        return [h for h in self._hooks if h.activity is activity]

    def get(self, binding_id: str) -> Registration | None:
        return self._by_id.get(binding_id)

    def __iter__(self) -> Iterator[Registration]:
        return iter(list(self._by_id.values()))

    def __len__(self) -> int:
        return len(self._by_id)

    def __repr__(self) -> str:
        return f"<tether.Registry {', '.join(self._by_id) or 'empty'}>"


_default = Registry()


def get_default_registry() -> Registry:
    """The registry the decorators use when not given registry=."""
    return _default


def set_default_registry(registry: Registry) -> Registry:
    """Make registry the one the decorators use when not given registry=,
    as Kopf's set_default_registry; returns the one it replaces."""
    global _default
    if not isinstance(registry, Registry):
        raise TypeError(f"{registry!r} is not a tether.Registry")
    previous, _default = _default, registry
    return previous
