"""A broker for the SDK's own tests: the BrokerService from the stubs on a
real localhost gRPC port, which records what handlers send and delivers
what a test tells it to. Waits go through one condition variable, with a
deadline, never through sleeps."""

from __future__ import annotations

import asyncio
import os
import queue
import threading
from concurrent import futures

import grpc

from tether import runner
from tether.v1 import broker_pb2 as pb
from tether.v1 import broker_pb2_grpc as pb_grpc

WAIT = 10.0  # seconds any wait may take before the test fails
SDK_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_END = object()


class Stream:
    """One Connect stream, as the fake sees it."""

    def __init__(self, hello: pb.Hello, metadata: dict[str, str]):
        self.hello = hello
        self.metadata = metadata
        self.out: queue.Queue = queue.Queue()
        self.received: list[pb.ConnectRequest] = []
        self.pending: set[str] = set()  # deliveries sent and not acked
        self.leaving = False
        self.ended = False


class FakeBroker:
    """Start with start(); stop() at the end. reject=(code, details) ends
    every stream before Welcome with that status; window caps Welcome's;
    capabilities and reviews_only (a replica that does not lead) go in
    Welcome."""

    def __init__(self, reject: tuple[grpc.StatusCode, str] | None = None, window: int = 1024,
                 credentials: grpc.ServerCredentials | None = None, capabilities: tuple[int, ...] = (),
                 reviews_only: bool = False):
        self.reject = reject
        self.window = window
        self.capabilities = capabilities
        self.reviews_only = reviews_only
        self.cond = threading.Condition()
        self.streams: list[Stream] = []
        self.acks: dict[str, pb.Ack] = {}
        self._seq = 0
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb_grpc.add_BrokerServiceServicer_to_server(_Servicer(self), self.server)
        if credentials is None:
            self.port = self.server.add_insecure_port("127.0.0.1:0")
        else:
            self.port = self.server.add_secure_port("127.0.0.1:0", credentials)
        self.address = f"127.0.0.1:{self.port}"

    def start(self) -> FakeBroker:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop(None).wait(WAIT)

    def wait_for(self, predicate, what: str, timeout: float = WAIT):
        """predicate's first true value, evaluated under the lock whenever
        something arrives; AssertionError after timeout."""
        with self.cond:
            value = self.cond.wait_for(predicate, timeout)
        if not value:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        return value

    def connected(self, n: int = 1) -> Stream:
        """The n-th stream, once it has been welcomed."""
        return self.wait_for(lambda: len(self.streams) >= n and self.streams[n - 1], f"connection {n}")

    def send(self, msg: pb.ConnectResponse, stream: int = -1) -> None:
        with self.cond:
            s = self.streams[stream]
            if msg.HasField("delivery"):
                s.pending.add(msg.delivery.id)
        s.out.put(msg)

    def deliver(self, d: pb.Delivery, stream: int = -1, wait: bool = True) -> pb.Ack | None:
        """Send d (with a fresh id unless it has one) and wait for its ack."""
        with self.cond:
            if not d.id:
                self._seq += 1
                d.id = f"fake-{self._seq}"
        self.send(pb.ConnectResponse(delivery=d), stream)
        return self.ack(d.id) if wait else None

    def ack(self, delivery_id: str) -> pb.Ack:
        return self.wait_for(lambda: self.acks.get(delivery_id), f"the ack of {delivery_id}")

    def end(self, stream: int = -1, status: tuple[grpc.StatusCode, str] | None = None) -> None:
        """End a stream: OK, or with status."""
        self.streams[stream].out.put(status or _END)

    def wait_ended(self, s: Stream, timeout: float = 10.0) -> bool:
        """Whether s's request stream ends within timeout: the handler's
        side closes it a moment after its runner has returned."""
        with self.cond:
            return self.cond.wait_for(lambda: s.ended, timeout)

    def messages(self, which: str, stream: int = -1) -> list:
        with self.cond:
            return [getattr(m, which) for m in self.streams[stream].received if m.WhichOneof("message") == which]

    def _receive(self, s: Stream, request_iterator) -> None:
        try:
            for msg in request_iterator:
                with self.cond:
                    s.received.append(msg)
                    which = msg.WhichOneof("message")
                    # A batch's acks are taken as if each came alone, as
                    # the broker takes them (a batch it did not offer, the
                    # test finds in received).
                    acks = [msg.ack] if which == "ack" else list(msg.ack_batch.acks) if which == "ack_batch" else []
                    for ack in acks:
                        self.acks[ack.delivery_id] = ack
                        s.pending.discard(ack.delivery_id)
                    if which == "goodbye":
                        s.leaving = True
                    done = s.leaving and not s.pending
                    self.cond.notify_all()
                if done:
                    s.out.put(_END)  # as the broker: goodbye said, nothing in flight
        except grpc.RpcError:
            pass  # the handler went away
        finally:
            with self.cond:
                s.ended = True
                self.cond.notify_all()
            s.out.put(_END)


class _Servicer(pb_grpc.BrokerServiceServicer):
    def __init__(self, broker: FakeBroker):
        self.b = broker

    def Connect(self, request_iterator, context):
        b = self.b
        first = next(request_iterator)
        if b.reject:
            with b.cond:
                b.streams.append(Stream(first.hello, dict(context.invocation_metadata())))
                b.cond.notify_all()
            context.abort(*b.reject)
        s = Stream(first.hello, dict(context.invocation_metadata()))
        with b.cond:
            index = len(b.streams)
        yield pb.ConnectResponse(welcome=pb.Welcome(
            session_id=f"fake-{index}", window=min(first.hello.window or 16, b.window), broker_version="fake",
            resources=[x.resource for x in first.hello.bindings], capabilities=b.capabilities,
            reviews_only=b.reviews_only))
        with b.cond:
            b.streams.append(s)
            b.cond.notify_all()
        threading.Thread(target=b._receive, args=(s, request_iterator), daemon=True).start()
        while True:
            item = s.out.get()
            if item is _END:
                return
            if isinstance(item, tuple):
                context.abort(*item)
            yield item


class Runner:
    """tether.runner.operator() on an event loop in a thread of its own."""

    def __init__(self, registry, **settings):
        settings.setdefault("name", "test-handler")
        settings.setdefault("insecure", True)
        settings.setdefault("instance_id", "test-instance")
        self.settings = settings
        self.registry = registry
        self.error: BaseException | None = None
        self.done = threading.Event()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._main, daemon=True)

    def start(self) -> Runner:
        self.thread.start()
        if not self._ready.wait(WAIT):
            raise AssertionError("the runner's event loop did not start")
        return self

    def _main(self) -> None:
        async def main() -> None:
            self.loop = asyncio.get_running_loop()
            self.stopping = asyncio.Event()
            self._ready.set()
            await runner.operator(self.registry, stopping=self.stopping, **self.settings)

        try:
            asyncio.run(main())
        except BaseException as e:  # handed to the test in wait()
            self.error = e
        finally:
            self._ready.set()
            self.done.set()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stopping.set)
        self.wait()

    def wait(self) -> None:
        if not self.done.wait(WAIT):
            raise AssertionError(f"the runner did not return within {WAIT}s")
        self.thread.join(WAIT)
