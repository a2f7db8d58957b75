"""A fake broker for unit tests, without a cluster: the Python twin of the
Go SDK's sdktest. It delivers a create, update, delete, resume, field
change, event, tick or admission review of an object (a plain dict) to the
registered function, through the same dispatch code the real session uses,
and gives back what the function answered as plain values::

    from tether.testing import FakeBroker

    def test_create_labels_the_widget():
        got = FakeBroker(registry).create(widget("w1", size=3))
        assert got.outcome == "ok"
        assert got.patch == {"metadata": {"labels": {"seen": "yes"}}}

The calls run the functions on one event loop of the FakeBroker's, kept
from the first delivery to close() (or the end of a ``with FakeBroker(...)``
block), so that tasks a function starts live on; call them from plain (not
async) test functions. A FakeBroker keeps no state of the broker's between
calls. It plays only the broker's deliveries: selectors, CEL, holds and
retries are the broker's, tested by the broker's own suites."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import itertools
import json
import os
import sys
import types
import weakref
from collections.abc import Coroutine
from typing import Any, TypeVar

from . import durations, essence, files, outcome, subhandlers
from .bindings import Kind, Spec
from .daemons import AsyncDaemonStopped, DaemonStopped, failure
from .dispatch import Dispatcher
from .clirunner import TetherRunner
from .memos import Memos
from .types import Memo
from .registry import Registration, Registry, get_default_registry, set_default_registry
from .v1 import broker_pb2 as pb

OK, RETRY, FAIL = "ok", "retry", "fail"
T = TypeVar("T")
TIMEOUT = 10.0  # deliveries carry a deadline this far ahead, in seconds

_DELIVERY_KINDS = {
    Kind.CREATE: pb.DELIVERY_KIND_CREATE, Kind.UPDATE: pb.DELIVERY_KIND_UPDATE, Kind.DELETE: pb.DELIVERY_KIND_DELETE,
    Kind.RESUME: pb.DELIVERY_KIND_RESUME, Kind.FIELD: pb.DELIVERY_KIND_FIELD, Kind.EVENT: pb.DELIVERY_KIND_EVENT,
    Kind.TIMER: pb.DELIVERY_KIND_TICK,
}


@dataclasses.dataclass(frozen=True)
class Result:
    """What a function answered to one delivery."""

    binding: str
    outcome: str  # OK, RETRY or FAIL
    message: str = ""  # why, for RETRY and FAIL
    delay: float | None = None  # the retry delay a TemporaryError asked for; None: the backoff
    patch: dict[str, Any] | None = None  # the merge patch (status included), None when none
    result: Any = None  # the return value, as the broker stores it (decoded JSON)
    # the Kubernetes Events posted (tether.event and its kin), each a dict of
    # type, reason, message and regarding (apiVersion, kind, namespace, name, uid)
    events: tuple[dict[str, Any], ...] = ()


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What a validate or mutate function answered to one review."""

    binding: str
    outcome: str  # OK: it answered; FAIL: it failed, and the binding's failure policy decides
    allowed: bool = False
    code: int | None = None  # a refusal's HTTP status (403 unless AdmissionError gave one)
    message: str = ""  # a refusal's message, or the failure's
    warnings: tuple[str, ...] = ()
    patch: list[dict[str, Any]] | None = None  # a mutate function's RFC 6902 JSON patch


@dataclasses.dataclass(frozen=True)
class Handler:
    """A handler file loaded by load(): its module and its own registry."""

    registry: Registry
    module: types.ModuleType


# Kopf's name for the runner of a real handler in a test, so that a ported
# test imports it as it is.
KopfRunner = TetherRunner

_loads = itertools.count(1)


def load(path: str) -> Handler:
    """Import a handler file with a registry of its own, which its
    decorators use instead of the default one, so that several files (or
    one file twice) load in one test process without their default binding
    ids colliding. As for ``python3 -m tether run``, the file's folder goes
    first on sys.path, so that it imports its siblings; the module is
    ``tether_testing_<n>_<file name>`` in sys.modules."""
    name = f"tether_testing_{next(_loads)}_{os.path.splitext(os.path.basename(path))[0]}"
    registry = Registry()
    previous = set_default_registry(registry)
    try:
        module = files.import_file(path, name)
    finally:
        set_default_registry(previous)
    return Handler(registry, module)


class FakeBroker:
    """Deliveries to the functions of registry (default: the decorators'
    default registry). Methods take ``binding=`` (a binding id) when
    several bindings of the kind could take the object. memo is the
    process's, of which each object's memo is a copy, as
    tether.operator(memo=) is. trace_context is what every delivery carries
    in Delivery.trace_context, as from a broker that traces
    ({"traceparent": "00-<trace id>-<span id>-01"}): the functions' log
    lines then name the trace, and with opentelemetry importable they run
    in a span of it (docs/observability.md, "Traces")."""

    def __init__(self, registry: Registry | None = None, *, memo: Memo | None = None,
                 trace_context: dict[str, str] | None = None):
        self.registry = registry if registry is not None else get_default_registry()
        self.trace_context = dict(trace_context or {})
        self._ids = itertools.count(1)
        self._dispatcher = Dispatcher(memos=Memos(memo), indices=self.registry.indices)
        self.registry.indices.complete.set()  # nothing waits: the test feeds the indices itself
        # One event loop for all the deliveries, made at the first: tasks a
        # function starts live on to the next, until close().
        self._loop: asyncio.AbstractEventLoop | None = None
        self._finalizer: weakref.finalize | None = None
        self._progress: dict[tuple[str, str], bytes] = {}  # a RETRY's, by binding and object uid

    def __enter__(self) -> FakeBroker:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def close(self) -> None:
        """Cancel the tasks the functions left running and close the event
        loop; the next delivery makes a new one."""
        if self._finalizer is not None and self._finalizer.detach() is not None:
            _close(self._loop)
        self._loop = self._finalizer = None

    @property
    def binding_ids(self) -> list[str]:
        return [reg.spec.id for reg in self.registry]

    def index(self, obj: dict[str, Any], type: str = "ADDED", *, index: str | None = None) -> None:
        """What the broker's stream of an index binding sends: obj enters or
        changes in (ADDED, MODIFIED) or leaves (DELETED) the indices of its
        resource, or the one named index; the functions then get them."""
        indexers = [i for i in self.registry.indices.by_binding.values() if index in (None, i.name)]
        if not indexers:
            raise LookupError(f"no index named {index!r}" if index else "no index registered")
        for i in indexers:
            self._run(self.registry.indices.take(i.binding_id, type, obj, False))

    @property
    def indices(self) -> dict[str, Any]:
        """The indices by name, as the functions get them."""
        return self.registry.indices.kwargs()

    def create(self, obj: dict[str, Any], *, binding: str | None = None, attempt: int = 1) -> Result:
        return self._lifecycle(Kind.CREATE, obj, binding, attempt)

    def update(self, old: dict[str, Any], new: dict[str, Any], *, binding: str | None = None,
               attempt: int = 1) -> Result:
        """The change of old into new, with the broker's diff of their essences."""
        return self._lifecycle(Kind.UPDATE, new, binding, attempt, old=old)

    def delete(self, obj: dict[str, Any], *, binding: str | None = None, attempt: int = 1) -> Result:
        return self._lifecycle(Kind.DELETE, obj, binding, attempt)

    def resume(self, obj: dict[str, Any], *, binding: str | None = None, attempt: int = 1) -> Result:
        return self._lifecycle(Kind.RESUME, obj, binding, attempt)

    def field(self, old: dict[str, Any], new: dict[str, Any], *, binding: str | None = None,
              attempt: int = 1) -> Result:
        """The change of old into new, to a field binding: old and new are the field's values."""
        return self._lifecycle(Kind.FIELD, new, binding, attempt, old=old)

    def event(self, obj: dict[str, Any], type: str = "MODIFIED", *, binding: str | None = None,
              attempt: int = 1) -> Result:
        return self._lifecycle(Kind.EVENT, obj, binding, attempt, event_type=type)

    def tick(self, obj: dict[str, Any], *, binding: str | None = None, attempt: int = 1,
             scheduled: datetime.datetime | None = None) -> Result:
        """A tick of obj's timer, due at scheduled (an aware datetime; default now)."""
        return self._lifecycle(Kind.TIMER, obj, binding, attempt, scheduled=scheduled)

    def daemon(self, obj: dict[str, Any], *, stop_after: float | None = 0.0, reason: str = "stopped by the test",
               binding: str | None = None, attempt: int = 1) -> Result:
        """obj's daemon, run until the function returns: its ``stopped`` is
        set with reason stop_after seconds after it starts (0: at once; None:
        never, for a daemon that returns by itself). outcome is OK when the
        function returned and FAIL, with the message, when it raised; the
        broker keeps no result of a daemon. A daemon that has not returned
        TIMEOUT seconds after its stop is a TimeoutError (an async one is
        cancelled; a sync one is left in its thread)."""
        reg = self._binding(Kind.DAEMON, obj, binding)
        d = self._delivery(reg, pb.DELIVERY_KIND_DAEMON_START, obj, attempt)
        stopped = AsyncDaemonStopped() if reg.is_async else DaemonStopped()
        _, _, kw = self._dispatcher.prepare(reg, d, stopped=stopped)

        async def run() -> BaseException | None:
            """The function's exception, None when it returned."""
            stop = None if stop_after is None else asyncio.get_running_loop().call_later(stop_after, stopped._set, reason)
            call = asyncio.ensure_future(self._dispatcher.call(reg, kw, d))
            done, _ = await asyncio.wait({call}, timeout=None if stop_after is None else stop_after + TIMEOUT)
            if stop:
                stop.cancel()
            if not done:
                call.cancel()
                raise TimeoutError(f"daemon {reg.spec.id} did not return within {TIMEOUT}s after stopped was set")
            return call.exception()

        error = self._run(run())
        if error is not None and failure(reg, error) is not None:
            return Result(binding=reg.spec.id, outcome=FAIL, message=outcome.describe(error))
        return Result(binding=reg.spec.id, outcome=OK)

    def validate(self, obj: dict[str, Any] | None, *, old: dict[str, Any] | None = None, operation: str = "CREATE",
                 binding: str | None = None, **review: Any) -> Verdict:
        """A review of operation on obj (old: the object before, for UPDATE
        and DELETE). review: subresource=, dry_run=, user=, groups=."""
        return self._review(Kind.VALIDATE, obj, old, operation, binding, **review)

    def mutate(self, obj: dict[str, Any] | None, *, old: dict[str, Any] | None = None, operation: str = "CREATE",
               binding: str | None = None, **review: Any) -> Verdict:
        return self._review(Kind.MUTATE, obj, old, operation, binding, **review)

    def _lifecycle(self, kind: Kind, obj: dict[str, Any], binding: str | None, attempt: int,
                   old: dict[str, Any] | None = None, event_type: str = "",
                   scheduled: datetime.datetime | None = None) -> Result:
        reg = self._binding(kind, obj, binding)
        d = self._delivery(reg, _DELIVERY_KINDS[kind], obj, attempt)
        d.event_type = event_type
        if kind is Kind.TIMER:
            if scheduled is None:
                d.scheduled.GetCurrentTime()
            else:
                d.scheduled.FromDatetime(scheduled)
        if old is not None:
            before = essence.essence(old)
            d.old_object = _json(before)
            for item in essence.diff(before, essence.essence(obj)):
                d.diff.add(operation=pb.DiffEntry.Operation.Value("OPERATION_" + item.operation.upper()),
                           path=item.field, old_value=_json(item.old), new_value=_json(item.new))
            if kind is Kind.FIELD:
                d.field_old = _json(essence.field(before, reg.spec.field))
                d.field_new = _json(essence.field(obj, reg.spec.field))
        # As the broker: a RETRY's progress (the subhandlers done) comes
        # back with the next attempt of the same binding and object.
        key = (reg.spec.id, d.ref.uid)
        if attempt > 1:
            d.progress = self._progress.get(key, b"")
        ack = subhandlers.bounded(self._ack(reg, d))  # a broker that keeps progress
        if ack.outcome == pb.OUTCOME_RETRY and ack.progress:
            self._progress[key] = ack.progress
        else:
            self._progress.pop(key, None)
        return Result(binding=reg.spec.id, outcome=outcome.name(ack.outcome), message=ack.message,
                      delay=durations.from_proto(ack.retry_after) if ack.HasField("retry_after") else None,
                      patch=json.loads(ack.patch) if ack.patch else None,
                      result=json.loads(ack.result) if ack.result else None,
                      events=tuple(_event(e) for e in ack.events))

    def _review(self, kind: Kind, obj: dict[str, Any] | None, old: dict[str, Any] | None, operation: str,
                binding: str | None, subresource: str = "", dry_run: bool = False, user: str = "tether-testing",
                groups: tuple[str, ...] = ("system:authenticated",)) -> Verdict:
        if operation.upper() not in ("CREATE", "UPDATE", "DELETE", "CONNECT"):
            raise ValueError(f"operation {operation!r} is not CREATE, UPDATE, DELETE or CONNECT")
        subject = obj if obj is not None else old or {}
        reg = self._binding(kind, subject, binding)
        d = self._delivery(reg, pb.DELIVERY_KIND_ADMISSION, obj, 1, ref_obj=subject)
        if old is not None:
            d.old_object = _json(old)
        d.admission.CopyFrom(pb.AdmissionRequest(
            uid=f"testing-review-{d.id}", operation=pb.AdmissionOperation.Value("ADMISSION_OPERATION_" + operation.upper()),
            sub_resource=subresource, dry_run=dry_run, user_name=user, user_groups=list(groups),
            request=_json({"operation": operation.upper(), "dryRun": dry_run, "subResource": subresource,
                           "userInfo": {"username": user, "groups": list(groups)}})))
        ack = self._ack(reg, d)
        if ack.outcome != pb.OUTCOME_OK:
            return Verdict(binding=reg.spec.id, outcome=outcome.name(ack.outcome), message=ack.message)
        a = ack.admission
        return Verdict(binding=reg.spec.id, outcome=OK, allowed=a.allowed, code=None if a.allowed else a.code or 403,
                       message=a.message, warnings=tuple(a.warnings), patch=json.loads(a.patch) if a.patch else None)

    def _binding(self, kind: Kind, obj: dict[str, Any], binding: str | None) -> Registration:
        if binding is not None:
            reg = self.registry.get(binding)
            if reg is None:
                raise LookupError(f"no binding {binding!r}; the bindings are {self.binding_ids}")
            if reg.spec.kind is not kind:
                raise LookupError(f"binding {binding!r} is a {reg.spec.kind.value} binding, not {kind.value}")
            return reg
        regs = [r for r in self.registry if r.spec.kind is kind and _matches(r, obj)]
        if len(regs) != 1:
            raise LookupError(f"{len(regs)} {kind.value} bindings for {obj.get('apiVersion', '?')} "
                              f"{obj.get('kind', '?')} ({[r.spec.id for r in regs]}): name one with binding=")
        return regs[0]

    def _delivery(self, reg: Registration, kind: int, obj: dict[str, Any] | None, attempt: int,
                  ref_obj: dict[str, Any] | None = None) -> pb.Delivery:
        subject = ref_obj if ref_obj is not None else obj or {}
        meta = subject.get("metadata") or {}
        s = reg.spec
        d = pb.Delivery(
            id=f"testing-{next(self._ids)}", binding_id=s.id, kind=kind, attempt=attempt,
            object=_json(obj) if obj is not None else b"",
            ref=pb.ObjectRef(
                resource=_resource(s, subject),
                namespace=meta.get("namespace", ""), name=meta.get("name", ""), uid=meta.get("uid", ""),
                resource_version=meta.get("resourceVersion", "")))
        d.deadline.FromDatetime(datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=TIMEOUT))
        d.trace_context.update(self.trace_context)
        return d

    def _ack(self, reg: Registration, d: pb.Delivery) -> pb.Ack:
        return self._run(self._dispatcher.handle(reg, d))

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run coro on the FakeBroker's event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coro.close()
            raise RuntimeError("tether.testing runs the deliveries on an event loop of its own: "
                               "call it from a plain (not async) test function")
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._finalizer = weakref.finalize(self, _abandon, self._loop)
        return self._loop.run_until_complete(coro)


def _event(e: pb.HandlerEvent) -> dict[str, Any]:
    r = e.regarding
    return {"type": "Warning" if e.type == pb.HandlerEvent.TYPE_WARNING else "Normal", "reason": e.reason,
            "message": e.message, "regarding": {"apiVersion": r.api_version, "kind": r.kind,
                                                "namespace": r.namespace, "name": r.name, "uid": r.uid}}


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """What asyncio.run does at its end: cancel the tasks left, let them
    finish, stop async generators and the default executor, close. A
    FakeBroker closed while a loop runs in this thread (a test's own, say)
    cannot run its loop then, and only closes it."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        loop.close()
        return
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.run_until_complete(loop.shutdown_default_executor())
    loop.close()


def _abandon(loop: asyncio.AbstractEventLoop) -> None:
    """Close the loop of a FakeBroker collected without close(), waiting
    for nothing: the collector runs in whichever thread allocates, even
    inside the threading module's bookkeeping of a thread starting, where
    waiting for the loop's tasks or its executor's threads (as _close does)
    deadlocks. Closing stops the executor without joining its threads."""
    if not loop.is_running() and not loop.is_closed():
        loop.close()


def _matches(reg: Registration, obj: dict[str, Any]) -> bool:
    """Whether obj is of reg's resource, as well as it can be told without
    discovery: by group and version as the binding names them, then by kind,
    by the plural the API server would make of obj's kind, or by a name that
    is either (a short name matches nothing here: pass binding=). An object
    without apiVersion and kind matches every binding."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not api_version or not kind:
        return True
    group, _, version = api_version.rpartition("/")
    s = reg.spec
    any_group = bool(s.name) and not s.group and not s.version
    if not any_group and (group != s.group or (s.version and version != s.version)):
        return False
    if s.resource_kind:
        return s.resource_kind == kind
    if s.plural:
        return s.plural == _plural(kind)
    return s.name in (kind, kind.lower(), _plural(kind)) or s.name.lower() == kind.lower()


def _resource(s: Spec, obj: dict[str, Any]) -> pb.Resource:
    """The resource a broker would have resolved s to, for obj."""
    group, _, version = (obj.get("apiVersion") or "").rpartition("/")
    kind = obj.get("kind") or s.resource_kind
    return pb.Resource(group=group if obj.get("apiVersion") else s.group, version=version or s.version,
                       resource=s.plural or (_plural(kind) if kind else s.name), kind=kind,
                       namespaced=bool((obj.get("metadata") or {}).get("namespace")))


def _plural(kind: str) -> str:
    """The plural the API server makes of a kind that declares none."""
    plural = kind.lower()
    if plural.endswith(("s", "x", "ch", "sh")):
        return plural + "es"
    if plural.endswith("y") and not plural.endswith("ey"):
        return plural[:-1] + "ies"
    return plural + "s"


def _json(value: Any) -> bytes:
    return b"" if value is None else json.dumps(value, separators=(",", ":")).encode()
