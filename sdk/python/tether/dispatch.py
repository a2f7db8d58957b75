"""One delivery through one function: decode it, inject the keyword
arguments, call the function (a sync one in the thread pool, an async one
on the event loop) and make the ack. The session and tether.testing both
go through here, so a function behaves the same in tests and for real."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import Callable
from typing import Any

from . import admission, durations, filters, hierarchies, kwargs, log, outcome, subhandlers, tracing
from .bindings import Kind
from .delivery import Cause, MalformedDelivery, decode
from .indexing import Indices
from .memos import Memos
from .errors import AdmissionError, PermanentError, TemporaryError
from .patch import Patch, pruned
from .registry import Registration
from .v1 import broker_pb2 as pb
from .workers import Workers


class Dispatcher:
    """Runs functions; workers run the sync ones (None: the event loop's
    default executor); memos keeps each object's memo; handler names the
    handler in the functions' spans."""

    def __init__(self, workers: Workers | None = None, memos: Memos | None = None, indices: Indices | None = None,
                 handler: str = ""):
        self.workers = workers
        self.handler = handler
        self.memos = memos if memos is not None else Memos()
        self.indices = indices  # passed to functions by name

    def prepare(self, reg: Registration, d: pb.Delivery, **extra: Any) -> tuple[Cause, log.ObjectLogger, dict[str, Any]]:
        """The cause, the object's logger and the function's keyword
        arguments; raises MalformedDelivery."""
        cause, logger, values = self._values(reg, d, **extra)
        return cause, logger, kwargs.select(reg.wants, reg.spec.kind, values, self._indices())

    def _values(self, reg: Registration, d: pb.Delivery,
                **extra: Any) -> tuple[Cause, log.ObjectLogger, dict[str, Any]]:
        """The cause, the object's logger and every keyword argument of the
        binding's kind (the filter callables may read any of them)."""
        cause = decode(d, reg.spec, None if reg.checks else reg.wants)
        logger = log.for_object(cause.namespace, cause.name, binding=reg.spec.id, delivery=d.id,
                                **tracing.log_fields(d))
        extra.setdefault("patch", Patch())
        extra.setdefault("memo", self.memos.of(cause.uid))
        return cause, logger, kwargs.values(cause, logger=logger, **extra)

    def _indices(self) -> dict[str, Any]:
        return self.indices.kwargs() if self.indices is not None else {}

    def _filtered(self, reg: Registration, cause: Cause, logger: log.ObjectLogger, values: dict[str, Any]) -> bool:
        """Whether a filter callable says no; raises what the callable raises."""
        option = filters.failing(reg.checks, values)
        if option is not None:
            logger.debug("binding %s: %s does not match: %s answered without calling the function",
                         reg.spec.id, option, cause.reason)
        return option is not None

    async def call(self, reg: Registration, kw: dict[str, Any], d: pb.Delivery,
                   events: list[pb.HandlerEvent] | None = None, subs: subhandlers.Subhandling | None = None) -> Any:
        """reg's function with kw, for d: while it runs, d's object is the
        default owner of tether.adopt and the other object helpers,
        tether.event appends to events (None: it may not post any) and
        tether.subhandler to subs (None: it may register none); a sync
        function's thread gets a copy of the context."""
        with hierarchies.handling(hierarchies.delivered_body(d.object, d.old_object), events, subs):
            if reg.is_async:
                return await reg.fn(**kw)
            return await self.in_thread(reg.fn, kw)

    async def in_thread(self, fn: Callable[..., Any], kw: dict[str, Any]) -> Any:
        """fn(**kw), a sync function, in a thread with a copy of the context."""
        run = functools.partial(contextvars.copy_context().run, fn, **kw)
        if self.workers is not None:
            return await self.workers.run(run)
        return await asyncio.get_running_loop().run_in_executor(None, run)

    async def handle(self, reg: Registration, d: pb.Delivery) -> pb.Ack:
        """The ack for one delivery (any kind but daemon start and stop).
        Cancelling the task that awaits it (the broker's Cancel) interrupts
        an async function; the ack is then RETRY, whose outcome the broker
        ignores."""
        with tracing.handling(d, self.handler) as span:
            ack = await (self._review(reg, d) if reg.spec.kind.admission else self._handle(reg, d))
            span.ended(ack)
        return ack

    async def _handle(self, reg: Registration, d: pb.Delivery) -> pb.Ack:
        patch = Patch()
        try:
            cause, logger, values = self._values(reg, d, patch=patch)
        except MalformedDelivery as e:
            log.LOGGER.error("malformed delivery %s for %s: %s", d.id, reg.spec.id, e)
            return outcome.fail(d.id, f"malformed delivery: {e}")
        start = time.monotonic()
        error, events = None, []
        subs = subhandlers.Subhandling(self, reg, d, values, events) if reg.parent else None
        try:
            if self._filtered(reg, cause, logger, values):
                return outcome.ok(d.id)
            value = await self.call(reg, kwargs.select(reg.wants, reg.spec.kind, values, self._indices()), d, events,
                                    subs)
            if subs is not None and subs.registered:
                await subs.execute()  # those not yet run, after the function, as Kopf runs them
        except asyncio.CancelledError:
            ack = outcome.retry(d.id, "cancelled")
        except Exception as e:
            ack, error = outcome.of_error(d.id, e, reg.spec.errors, pruned(patch)), e
        else:
            ack = outcome.of_return(d.id, subs.final_patch(pruned(patch)) if subs else pruned(patch), value)
        if subs is not None and ack.outcome == pb.OUTCOME_RETRY:
            ack.progress = subs.progress()  # bounded where it is sent (subhandlers.bounded)
        # Whatever the outcome: Events say what happened on the way to it.
        ack.events.extend(events)
        _log_outcome(logger, reg, cause, ack, time.monotonic() - start, error)
        if _gone(reg, cause, ack):
            self.memos.forget(cause.uid)
        return ack

    async def _review(self, reg: Registration, d: pb.Delivery) -> pb.Ack:
        patch, warnings = Patch(), []
        try:
            cause, logger, values = self._values(reg, d, patch=patch, warnings=warnings)
        except MalformedDelivery as e:
            log.LOGGER.error("malformed review %s for %s: %s", d.id, reg.spec.id, e)
            return outcome.fail(d.id, f"malformed delivery: {e}")
        try:
            # A review the filters pass over is allowed, as one no binding matches.
            if not self._filtered(reg, cause, logger, values):
                await self.call(reg, kwargs.select(reg.wants, reg.spec.kind, values, self._indices()), d)
            resp = admission.allowed(reg.spec.kind, cause.original, pruned(patch), warnings)
        except AdmissionError as e:
            resp = admission.refusal(e, warnings)
        except asyncio.CancelledError:
            return outcome.fail(d.id, "cancelled")
        except Exception as e:
            logger.error("binding %s: review of %s failed; the binding's failure policy decides: %s", reg.spec.id,
                         cause.operation, outcome.describe(e),
                         exc_info=e if not isinstance(e, (admission.MutationError, PermanentError)) else None)
            return outcome.fail(d.id, outcome.describe(e))
        verdict = "allowed" if resp.allowed else f"refused ({resp.code or 403}: {resp.message})"
        logger.debug("binding %s: review of %s %s", reg.spec.id, cause.operation, verdict)
        return pb.Ack(delivery_id=d.id, outcome=pb.OUTCOME_OK, admission=resp)


def _gone(reg: Registration, cause: Cause, ack: pb.Ack) -> bool:
    """Whether the object's deletion is handled, so its memo can go: its
    delete function is done with it, or the watch saw it deleted."""
    if reg.spec.kind is Kind.DELETE:
        return ack.outcome != pb.OUTCOME_RETRY
    return reg.spec.kind is Kind.EVENT and cause.event_type == "DELETED"


def _log_outcome(logger: log.ObjectLogger, reg: Registration, cause: Cause, ack: pb.Ack, took: float,
                 error: Exception | None) -> None:
    """One line per delivery: debug for a success, with the traceback for an
    exception that is not one of Tether's."""
    what = f"binding {reg.spec.id}: {cause.reason}"
    ours = isinstance(error, (TemporaryError, PermanentError))
    if ack.outcome == pb.OUTCOME_OK and error is not None:
        logger.warning("%s raised, ignored (errors=IGNORED): %s", what, outcome.describe(error), exc_info=error)
    elif ack.outcome == pb.OUTCOME_OK:
        logger.debug("%s handled in %.3fs", what, took)
    elif ack.outcome == pb.OUTCOME_RETRY:
        after = f" in {durations.from_proto(ack.retry_after):g}s" if ack.HasField("retry_after") else ""
        logger.warning("%s will be retried%s: %s", what, after, ack.message, exc_info=None if ours else error)
    else:
        logger.error("%s failed permanently: %s", what, ack.message, exc_info=None if ours else error)
