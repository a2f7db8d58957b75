#!/usr/bin/python3
"""A Tether handler in Python, on the Python SDK (sdk/python), for the
end-to-end tests in this folder. It serves Widgets
(widgets.test.tether.dev/v1) with three bindings:

  create  labels the widget python.tether.dev/created=true and stores the
          result {"lang":"python"}
  delete  logs the deletion; the default finalizer policy makes the broker
          hold every widget until this has run
  tick    a 500 ms timer that writes the widget's tick count (counted by
          this process) to the annotation python.example.com/ticks

With --every-kind it also has one binding of each other lifecycle kind, each
logging a line per delivery:

  update  logs a line per changed path, but for the tick count's:
          "changed spec.size" (every tick is an update too)
  size    a field binding on spec.size: "field spec.size of ns/w: 1 -> 2"
  resume  a widget handled before, seen again by a returning handler
  events  every raw watch event: "event ADDED ns/w"
  watch   an async daemon per widget: "daemon started ns/w" and, when the
          broker stops it, "daemon stopped ns/w: <reason>"

With --daemons it also has two daemons that misbehave, each on the widgets
whose spec names it:

  flaky     (spec.flaky) raises TemporaryError(delay=0.2) while its retry
            is under 3, then runs until stopped: "flaky daemon retry N
            ns/w", then "flaky daemon running ns/w"; restart=True, and a
            backoff of a minute that the delay overrides
  stubborn  (spec.stubborn true) never looks at stopped, with a
            cancellation timeout of 1 s: "stubborn daemon started ns/w",
            "stubborn daemon cancelled ns/w" when the SDK cancels it

With --admission it also answers the API server's admission reviews of
Widgets, which the broker serves as webhooks and forwards over the stream:

  validate-size  refuses (422) a widget whose spec.size is more than 10
  mark-seen      labels each widget python.tether.dev/seen=true

For the tests, a widget with spec.stall=true makes create wait until the
broker cancels the delivery (the create binding's timeout is 2 s), and
--bad-binding adds a binding with an invalid label selector.

Everything it and the SDK log goes to stdout, one line each: a line per
delivery, the SDK's connected, disconnected and sending goodbye. The SDK
sends Goodbye on SIGTERM or SIGINT and reconnects with backoff when the
broker goes away; a rejected Hello exits with status 2 and the broker's
message on stderr.

  /usr/bin/python3 test/python/handler.py --broker 127.0.0.1:7443 --name py-widgets
"""

import argparse
import asyncio
import json
import logging
import os
import socket
import sys

# The SDK of this source tree. The tests run this file with python3 -I,
# which puts neither this folder nor $PYTHONPATH on sys.path.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))

import tether  # noqa: E402
from tether import log  # noqa: E402
from tether.patch import json_patch, merge  # noqa: E402

WIDGETS = ("test.tether.dev", "v1", "widgets")
CREATED_LABEL = "python.tether.dev/created"
# Annotations under tether.dev and *.tether.dev are the broker's own: it
# refuses a patch that touches them. Labels have no such rule.
TICKS_ANNOTATION = "python.example.com/ticks"
SEEN_LABEL = "python.tether.dev/seen"
MAX_SIZE = 10  # the largest spec.size validate-size admits
STALL = 60.0  # seconds a stalled create waits for the broker's cancel
FLAKY_FAILURES = 3  # runs the flaky daemon fails before it runs
# The admission bindings fail open (the broker's default too), so a widget
# is never blocked while this handler is away.
WEBHOOK = {"operations": ["CREATE", "UPDATE"], "failure_policy": "Ignore"}

say = logging.getLogger("handler").info
ticks = {}  # object UID -> ticks seen by this process; only touched on the event loop


def delivered(reason, namespace, name, retry):
    say("delivered %s %s/%s attempt %d", reason.upper(), namespace, name, retry + 1)


# async: the broker's Cancel interrupts it at its await.
async def created(spec, patch, reason, namespace, name, retry, **_):
    delivered(reason, namespace, name, retry)
    if spec.get("stall"):
        try:
            await asyncio.sleep(STALL)
        except asyncio.CancelledError:
            say("cancelled CREATE %s/%s attempt %d", namespace, name, retry + 1)
            raise  # the SDK acks RETRY, without the patch
    patch.metadata.labels[CREATED_LABEL] = "true"
    return {"lang": "python"}


async def deleted(uid, reason, namespace, name, retry, **_):
    delivered(reason, namespace, name, retry)
    ticks.pop(uid, None)
    say("deleting %s/%s: nothing to clean up", namespace, name)


async def ticked(uid, patch, reason, namespace, name, retry, **_):
    delivered(reason, namespace, name, retry)
    ticks[uid] = ticks.get(uid, 0) + 1
    patch.metadata.annotations[TICKS_ANNOTATION] = str(ticks[uid])


async def updated(diff, reason, namespace, name, retry, **_):
    delivered(reason, namespace, name, retry)
    # A line per changed path; each tick's annotation is an update too, and
    # left out.
    for path in sorted(".".join(d.field) for d in diff):
        if TICKS_ANNOTATION not in path:
            say("changed %s", path)


async def size_changed(old, new, reason, namespace, name, retry, **_):
    delivered(reason, namespace, name, retry)
    say("field spec.size of %s/%s: %s -> %s", namespace, name, json.dumps(old), json.dumps(new))


async def resumed(reason, namespace, name, retry, **_):
    delivered(reason, namespace, name, retry)


async def watched(type, namespace, name, **_):
    say("event %s %s/%s", type, namespace, name)


async def watching(stopped, namespace, name, **_):
    say("daemon started %s/%s", namespace, name)
    await stopped.wait()
    say("daemon stopped %s/%s: %s", namespace, name, stopped.reason)


async def flaky(retry, stopped, namespace, name, **_):
    say("flaky daemon retry %d %s/%s", retry, namespace, name)
    if retry < FLAKY_FAILURES:
        raise tether.TemporaryError(f"failing {retry + 1} of {FLAKY_FAILURES} times", delay=0.2)
    say("flaky daemon running %s/%s", namespace, name)
    await stopped.wait()


async def stubborn(namespace, name, **_):
    say("stubborn daemon started %s/%s", namespace, name)
    try:
        await asyncio.sleep(3600)  # stopped is never looked at
    except asyncio.CancelledError:
        say("stubborn daemon cancelled %s/%s", namespace, name)
        raise


# The reviews are sync functions, which the SDK runs in its thread pool.
def check_size(spec, operation, namespace, name, **_):
    size = spec.get("size")
    # bool is an int to Python, but `size: true` is no size.
    if isinstance(size, (int, float)) and not isinstance(size, bool) and size > MAX_SIZE:
        message = f"spec.size is {size}; a widget may be at most {MAX_SIZE}"
        say("review validate-size %s %s/%s: refused (422: %s)", operation, namespace, name, message)
        # 422, not the default 403: the object is invalid, the user may create widgets.
        raise tether.AdmissionError(message, code=422)
    say("review validate-size %s %s/%s: allowed", operation, namespace, name)


def mark_seen(body, labels, patch, operation, namespace, name, **_):
    if labels.get(SEEN_LABEL) == "true":
        say("review mark-seen %s %s/%s: allowed", operation, namespace, name)
        return  # an update: nothing to change
    patch.metadata.labels[SEEN_LABEL] = "true"
    say("review mark-seen %s %s/%s: allowed with patch %s", operation, namespace, name, answered(body, patch))


def answered(body, merge_patch):
    """The RFC 6902 JSON patch the SDK answers for this merge patch, made by
    the SDK's own functions: adding the whole labels map when the widget has
    none, else the one key, "/" escaped as "~1"."""
    ops = json_patch(body, merge(body, merge_patch))
    return json.dumps(ops, separators=(",", ":"), sort_keys=True)


def registry(args):
    """The bindings of this handler, in the order of the Hello."""
    reg = tether.Registry()
    tether.on.create(*WIDGETS, id="create", timeout=2, registry=reg)(created)
    tether.on.delete(*WIDGETS, id="delete", registry=reg)(deleted)
    tether.timer(*WIDGETS, id="tick", interval=0.5, registry=reg)(ticked)
    if args.every_kind:
        tether.on.update(*WIDGETS, id="update", registry=reg)(updated)
        tether.on.field(*WIDGETS, id="size", field="spec.size", registry=reg)(size_changed)
        tether.on.resume(*WIDGETS, id="resume", registry=reg)(resumed)
        tether.on.event(*WIDGETS, id="events", registry=reg)(watched)
        tether.daemon(*WIDGETS, id="watch", registry=reg)(watching)
    if args.daemons:
        tether.daemon(*WIDGETS, id="flaky", when="has(object.spec.flaky)", restart=True, backoff=60,
                      max_backoff=60, registry=reg)(flaky)
        tether.daemon(*WIDGETS, id="stubborn", when="has(object.spec.stubborn) && object.spec.stubborn == true",
                      cancellation_timeout=1, registry=reg)(stubborn)
    if args.admission:
        tether.on.validate(*WIDGETS, id="validate-size", registry=reg, **WEBHOOK)(check_size)
        tether.on.mutate(*WIDGETS, id="mark-seen", registry=reg, **WEBHOOK)(mark_seen)
    if args.bad_binding:
        # The SDK sends a selector string as it is: the broker refuses it.
        tether.on.create(*WIDGETS, id="bad", labels="a=(b", registry=reg)(created)
    return reg


def parse_args():
    p = argparse.ArgumentParser(description="A Tether handler for Widgets, on the Python SDK.")
    p.add_argument("--broker", required=True, help="broker address, HOST:PORT (plain text)")
    p.add_argument("--name", default="py-widgets", help="handler name (default %(default)s)")
    p.add_argument("--instance", default=f"{socket.gethostname()}-{os.getpid()}",
                   help="instance id (default host-pid)")
    p.add_argument("--namespace", action="append", default=[],
                   help="serve only this namespace (repeatable; default all)")
    p.add_argument("--window", type=int, default=8, help="deliveries in flight (default %(default)s)")
    p.add_argument("--max-backoff", type=float, default=5.0,
                   help="longest wait between reconnects, seconds (default %(default)s)")
    p.add_argument("--every-kind", action="store_true",
                   help="also bind update, field spec.size, resume, raw events and a daemon")
    p.add_argument("--daemons", action="store_true",
                   help="also run a daemon that fails 3 times and one that ignores stopped")
    p.add_argument("--admission", action="store_true",
                   help="also validate (spec.size at most 10) and mutate (label) widgets as webhooks")
    p.add_argument("--bad-binding", action="store_true",
                   help="add a binding with an invalid label selector (tests the rejection)")
    return p.parse_args()


def main():
    args = parse_args()
    log.configure("plain", stream=sys.stdout)
    try:
        tether.run(registry(args), name=args.name, broker=args.broker, insecure=True, instance_id=args.instance,
                   namespaces=tuple(args.namespace), window=args.window, max_backoff=args.max_backoff)
    except tether.RejectedError as e:
        print(f"broker rejected hello: {e}", file=sys.stderr, flush=True)
        return 2
    except tether.ConfigError as e:
        print(f"invalid configuration: {e}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
