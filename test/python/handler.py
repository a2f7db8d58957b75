#!/usr/bin/python3
"""A Tether handler in Python, built on nothing but grpcio and protobuf.

It serves Widgets (widgets.test.tether.dev/v1) with three bindings:

  create  labels the widget python.tether.dev/created=true and stores the
          result {"lang":"python"}
  delete  prints the deletion and acks it; the default finalizer policy
          makes the broker hold every widget until this has run
  tick    a 500 ms timer that writes the widget's tick count (counted by
          this process) to the annotation python.example.com/ticks

With --admission it also answers the API server's admission reviews of
Widgets, which the broker serves as webhooks and forwards over the stream:

  validate-size  refuses (422) a widget whose spec.size is more than 10
  mark-seen      labels each widget python.tether.dev/seen=true with an
                 RFC 6902 JSON patch

For the tests, a widget with spec.stall=true makes create wait until the
broker cancels the delivery (the create binding's timeout is 2 s).

It prints one line per delivery on stdout, sends Goodbye on SIGTERM or
SIGINT, reconnects with backoff when the broker goes away, and exits with
status 2 when the broker rejects its Hello.

  /usr/bin/python3 test/python/handler.py --broker 127.0.0.1:7443 --name py-widgets
"""

import argparse
import json
import os
import queue
import signal
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

# The generated stubs live next to this file, in gen/ (see gen.sh).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen"))

import grpc  # noqa: E402
from google.protobuf import __version__ as protobuf_version  # noqa: E402
from google.protobuf.duration_pb2 import Duration  # noqa: E402
from tether.v1 import broker_pb2 as pb  # noqa: E402
from tether.v1 import broker_pb2_grpc as pb_grpc  # noqa: E402

WIDGETS = pb.Resource(group="test.tether.dev", version="v1", resource="widgets")
CREATED_LABEL = "python.tether.dev/created"
# Annotations under tether.dev and *.tether.dev are the broker's own: it
# refuses a patch that touches them. Labels have no such rule.
TICKS_ANNOTATION = "python.example.com/ticks"
SEEN_LABEL = "python.tether.dev/seen"
MAX_SIZE = 10  # the largest spec.size validate-size admits
SDK = f"tether-python-example/0.1 (grpcio {grpc.__version__}, protobuf {protobuf_version})"

# Codes with which the broker refuses a Hello: retrying cannot help.
REJECTED = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.FAILED_PRECONDITION,
}
DRAIN_TIMEOUT = 10.0  # after Goodbye, how long in-flight deliveries may take
CLOSE_TIMEOUT = 5.0  # after closing our side, how long the broker may take

_out = threading.Lock()


def say(line, err=False):
    """Print one whole line (threads never interleave) and flush it."""
    stream = sys.stderr if err else sys.stdout
    with _out:
        print(line, file=stream, flush=True)


def ms(n):
    return Duration(seconds=n // 1000, nanos=(n % 1000) * 1_000_000)


def to_json(value):
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def kind_name(kind):
    return pb.DeliveryKind.Name(kind).removeprefix("DELIVERY_KIND_")


def describe(d):
    ref = d.ref
    where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
    return f"{kind_name(d.kind)} {where} attempt {d.attempt}"


def bindings(args):
    """The subscriptions this handler declares in its Hello."""
    ns = args.namespace or []
    out = [
        pb.Binding(id="create", kind=pb.BINDING_KIND_CREATE, resource=WIDGETS,
                   namespaces=ns, timeout=ms(2000)),
        # Default finalizer policy (HOLD): the broker holds each widget
        # until the delete delivery is acked.
        pb.Binding(id="delete", kind=pb.BINDING_KIND_DELETE, resource=WIDGETS, namespaces=ns),
        pb.Binding(id="tick", kind=pb.BINDING_KIND_TIMER, resource=WIDGETS, namespaces=ns,
                   timer=pb.TimerOptions(interval=ms(500))),
    ]
    if args.admission:
        out += admission_bindings(ns)
    if args.bad_binding:
        out.append(pb.Binding(id="bad", kind=pb.BINDING_KIND_CREATE, resource=WIDGETS,
                              namespaces=ns, label_selector="a=(b"))
    return out


def admission_bindings(ns):
    """The webhooks: the broker writes their configurations and serves them."""
    # Failing open (the broker's default too) means a widget is never
    # blocked while this handler is away; the timeout is the default 10 s.
    webhook = pb.AdmissionOptions(
        operations=[pb.ADMISSION_OPERATION_CREATE, pb.ADMISSION_OPERATION_UPDATE],
        failure_policy=pb.FAILURE_POLICY_IGNORE)
    return [
        pb.Binding(id="validate-size", kind=pb.BINDING_KIND_VALIDATE, resource=WIDGETS,
                   namespaces=ns, admission=webhook),
        pb.Binding(id="mark-seen", kind=pb.BINDING_KIND_MUTATE, resource=WIDGETS,
                   namespaces=ns, admission=webhook),
    ]


class Widgets:
    """The handler's logic: one answer (an Ack) per delivery."""

    def __init__(self):
        self._lock = threading.Lock()
        self._ticks = {}  # object UID -> ticks seen by this process

    def handle(self, d, cancelled):
        obj = json.loads(d.object) if d.object else {}
        if d.kind == pb.DELIVERY_KIND_CREATE:
            if obj.get("spec", {}).get("stall"):
                if cancelled.wait(60):
                    return retry(d, "cancelled by the broker")
            return ok(d, patch={"metadata": {"labels": {CREATED_LABEL: "true"}}},
                      result={"lang": "python"})
        if d.kind == pb.DELIVERY_KIND_DELETE:
            with self._lock:
                self._ticks.pop(d.ref.uid, None)
            say(f"deleting {d.ref.namespace}/{d.ref.name}: nothing to clean up")
            return ok(d)
        if d.kind == pb.DELIVERY_KIND_TICK:
            with self._lock:
                n = self._ticks[d.ref.uid] = self._ticks.get(d.ref.uid, 0) + 1
            return ok(d, patch={"metadata": {"annotations": {TICKS_ANNOTATION: str(n)}}})
        if d.kind == pb.DELIVERY_KIND_ADMISSION:
            return review(d, obj)
        return ok(d)  # a kind this handler never asked for: nothing to do


def review(d, obj):
    """Answer one admission review; the ack's outcome is OK even for a
    refusal, since anything else means the handler failed."""
    if d.binding_id == "validate-size":
        answer = check_size(obj)
    elif d.binding_id == "mark-seen":
        answer = mark_seen(obj)
    else:
        raise ValueError(f"review for unknown binding {d.binding_id!r}")
    op = pb.AdmissionOperation.Name(d.admission.operation).removeprefix("ADMISSION_OPERATION_")
    verdict = "allowed" if answer.allowed else f"refused ({answer.code}: {answer.message})"
    if answer.patch:
        verdict += f" with patch {answer.patch.decode()}"
    say(f"review {d.binding_id} {op} {d.ref.namespace}/{d.ref.name}: {verdict}")
    return pb.Ack(delivery_id=d.id, outcome=pb.OUTCOME_OK, admission=answer)


def check_size(obj):
    size = (obj.get("spec") or {}).get("size")
    # bool is an int to Python, but `size: true` is no size.
    if isinstance(size, (int, float)) and not isinstance(size, bool) and size > MAX_SIZE:
        # 422, not the default 403: the object is invalid, the user may
        # create widgets.
        return pb.AdmissionResponse(
            allowed=False, code=422,
            message=f"spec.size is {size}; a widget may be at most {MAX_SIZE}")
    return pb.AdmissionResponse(allowed=True)


def mark_seen(obj):
    """Allow, with a JSON patch adding SEEN_LABEL unless it is already there."""
    labels = (obj.get("metadata") or {}).get("labels")
    if labels is None:
        # A JSON patch cannot add a member to a missing map: add the map.
        op = {"op": "add", "path": "/metadata/labels", "value": {SEEN_LABEL: "true"}}
    elif labels.get(SEEN_LABEL) == "true":
        return pb.AdmissionResponse(allowed=True)  # an update: nothing to change
    else:
        # "add" on an existing member replaces it (RFC 6902 4.1).
        op = {"op": "add", "path": "/metadata/labels/" + pointer_token(SEEN_LABEL), "value": "true"}
    return pb.AdmissionResponse(allowed=True, patch=to_json([op]))


def pointer_token(key):
    """Escape key as one JSON pointer token (RFC 6901): "~" first, so that
    the "~" of "~1" is not escaped again."""
    return key.replace("~", "~0").replace("/", "~1")


def ok(d, patch=None, result=None):
    ack = pb.Ack(delivery_id=d.id, outcome=pb.OUTCOME_OK)
    if patch is not None:
        ack.patch = to_json(patch)
    if result is not None:
        ack.result = to_json(result)
    return ack


def retry(d, message):
    return pb.Ack(delivery_id=d.id, outcome=pb.OUTCOME_RETRY, message=message)


def failed(d, message):
    """The ack for a delivery the handler could not do. Lifecycle work is
    tried again; a review is answered once, so FAIL lets its binding's
    failure policy decide now."""
    if d.kind == pb.DELIVERY_KIND_ADMISSION:
        return pb.Ack(delivery_id=d.id, outcome=pb.OUTCOME_FAIL, message=message)
    return retry(d, message)


class Rejected(Exception):
    """The broker refused the Hello."""


_GOODBYE = object()  # outbox marker: send Goodbye, then drain
_CLOSE = object()  # outbox marker: end the request stream now


class Session:
    """One Connect stream: Hello and Welcome, then deliveries in, acks out.

    gRPC pulls the requests from requests() on a thread of its own; the
    main thread reads responses in run(); a pool runs the deliveries.
    """

    def __init__(self, args, logic):
        self.hello = pb.Hello(
            handler=args.name, instance_id=args.instance, bindings=bindings(args),
            window=args.window, protocol_version="v1", sdk=SDK)
        self.logic = logic
        self.outbox = queue.SimpleQueue()  # put() is safe in a signal handler
        self.lock = threading.Lock()
        self.inflight = {}  # delivery id -> (Delivery, cancelled Event)
        self.welcomed = False
        self.call = None
        self.pool = None

    def requests(self):
        yield pb.ConnectRequest(hello=self.hello)
        drain_until = None
        while True:
            try:
                item = self.outbox.get(timeout=0.1 if drain_until else None)
            except queue.Empty:
                item = None
            if item is _CLOSE:
                break
            if item is _GOODBYE:
                say("sending goodbye")
                yield pb.ConnectRequest(goodbye=pb.Goodbye(reason="SIGTERM"))
                drain_until = time.monotonic() + DRAIN_TIMEOUT
            elif item is not None:
                yield item
            if drain_until:
                with self.lock:
                    busy = len(self.inflight)
                if not busy or time.monotonic() > drain_until:
                    break
        # Our side is closed; the broker should end the stream now.
        if self.call is not None:
            timer = threading.Timer(CLOSE_TIMEOUT, self.call.cancel)
            timer.daemon = True
            timer.start()

    def leave(self):
        """Ask for Goodbye; callable from a signal handler."""
        self.outbox.put(_GOODBYE)

    def run(self, channel):
        """Serve the stream until it ends; raise Rejected or grpc.RpcError."""
        self.call = pb_grpc.BrokerServiceStub(channel).Connect(self.requests())
        try:
            first = next(self.call)
        except StopIteration:
            return
        except grpc.RpcError as e:
            if e.code() in REJECTED:
                raise Rejected(f"{e.code().name}: {e.details()}") from None
            raise
        if first.WhichOneof("message") != "welcome":
            raise RuntimeError(f"expected Welcome, got {first.WhichOneof('message')}")
        w = first.welcome
        self.welcomed = True
        self.pool = ThreadPoolExecutor(max_workers=max(w.window, 1))
        say(f"welcome session {w.session_id} window {w.window} broker {w.broker_version or '?'}")
        for msg in self.call:
            which = msg.WhichOneof("message")
            if which == "delivery":
                self.start(msg.delivery)
            elif which == "cancel":
                self.cancel(msg.cancel)
            else:
                say(f"ignoring a {which} message")

    def start(self, d):
        say(f"delivered {describe(d)}")
        cancelled = threading.Event()
        with self.lock:
            if d.id in self.inflight:
                return  # a duplicate; the running attempt acks it
            self.inflight[d.id] = (d, cancelled)
        self.pool.submit(self.work, d, cancelled)

    def work(self, d, cancelled):
        try:
            ack = self.logic.handle(d, cancelled)
        except Exception as e:  # a bug in the handler
            ack = failed(d, f"handler error: {e!r}")
        self.outbox.put(pb.ConnectRequest(ack=ack))  # before leaving inflight
        with self.lock:
            self.inflight.pop(d.id, None)

    def cancel(self, c):
        with self.lock:
            entry = self.inflight.get(c.delivery_id)
        if entry is None:
            return  # already acked
        d, cancelled = entry
        say(f"cancelled {describe(d)}: {c.reason}")
        cancelled.set()

    def close(self):
        """Stop everything this session started."""
        with self.lock:
            for _, cancelled in self.inflight.values():
                cancelled.set()
        self.outbox.put(_CLOSE)
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)


def parse_args():
    p = argparse.ArgumentParser(description="A Tether handler for Widgets, in Python.")
    p.add_argument("--broker", required=True, help="broker address, HOST:PORT (plain text)")
    p.add_argument("--name", default="py-widgets", help="handler name (default %(default)s)")
    p.add_argument("--instance", default=f"{socket.gethostname()}-{os.getpid()}",
                   help="instance id (default host-pid)")
    p.add_argument("--namespace", action="append",
                   help="serve only this namespace (repeatable; default all)")
    p.add_argument("--window", type=int, default=8, help="deliveries in flight (default %(default)s)")
    p.add_argument("--max-backoff", type=float, default=5.0,
                   help="longest wait between reconnects, seconds (default %(default)s)")
    p.add_argument("--admission", action="store_true",
                   help="also validate (spec.size at most 10) and mutate (label) widgets as webhooks")
    p.add_argument("--bad-binding", action="store_true",
                   help="add a binding with an invalid label selector (tests the rejection)")
    return p.parse_args()


def main():
    args = parse_args()
    logic = Widgets()
    stopping = threading.Event()
    current = None

    def on_signal(signum, _frame):
        stopping.set()
        if current is not None:
            current.leave()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    backoff = 0.1
    while True:
        session = Session(args, logic)
        current = session
        if stopping.is_set():
            break
        channel = grpc.insecure_channel(args.broker, options=[
            ("grpc.keepalive_time_ms", 30_000),  # the broker allows one ping per 10 s
            ("grpc.keepalive_timeout_ms", 10_000),
        ])
        try:
            session.run(channel)
            why = "the broker ended the stream"
        except Rejected as e:
            say(f"broker rejected hello: {e}", err=True)
            return 2
        except grpc.RpcError as e:
            why = f"{e.code().name}: {e.details()}"
        finally:
            session.close()
            channel.close()
        if stopping.is_set():
            break
        if session.welcomed:
            backoff = 0.1
        say(f"disconnected ({why}); reconnecting in {backoff:.1f}s")
        stopping.wait(backoff)
        backoff = min(backoff * 2, args.max_backoff)
    say("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
