"""Kopf's subhandlers: functions a create, update, delete, resume or field
function registers while it runs (@tether.subhandler, tether.register,
tether.execute), each tracked on its own. They run after the parent
returns (or where it awaits tether.execute), in the order registered. The
delivery is done when all are; until then it is retried, and the parent
runs again (registering them again), but the ones already done are not:
the ack's progress (Ack.progress, kept by the broker between the attempts
of one cause, in memory only) records them, with their patches and
results, which are written with the parent's OK."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from . import bindings, events, filters, hierarchies, kwargs, limits, outcome, patch as patches
from .delivery import decode
from .errors import ErrorsMode, PermanentError, TemporaryError
from .log import LOGGER
from .selectors import ABSENT, PRESENT

if TYPE_CHECKING:
    from .dispatch import Dispatcher
    from .registry import Registration
    from .v1 import broker_pb2 as pb

_REFUSED = {
    "timeout": "a subhandler runs within its parent's attempt, which the binding's timeout= bounds",
    "field": "register the subhandler under a field binding (@tether.on.field) instead",
    "value": "test the value in the parent before registering the subhandler",
    "old": "test the old value in the parent before registering the subhandler",
    "new": "test the new value in the parent before registering the subhandler",
    "param": "Tether's functions take no param=: close over the value",
}


class ChildrenRetry(TemporaryError):
    """Some subhandlers are not done: the parent's attempt is retried (after
    the soonest of their delays), and the done ones are not run again."""


@dataclasses.dataclass
class Sub:
    """One subhandler as its parent registered it in this attempt."""

    id: str
    fn: Callable[..., Any]
    errors: ErrorsMode | None
    retries: int | None
    backoff: float | None
    labels: Mapping[str, Any] | None
    annotations: Mapping[str, Any] | None
    checks: tuple[filters.Check, ...]


class Subhandling:
    """The subhandlers of one delivery to a parent: those registered in this
    attempt, and the progress of the attempts before it (from
    Delivery.progress) and of this one."""

    def __init__(self, dispatcher: Dispatcher, reg: Registration, d: pb.Delivery, values: dict[str, Any],
                 events: list[pb.HandlerEvent]):
        self.dispatcher, self.reg, self.delivery, self.events = dispatcher, reg, d, events
        self._values = values  # the parent's arguments; the object decoded only if it reads it
        self._decoded = False
        self.body = hierarchies.delivered_body(d.object, d.old_object)
        self.prefix = reg.spec.result_key or reg.spec.id
        self.registered: list[Sub] = []
        state = _load(d.progress)
        self.done: list[str] = state["done"]
        self.failed: dict[str, str] = state["failed"]
        self.retries: dict[str, int] = state["retries"]
        self.patch: dict[str, Any] = state["patch"]  # of the attempts before this one
        self.patch_now: dict[str, Any] = {}  # of the subhandlers done in this attempt

    def register(self, sub: Sub) -> None:
        if any(s.id == sub.id for s in self.registered):
            raise ValueError(f"subhandler id {sub.id!r} is already registered by this function; give one id=")
        self.registered.append(sub)

    def progress(self) -> bytes:
        """The progress JSON for a RETRY ack; empty when nothing is done."""
        if not (self.done or self.failed or self.retries):
            return b""
        return outcome.to_json({"done": self.done, "failed": self.failed, "retries": self.retries,
                                "patch": _merged(self.patch, self.patch_now)})

    def final_patch(self, parent: dict[str, Any]) -> dict[str, Any]:
        """What the parent's OK writes: the subhandlers' patches and results,
        those of this attempt after the parent's own."""
        if not (self.patch or self.patch_now):
            return parent
        return _merged(self.patch, parent, self.patch_now)

    async def execute(self) -> None:
        """Run the registered subhandlers not yet done, in order; raise
        ChildrenRetry when any is still to be retried."""
        finished = set(self.done) | set(self.failed)
        delays: list[float | None] = []
        messages = []
        for sub in self.registered:
            if sub.id in finished or self._filtered(sub):
                continue
            delay, message = await self._run(sub)
            if message is not None:
                delays.append(delay)
                messages.append(f"{sub.id}: {message}")
        if messages:
            self.patch = _merged(self.patch, self.patch_now)
            self.patch_now = {}
            delay = None if None in delays else min(d for d in delays if d is not None)
            raise ChildrenRetry(f"subhandlers not done: {'; '.join(messages)}", delay)

    @property
    def values(self) -> dict[str, Any]:
        """The parent's arguments, with the object decoded: a parent that
        reads none of it was called without (delivery.decode)."""
        if not self._decoded:
            self._decoded = True
            if not self._values["body"] and self.delivery.object:
                cause = decode(self.delivery, self.reg.spec, None)
                full = kwargs.values(cause, patch=self._values["patch"], logger=self._values["logger"],
                                     memo=self._values["memo"])
                self._values = dict(full, started=self._values["started"])
        return self._values

    def _filtered(self, sub: Sub) -> bool:
        meta = self.values["meta"]
        for source, wanted in (("labels", sub.labels), ("annotations", sub.annotations)):
            actual = meta.get(source) or {}
            for key, want in (wanted or {}).items():
                if callable(want) or want is PRESENT:
                    if key not in actual:
                        return True
                elif want is ABSENT and key in actual or want is not ABSENT and actual.get(key) != want:
                    return True
        return filters.failing(sub.checks, self.values) is not None

    async def _run(self, sub: Sub) -> tuple[float | None, str | None]:
        """Run one; None as the message when it is finished (done, or
        failed for good), else its delay and why it is retried."""
        patch = patches.Patch()
        n = self.retries.get(sub.id, 0)
        values = dict(self.values, patch=patch, retry=n)
        kw = kwargs.select(_declared(sub.fn), self.reg.spec.kind, values)
        mode = sub.errors or ErrorsMode.TEMPORARY  # as in Kopf: not the parent's
        try:
            result = await self._call(sub, kw)
        except PermanentError as e:
            return self._fail(sub, outcome.describe(e))
        except (asyncio.CancelledError, ChildrenRetry):
            raise
        except Exception as e:
            ours = isinstance(e, TemporaryError)
            if mode is ErrorsMode.IGNORED and not ours:
                self.values["logger"].warning("subhandler %s raised, ignored (errors=IGNORED): %s", sub.id,
                                              outcome.describe(e), exc_info=e)
                result = None
            elif mode is ErrorsMode.PERMANENT and not isinstance(e, TemporaryError):
                return self._fail(sub, outcome.describe(e))
            else:
                self.retries[sub.id] = n + 1
                if sub.retries is not None and n + 1 >= sub.retries:
                    return self._fail(sub, f"failed {n + 1} times, giving up: {outcome.describe(e)}")
                self.values["logger"].warning("subhandler %s will be retried: %s", sub.id, outcome.describe(e),
                                              exc_info=None if ours else e)
                return e.delay if ours else sub.backoff, outcome.describe(e)
        return self._succeed(sub, patches.pruned(patch), result)

    async def _call(self, sub: Sub, kw: dict[str, Any]) -> Any:
        # A subhandler registers no subhandlers of its own: its Handling has none.
        with hierarchies.handling(self.body, self.events):
            if asyncio.iscoroutinefunction(sub.fn):
                return await sub.fn(**kw)
            return await self.dispatcher.in_thread(sub.fn, kw)

    def _fail(self, sub: Sub, message: str) -> tuple[None, None]:
        """A subhandler failed for good: its parent still finishes (as in
        Kopf), and a Warning Event says which failed and why."""
        self.failed[sub.id] = outcome.truncate(message, 256)
        self.values["logger"].error("subhandler %s failed permanently: %s", sub.id, message)
        try:
            with hierarchies.handling(self.body, self.events):
                events.warn(self.body(), reason="SubhandlerFailed", message=f"subhandler {sub.id} failed: {message}")
        except ValueError as e:  # an object without apiVersion, kind or name
            self.values["logger"].debug("no Event for the failed subhandler %s: %s", sub.id, e)
        return None, None

    def _succeed(self, sub: Sub, patch: dict[str, Any], result: Any) -> tuple[None, None]:
        if result is not None and self.reg.spec.results == bindings.STATUS_RESULTS:
            patch = _merged(patch, {"status": {sub.id: result}})
        try:
            outcome.to_json(patch)
        except (TypeError, ValueError) as e:
            return self._fail(sub, f"its patch or return value is not JSON: {e}")
        self.done.append(sub.id)
        self.patch_now = _merged(self.patch_now, patch)
        return None, None


def _merged(*ps: dict[str, Any]) -> dict[str, Any]:
    """One merge patch doing what ps do one after the other."""
    out: dict[str, Any] = {}
    for p in ps:
        out = _compose(out, p)
    return out


def _compose(a: Any, b: Any) -> Any:
    if not isinstance(b, dict):
        return b
    if not isinstance(a, dict):
        # b replaces what a set; its nulls then remove nothing.
        return patches.merge({}, b)
    out = dict(a)
    for k, v in b.items():
        out[k] = _compose(a.get(k), v) if k in a else v
    return out


def _load(raw: bytes) -> dict[str, Any]:
    empty = {"done": [], "failed": {}, "retries": {}, "patch": {}}
    if not raw:
        return empty
    try:
        state = json.loads(raw)
    except ValueError:
        return empty
    if not isinstance(state, dict):
        return empty
    return {
        "done": [i for i in state.get("done") or [] if isinstance(i, str)],
        "failed": {k: str(v) for k, v in (state.get("failed") or {}).items()},
        "retries": {k: int(v) for k, v in (state.get("retries") or {}).items() if isinstance(v, int)},
        "patch": state.get("patch") if isinstance(state.get("patch"), dict) else {},
    }


def _declared(fn: Callable[..., Any]) -> frozenset[str] | None:
    """The arguments a subhandler declares: looked up at each run, since a
    parent makes new functions (closures) at each attempt."""
    return kwargs.declared(fn, kwargs.COMMON, "subhandlers")


def _current() -> Subhandling:
    now = hierarchies.current()
    subs = now.subs if now is not None else None
    if subs is None:
        raise TypeError("subhandlers are registered only by a create, update, delete, resume or field function "
                        "while it runs (not by event, timer, daemon, admission functions or subhandlers)")
    return subs


def subhandler(*, id: str | None = None, errors: ErrorsMode | None = None, retries: int | None = None,
               backoff: float | None = None, labels: Mapping[str, Any] | None = None,
               annotations: Mapping[str, Any] | None = None, when: Callable[..., bool] | None = None,
               **refused: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as a subhandler of the function that
    is running (Kopf's @kopf.subhandler): its id is "<parent's id>/<id or
    the function's name>"; errors=, retries= (attempts of its own) and
    backoff= are its own; labels=, annotations= and when= pass it over."""
    for name, value in refused.items():
        if name not in _REFUSED:
            raise TypeError(f"subhandler() got an unexpected keyword argument {name!r}")
        if value is not None:
            raise TypeError(f"subhandler(): {name}= is not supported: {_REFUSED[name]}")
    subs = _current()

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        checks = filters.collect(subs.reg.spec.kind, labels, annotations, when)
        sub_id = f"{subs.prefix}/{bindings.kopf_id(fn, id, None)}"
        subs.register(Sub(sub_id, fn, errors, retries, backoff, labels, annotations, checks))
        return fn
    return decorator


def register(fn: Callable[..., Any], *, id: str | None = None, **options: Any) -> Callable[..., Any]:
    """Register fn as a subhandler of the function that is running (Kopf's
    kopf.register): as @tether.subhandler(id=..., ...) on fn."""
    return subhandler(id=id, **options)(fn)


async def execute(*, fns: Mapping[str, Callable[..., Any]] | Iterable[Callable[..., Any]] | None = None,
                  **refused: Any) -> None:
    """Run subhandlers now, inside the (async) parent (Kopf's kopf.execute):
    fns (a mapping of ids to functions, or functions) are registered first;
    without fns, those registered with @tether.subhandler. Raises, to the
    parent, TemporaryError while any is not done."""
    for name, value in refused.items():
        if value is not None:
            raise TypeError(f"execute(): {name}= is not supported: pass fns=, or register the functions with "
                            "@tether.subhandler and call execute() without arguments")
    subs = _current()
    if isinstance(fns, Mapping):
        for sub_id, fn in fns.items():
            register(fn, id=sub_id)
    elif fns is not None:
        for fn in fns:
            register(fn)
    await subs.execute()


def bounded(ack: pb.Ack) -> pb.Ack:
    """The ack as it may go to a broker that keeps progress: a RETRY whose
    progress is past MAX_PROGRESS_BYTES is the FAIL that says so, its
    Events kept. A broker without CAPABILITY_PROGRESS gets no progress at
    all, so the size matters only where it is sent."""
    if len(ack.progress) <= limits.MAX_PROGRESS_BYTES:
        return ack
    why = (f"the subhandlers' progress (which are done, with their patches and results) is {len(ack.progress)} "
           f"bytes, more than the {limits.MAX_PROGRESS_BYTES} the broker keeps: patch and return less in "
           "subhandlers")
    LOGGER.error("delivery %s failed permanently: %s", ack.delivery_id, why)
    failed = outcome.fail(ack.delivery_id, why)
    failed.events.extend(ack.events)
    return failed
