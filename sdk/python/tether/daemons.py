"""Daemons: one long-running function per (binding, object UID), started
and stopped by the broker, as in the Go SDK. DAEMON_START is acked as soon
as the function runs; DAEMON_STOP sets its ``stopped`` flag and is acked
when the function has returned; when the broker stops waiting for that
(the cancellation timeout passed, and it sends Cancel for the stop), an
async daemon is cancelled. A daemon that returns or raises by itself is
reported with DaemonExited, which carries what its run put in ``patch`` and
its return value, as Kopf writes them after each run of a daemon. A sync daemon runs in a thread of its own and an async one in
a task, so daemons never take the window's threads."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import TYPE_CHECKING, Any

from . import durations, hierarchies, limits, outcome
from .delivery import MalformedDelivery
from .errors import ErrorsMode, PermanentError, TemporaryError
from .log import LOGGER, ObjectLogger
from .patch import Patch, pruned
from .registry import Registration
from .v1 import broker_pb2 as pb

if TYPE_CHECKING:
    from .session import Session

SHUTTING_DOWN = "handler shutting down"


class DaemonStopped:
    """The ``stopped`` argument of a sync daemon: ``while not stopped:``,
    ``stopped.is_set()``, ``stopped.wait(timeout)`` (True once stopped).
    ``reason`` says why."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None

    def is_set(self) -> bool:
        return self._event.is_set()

    __bool__ = is_set

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    def _set(self, reason: str) -> None:
        self.reason = self.reason or reason
        self._event.set()


class AsyncDaemonStopped:
    """The ``stopped`` argument of an async daemon: ``await stopped``,
    ``await stopped.wait(timeout)`` (True once stopped), ``is_set()``."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.reason: str | None = None

    def is_set(self) -> bool:
        return self._event.is_set()

    __bool__ = is_set

    async def wait(self, timeout: float | None = None) -> bool:
        if self._event.is_set():
            return True  # wait_for with a timeout of 0 would time out before looking
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def __await__(self) -> Any:
        return self._event.wait().__await__()

    def _set(self, reason: str) -> None:
        self.reason = self.reason or reason
        self._event.set()


@dataclasses.dataclass(eq=False)
class Daemon:
    key: tuple[str, str]  # (binding id, object UID)
    stopped: DaemonStopped | AsyncDaemonStopped
    done: asyncio.Future  # (the function's exception or None, its return value)
    log: ObjectLogger
    patch: Patch  # the function's patch, sent when it returns by itself
    task: asyncio.Task | None = None  # an async daemon's
    stopping: bool = False  # stopped on purpose
    stops: list[str] = dataclasses.field(default_factory=list)  # DAEMON_STOP ids to ack at the end

    def stop(self, reason: str) -> None:
        self.stopping = True
        self.stopped._set(reason)


class DaemonSet:
    """A session's daemons. Everything runs on the session's event loop."""

    def __init__(self, session: Session):
        self.session = session
        self.running: dict[tuple[str, str], Daemon] = {}

    def __len__(self) -> int:
        return len(self.running)

    def start(self, d: pb.Delivery, reg: Registration, log: ObjectLogger) -> None:
        s = self.session
        if not d.ref.uid:
            log.warning("daemon start without object uid")
            s.ack(outcome.fail(d.id, "daemon start without object uid"))
            return
        key = (reg.spec.id, d.ref.uid)
        if dm := self.running.get(key):
            if dm.stopping:
                log.warning("daemon start while the object's previous daemon is still stopping; asking to retry")
                s.ack(outcome.retry(d.id, "the previous daemon of this object is still stopping"))
            else:
                s.ack(outcome.ok(d.id))  # already running
            return
        if s.draining:
            s.ack(outcome.retry(d.id, SHUTTING_DOWN))
            return
        if s.full(d.id, log):
            return
        stopped = AsyncDaemonStopped() if reg.is_async else DaemonStopped()
        patch = Patch()
        try:
            _, dlog, kw = s.dispatcher.prepare(reg, d, stopped=stopped, patch=patch)
        except MalformedDelivery as e:
            log.error("malformed delivery: %s", e)
            s.ack(outcome.fail(d.id, f"malformed delivery: {e}"))
            return
        loop = asyncio.get_running_loop()
        owner = hierarchies.delivered_body(d.object)
        dm = Daemon(key=key, stopped=stopped, done=loop.create_future(), log=dlog, patch=patch)
        if reg.is_async:
            dm.task = loop.create_task(_run_async(reg, kw, dm.done, owner))
        else:
            threading.Thread(target=_run_sync, args=(reg, kw, dm.done, loop, owner), daemon=True,
                             name=f"tether-daemon-{reg.spec.id}-{d.ref.uid}").start()
        self.running[key] = dm
        dm.done.add_done_callback(lambda _: self._returned(dm))
        dlog.debug("daemon %s started", reg.spec.id)
        s.ack(outcome.ok(d.id))

    def stop(self, d: pb.Delivery, reg: Registration, log: ObjectLogger) -> None:
        s = self.session
        dm = self.running.get((reg.spec.id, d.ref.uid))
        if dm is None:
            log.debug("daemon stop for a daemon not running")
            s.ack(outcome.ok(d.id))
            return
        # While draining the daemon is stopping anyway: the stop waits for it.
        if not s.draining and s.full(d.id, log):
            return
        s.track(d, reg, log)  # the stop takes a window slot until the function returns
        dm.stops.append(d.id)
        dm.log.debug("stopping daemon %s", reg.spec.id)
        dm.stop("stopped by the broker")
        if dm.task is not None and reg.spec.cancellation_backoff > 0 and reg.spec.cancellation_timeout > 0:
            asyncio.get_running_loop().call_later(reg.spec.cancellation_backoff, self._cancel_after_backoff, dm)

    def _cancel_after_backoff(self, dm: Daemon) -> None:
        """Kopf's forced termination: an async daemon that has not returned
        within its cancellation_backoff of the stop is cancelled."""
        if dm.task is not None and not dm.done.done():
            dm.log.info("daemon %s has not returned within its cancellation_backoff of the stop: cancelling it",
                        dm.key[0])
            dm.task.cancel()

    def overdue(self, d: pb.Delivery, reason: str) -> None:
        """The broker stopped waiting for the stop d (the daemon's
        cancellation timeout passed). An async daemon is cancelled, so that
        it returns and the object's next start can run here; a thread cannot
        be, and starts are answered RETRY until it returns."""
        dm = self.running.get((d.binding_id, d.ref.uid))
        if dm is None:
            return
        if dm.task is None:
            dm.log.warning("daemon %s has not returned within its cancellation timeout (%s); a sync daemon cannot "
                           "be cancelled, and it starts again on this instance only once it returns",
                           dm.key[0], reason)
            return
        dm.log.warning("daemon %s has not returned within its cancellation timeout (%s); cancelling it",
                       dm.key[0], reason)
        dm.task.cancel()

    def stop_all(self, reason: str) -> None:
        for dm in self.running.values():
            dm.stop(reason)

    def abandon(self) -> None:
        """Forget the daemons that have not returned (the drain timeout ran
        out); async ones are cancelled, sync ones are left in their threads."""
        for dm in self.running.values():
            dm.log.warning("drain timeout: daemon %s has not returned; it ignores stopped", dm.key[0])
        self._forget()

    async def wait(self, timeout: float) -> None:
        """Wait for the stopping daemons, at most timeout, when the session
        is over; the broker starts them again after the next Welcome."""
        if not self.running:
            return
        _, pending = await asyncio.wait([dm.done for dm in self.running.values()], timeout=timeout)
        for dm in self.running.values():
            if dm.done in pending:
                dm.log.warning("daemon %s did not return within %ss after the session ended; it ignores stopped",
                               dm.key[0], timeout)
        self._forget()

    def _forget(self) -> None:
        for dm in self.running.values():
            if dm.task:
                dm.task.cancel()
        self.running.clear()

    def _returned(self, dm: Daemon) -> None:
        s = self.session
        if self.running.get(dm.key) is not dm:
            return  # abandoned
        del self.running[dm.key]
        s.changed.set()
        err, value = dm.done.result()
        if dm.stopping:
            if pruned(dm.patch) or value is not None:
                dm.log.warning("daemon %s was stopped: its patch and return value are not written (only a daemon "
                               "that returns by itself reports them)", dm.key[0])
            message = ""
            if err is not None:
                message = outcome.truncate(outcome.describe(err))
                dm.log.warning("daemon %s stopped with an error: %s", dm.key[0], message)
            else:
                dm.log.debug("daemon %s stopped", dm.key[0])
            for delivery_id in dm.stops:
                if s.untrack(delivery_id):
                    ack = outcome.ok(delivery_id)
                    ack.message = message
                    s.ack(ack)
            return
        exited = pb.DaemonExited(binding_id=dm.key[0], uid=dm.key[1])
        self._carry(exited, dm, value)
        if err is not None:
            exited.failed, exited.message = True, outcome.truncate(outcome.describe(err))
            if isinstance(err, TemporaryError) and err.delay is not None:
                exited.retry_after.CopyFrom(durations.to_proto(err.delay))
            dm.log.error("daemon %s returned by itself with an error: %s", dm.key[0], exited.message, exc_info=err)
        else:
            dm.log.info("daemon %s returned by itself", dm.key[0])
        s.send(pb.ConnectRequest(daemon_exited=exited))

    @staticmethod
    def _carry(exited: pb.DaemonExited, dm: Daemon, value: Any) -> None:
        """Put the run's patch and return value in its exit report, as an ack
        carries a function's; what cannot be sent is logged and left out."""
        ack = outcome.of_return("", pruned(dm.patch), value)
        if ack.outcome != pb.OUTCOME_OK:
            dm.log.error("daemon %s: nothing of its run is written: %s", dm.key[0], ack.message)
            return
        exited.patch, exited.result = ack.patch, ack.result
        if exited.ByteSize() > limits.DEFAULT_MAX_MESSAGE_BYTES - limits.MAX_MESSAGE:
            dm.log.error("daemon %s: its patch and return value are %d bytes, more than the broker takes in one "
                         "message; nothing of its run is written", dm.key[0], exited.ByteSize())
            exited.patch, exited.result = b"", b""


def failure(reg: Registration, e: Exception) -> Exception | None:
    """What the daemon's exception reports: none under errors=IGNORED (the
    daemon counts as having returned), unless it is one of Tether's."""
    if reg.spec.errors is ErrorsMode.IGNORED and not isinstance(e, (TemporaryError, PermanentError)):
        LOGGER.warning("daemon %s raised, ignored (errors=IGNORED): %s", reg.spec.id, outcome.describe(e), exc_info=e)
        return None
    return e


async def _run_async(reg: Registration, kw: dict[str, Any], done: asyncio.Future,
                     owner: hierarchies.Owner) -> None:
    value = None
    try:
        with hierarchies.handling(owner):
            value = await reg.fn(**kw)
        result = None
    except asyncio.CancelledError:
        result = None  # cancelled at the end of the session: a stop, not a failure
    except Exception as e:
        result = failure(reg, e)
    if not done.done():
        done.set_result((result, value))


def _run_sync(reg: Registration, kw: dict[str, Any], done: asyncio.Future, loop: asyncio.AbstractEventLoop,
              owner: hierarchies.Owner) -> None:
    value = None
    try:
        with hierarchies.handling(owner):
            value = reg.fn(**kw)
        result = None
    except Exception as e:
        result = failure(reg, e)

    def resolve() -> None:
        if not done.done():
            done.set_result((result, value))

    try:
        loop.call_soon_threadsafe(resolve)
    except RuntimeError:
        pass  # the loop is closed: the process is exiting and nobody waits
