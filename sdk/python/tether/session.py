"""One Connect stream, as test/python/handler.py and the Go SDK run it:
Hello, Welcome, then deliveries in and acks out, never more in flight than
the window; on stopping, daemons stop, Goodbye goes as soon as none runs,
the deliveries in flight are acked (up to the drain timeout), and our side
of the stream closes. Everything runs on one event loop: the reader task
takes the broker's messages, the writer task is the only one that writes."""

from __future__ import annotations

import asyncio
import json
import dataclasses
from collections.abc import Callable
from typing import Any

import grpc

from . import capabilities, outbox, outcome, subhandlers, tracing
from .daemons import SHUTTING_DOWN, DaemonSet
from .dispatch import Dispatcher
from .errors import RejectedError
from .log import LOGGER, ObjectLogger, for_object
from .registry import Registration, Registry
from .v1 import broker_pb2 as pb
from .v1 import broker_pb2_grpc as pb_grpc

WELCOME_TIMEOUT = 30.0  # the broker answers Hello well within this
CLOSE_TIMEOUT = 5.0  # for the broker to end the stream after our side closed
# Codes with which the broker refuses a Hello: retrying cannot help.
REJECTED = frozenset({
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.FAILED_PRECONDITION,
})
_CLOSE = object()  # outbox marker: end the request stream

# The kinds of binding each delivery kind may go to: lifecycle deliveries
# to any lifecycle binding (as the Go SDK has it), the others to their own.
_LIFECYCLE = frozenset({"create", "update", "delete", "resume", "field", "event"})
_FITS = {
    pb.DELIVERY_KIND_CREATE: _LIFECYCLE, pb.DELIVERY_KIND_UPDATE: _LIFECYCLE, pb.DELIVERY_KIND_DELETE: _LIFECYCLE,
    pb.DELIVERY_KIND_RESUME: _LIFECYCLE, pb.DELIVERY_KIND_FIELD: _LIFECYCLE, pb.DELIVERY_KIND_EVENT: _LIFECYCLE,
    pb.DELIVERY_KIND_TICK: {"timer"}, pb.DELIVERY_KIND_DAEMON_START: {"daemon"},
    pb.DELIVERY_KIND_DAEMON_STOP: {"daemon"}, pb.DELIVERY_KIND_ADMISSION: {"validate", "mutate"},
}


class SessionEnded(Exception):
    """The stream ended; the runner reconnects. code: the status it ended
    with, None when it ended otherwise."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None):
        super().__init__(message)
        self.code = code


def _kind_name(kind: int) -> str:
    try:
        return pb.DeliveryKind.Name(kind)
    except ValueError:  # a kind newer than these stubs
        return str(kind)


@dataclasses.dataclass(eq=False)
class Call:
    """A delivery in flight: a function running, or a daemon stop waiting."""

    delivery: pb.Delivery
    reg: Registration
    log: ObjectLogger
    task: asyncio.Task | None = None


class Session:
    def __init__(self, hello: pb.Hello, registry: Registry, dispatcher: Dispatcher, drain_timeout: float,
                 on_welcome: Callable[[], None] | None = None):
        self.hello = hello
        self.on_welcome = on_welcome  # told when the broker welcomes the handler
        self.registry = registry
        self.dispatcher = dispatcher
        self.drain_timeout = drain_timeout
        self.window = hello.window
        self.welcomed = False
        # A replica that does not lead took the session for admission
        # reviews only (Welcome.reviews_only, CAPABILITY_EVERY_REPLICA).
        self.reviews_only = False
        self.offered = capabilities.BrokerCapabilities()  # by the Welcome
        self.draining = False
        self.inflight: dict[str, Call] = {}
        self.daemons = DaemonSet(self)
        self.outbox: asyncio.Queue = asyncio.Queue()
        self.changed = asyncio.Event()  # an ack went out or a daemon returned: the drain looks again
        self.indices = registry.indices
        self.indexed: asyncio.Queue = asyncio.Queue()  # the index streams' messages, taken in order
        self.side: set[asyncio.Task] = set()  # the index work and what waits for it; cancelled at teardown

    def send(self, req: object) -> None:
        self.outbox.put_nowait(req)

    def ack(self, ack: pb.Ack) -> None:
        if ack.events and self.offered.lacks(pb.CAPABILITY_HANDLER_EVENTS):
            LOGGER.warning("the broker does not post handler events; dropping the %d of delivery %s",
                           len(ack.events), ack.delivery_id)
            del ack.events[:]
        if ack.progress and self.offered.lacks(pb.CAPABILITY_PROGRESS):
            LOGGER.debug("the broker keeps no progress; the subhandlers done in delivery %s will run again",
                         ack.delivery_id)
            ack.progress = b""
        self.send(outcome.request(subhandlers.bounded(ack)))

    async def run(self, channel: grpc.aio.Channel, stopping: asyncio.Event) -> None:
        """Serve one stream: return once stopping is set and the stream is
        drained (or stopping came before Welcome); raise RejectedError when
        the broker refuses the Hello, SessionEnded when the stream ends."""
        call = pb_grpc.BrokerServiceStub(channel).Connect()
        writer = asyncio.create_task(self._write(call))
        reader = None
        self.send(pb.ConnectRequest(hello=self.hello))
        try:
            welcome = await self._first(call, stopping)
            if welcome is None:
                return
            self._welcome(welcome)
            reader = asyncio.create_task(self._read(call))
            stop = asyncio.create_task(stopping.wait())
            await asyncio.wait({reader, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if reader.done():
                raise reader.result()
            await self._drain(reader)
        finally:
            await self._teardown(call, writer, reader)

    async def _first(self, call: grpc.aio.StreamStreamCall, stopping: asyncio.Event) -> pb.Welcome | None:
        """The Welcome; None when stopping comes first (until the broker
        welcomes us, stopping is immediate)."""
        read = asyncio.ensure_future(call.read())
        stop = asyncio.ensure_future(stopping.wait())
        done, _ = await asyncio.wait({read, stop}, timeout=WELCOME_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if read not in done:
            read.cancel()
            if stop in done:
                return None
            raise SessionEnded(f"no Welcome from the broker within {WELCOME_TIMEOUT:.0f}s")
        try:
            msg = read.result()
        except grpc.aio.AioRpcError as e:
            if e.code() in REJECTED:
                raise RejectedError(self.hello.handler, e.code().name, e.details() or "") from None
            raise SessionEnded(f"{e.code().name}: {e.details()}", e.code()) from None
        if msg is grpc.aio.EOF:
            raise SessionEnded("the broker ended the stream before Welcome")
        if msg.WhichOneof("message") != "welcome":
            raise SessionEnded(f"protocol error: the broker sent {msg.WhichOneof('message')} before Welcome")
        return msg.welcome

    def _welcome(self, w: pb.Welcome) -> None:
        self.welcomed = True
        self.reviews_only = w.reviews_only
        self.offered = capabilities.BrokerCapabilities.from_welcome(w)
        if not self.reviews_only:
            self._lead()
        if 0 < w.window < self.window:
            self.window = w.window
        LOGGER.info("connected to the broker (version %s) as %s/%s: session %s, window %d, capabilities %s%s",
                    w.broker_version or "?", self.hello.handler, self.hello.instance_id, w.session_id, self.window,
                    ", ".join(self.offered.names()),
                    "; a replica that does not lead: reviews only" if self.reviews_only else "")
        for b, r in zip(self.hello.bindings, w.resources):
            LOGGER.debug("binding %s: %s/%s %s (kind %s, namespaced %s)", b.id, r.group or "core", r.version,
                         r.resource, r.kind, r.namespaced)

    def _lead(self) -> None:
        """What a full session's Welcome starts; a reviews-only session's
        replica sends no index and says nothing of the leader's offer, and
        its Welcome does not make the handler ready."""
        capabilities._welcomed(self.offered)
        # Deliveries, and the readiness on_welcome tells, wait until every
        # index has the whole list (Kopf's guarantee).
        self.indices.begin()
        self._side(self._index())
        if self.on_welcome:
            on_welcome = self.on_welcome
            if self.indices.complete.is_set():
                on_welcome()
            else:
                self._side(self.indices.complete.wait()).add_done_callback(
                    lambda t: on_welcome() if not t.cancelled() else None)

    async def _read(self, call: grpc.aio.StreamStreamCall) -> SessionEnded:
        """Take the broker's messages until the stream ends, and say how."""
        while True:
            try:
                msg = await call.read()
            except grpc.aio.AioRpcError as e:
                return SessionEnded(f"{e.code().name}: {e.details()}", e.code())
            if msg is grpc.aio.EOF:
                return SessionEnded("the broker ended the stream")
            which = msg.WhichOneof("message")
            if which == "delivery":
                self._accept(msg.delivery)
            elif which == "delivery_batch":
                # One read for several deliveries: each as if it came alone.
                for d in msg.delivery_batch.deliveries:
                    self._accept(d)
            elif which == "cancel":
                self._cancel(msg.cancel)
            elif which == "indexed" and not self.reviews_only:
                self.indexed.put_nowait(msg.indexed)
            else:
                LOGGER.warning("ignoring a %s message", which or "message this SDK does not know")

    async def _write(self, call: grpc.aio.StreamStreamCall) -> None:
        """Write the outbox in order. What waits there when the writer
        looks (put in the same turn of the loop, or during the previous
        write) goes together: its acks as batches when the broker has them
        (outbox.writes)."""
        while True:
            items = [await self.outbox.get()]
            while not self.outbox.empty():
                items.append(self.outbox.get_nowait())
            # The writer starts before the Welcome says what the broker has.
            batching = self.offered.has(pb.CAPABILITY_ACK_BATCH)
            for item in outbox.writes(items, batching):
                try:
                    if item is _CLOSE:
                        await call.done_writing()
                        return
                    await call.write(item)
                except (grpc.RpcError, asyncio.InvalidStateError) as e:
                    # The stream is over; the reader reports how it ended.
                    LOGGER.debug("cannot write to the stream: %s", e)
                    return

    def _accept(self, d: pb.Delivery) -> None:
        """Start a delivery, or ack it at once when it cannot run."""
        log = for_object(d.ref.namespace, d.ref.name, LOGGER, binding=d.binding_id, delivery=d.id,
                         **tracing.log_fields(d))
        if not d.id:
            log.warning("dropping a delivery without id")
            return
        if d.id in self.inflight:
            log.warning("delivery %s already in flight; the running attempt will ack it", d.id)
            return
        fits = _FITS.get(d.kind)
        if self.reviews_only and d.kind != pb.DELIVERY_KIND_ADMISSION:
            log.warning("a %s delivery on a session for reviews only", _kind_name(d.kind))
            self.ack(outcome.fail(d.id, f"this session was taken for admission reviews only; "
                                        f"it does not take {_kind_name(d.kind)} deliveries"))
            return
        if fits is None:
            log.warning("delivery kind %s is not supported by this SDK", _kind_name(d.kind))
            self.ack(outcome.fail(d.id, f"delivery kind {_kind_name(d.kind)} is not supported by this SDK "
                                        f"({self.hello.sdk})"))
            return
        reg = self.registry.get(d.binding_id)
        if reg is None:
            log.warning("delivery for binding %r, which this instance did not declare", d.binding_id)
            self.ack(outcome.fail(d.id, f"binding {d.binding_id!r} is not declared by this instance"))
            return
        if reg.spec.kind.value not in fits:
            log.warning("a %s delivery does not fit the %s binding %s", _kind_name(d.kind),
                        reg.spec.kind.value, reg.spec.id)
            self.ack(outcome.fail(d.id, f"binding {reg.spec.id!r} is a {reg.spec.kind.value} binding; "
                                        f"it does not take {_kind_name(d.kind)} deliveries"))
            return
        if not self.indices.complete.is_set():
            self._side(self._when_indexed(d))
            return
        if d.kind == pb.DELIVERY_KIND_DAEMON_START:
            self.daemons.start(d, reg, log)
        elif d.kind == pb.DELIVERY_KIND_DAEMON_STOP:
            self.daemons.stop(d, reg, log)
        elif self.draining:
            self.ack(outcome.retry(d.id, SHUTTING_DOWN))
        elif not self.full(d.id, log):
            call = self.track(d, reg, log)
            call.task = asyncio.create_task(self._work(call))

    def _side(self, coro: Any) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self.side.add(task)
        task.add_done_callback(self.side.discard)
        return task

    async def _when_indexed(self, d: pb.Delivery) -> None:
        await self.indices.complete.wait()
        self._accept(d)

    async def _index(self) -> None:
        """Apply the index streams' messages one at a time, in order."""
        while True:
            m = await self.indexed.get()
            try:
                body = json.loads(m.object) if m.object else {}
                await self.indices.take(m.binding_id, m.event_type, body, m.synced)
            except Exception:
                LOGGER.exception("internal error applying an index message for binding %s", m.binding_id)

    def full(self, delivery_id: str, log: ObjectLogger) -> bool:
        """Ack RETRY when the window is full (the broker should not send more)."""
        if len(self.inflight) < self.window:
            return False
        log.warning("the broker exceeded the window of %d; asking it to retry", self.window)
        self.ack(outcome.retry(delivery_id, f"handler window of {self.window} exceeded"))
        return True

    def track(self, d: pb.Delivery, reg: Registration, log: ObjectLogger) -> Call:
        """Count d in flight until untrack."""
        call = self.inflight[d.id] = Call(d, reg, log)
        return call

    def untrack(self, delivery_id: str) -> bool:
        """Take a delivery out of flight; False when it was not in flight
        (abandoned at the drain timeout and acked then)."""
        self.changed.set()
        return self.inflight.pop(delivery_id, None) is not None

    async def _work(self, call: Call) -> None:
        try:
            ack = await self.dispatcher.handle(call.reg, call.delivery)
        except Exception as e:
            # A bug of the SDK's: the delivery must still be acked, or its
            # window slot would be lost for the rest of the session.
            call.log.exception("internal error handling delivery %s", call.delivery.id)
            ack = outcome.retry(call.delivery.id, f"internal error in the SDK: {outcome.describe(e)}")
        if self.inflight.get(call.delivery.id) is call and self.untrack(call.delivery.id):
            self.ack(ack)

    def _cancel(self, c: pb.Cancel) -> None:
        call = self.inflight.get(c.delivery_id)
        if call is None:
            LOGGER.debug("cancel for delivery %s, which is not running", c.delivery_id)
            return
        if call.task is None:  # a daemon's stop, waiting for the function to return
            self.daemons.overdue(call.delivery, c.reason)
            return
        call.log.info("delivery cancelled by the broker: %s", c.reason)
        # An async function stops at its next await; a sync one cannot be
        # interrupted, and its ack goes when it returns.
        if call.reg.is_async:
            call.task.cancel()

    async def _drain(self, reader: asyncio.Task) -> None:
        self.draining = True
        LOGGER.info("stopping: draining %d deliveries in flight and stopping %d daemons (timeout %gs)",
                    len(self.inflight), len(self.daemons), self.drain_timeout)
        self.daemons.stop_all(SHUTTING_DOWN)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.drain_timeout
        said_goodbye = False
        while True:
            if reader.done():
                return  # the stream ended while draining
            if not said_goodbye and not self.daemons:
                # As soon as no daemon runs here: the broker then sends
                # nothing new and ends the stream once nothing is in flight,
                # and a daemon must not start elsewhere while ours runs.
                LOGGER.info("sending goodbye")
                self.send(pb.ConnectRequest(goodbye=pb.Goodbye(reason="instance shutting down")))
                said_goodbye = True
            if not self.inflight and not self.daemons:
                break
            left = deadline - loop.time()
            if left <= 0:
                self._abandon_all()
                continue
            self.changed.clear()
            changed = asyncio.ensure_future(self.changed.wait())
            await asyncio.wait({changed, reader}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            changed.cancel()
        self.send(_CLOSE)
        done, _ = await asyncio.wait({reader}, timeout=CLOSE_TIMEOUT)
        if not done:
            LOGGER.warning("the broker did not end the stream within %gs after goodbye", CLOSE_TIMEOUT)

    def _abandon_all(self) -> None:
        """The drain timeout ran out: ack RETRY what still runs (cancelling
        async functions) and leave behind the daemons that did not return."""
        for delivery_id, call in list(self.inflight.items()):
            call.log.warning("drain timeout: giving up delivery %s", delivery_id)
            if call.task:
                call.task.cancel()
            self.ack(outcome.retry(delivery_id, SHUTTING_DOWN))
        self.inflight.clear()
        self.daemons.abandon()

    async def _teardown(self, call: grpc.aio.StreamStreamCall, writer: asyncio.Task, reader: asyncio.Task | None) -> None:
        """End the stream, stop the daemons (waiting up to the drain
        timeout) and cancel the async functions still running; sync ones
        are left to finish in their threads, their acks unsent."""
        for task in (writer, reader, *self.side):
            if task:
                task.cancel()
        call.cancel()
        self.daemons.stop_all("the session with the broker ended")
        await self.daemons.wait(self.drain_timeout)
        tasks = [c.task for c in self.inflight.values() if c.task]
        for task in tasks:
            task.cancel()
        await asyncio.wait([t for t in (writer, reader) if t] + tasks, timeout=CLOSE_TIMEOUT)
        self.inflight.clear()
