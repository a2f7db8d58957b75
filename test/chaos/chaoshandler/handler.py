#!/usr/bin/python3
"""The chaos run's handler instance in Python, on the Python SDK: an
instance of the same handler as the Go instances (main.go), which the
broker accepts beside them only because it declares the same bindings, in
the same order and with the same options. It takes the same flags and
writes the same line per delivery to stdout, a chaos.Delivery as JSON,
when its function returns; faults kill, stop and roll it out like the
others.

  /usr/bin/python3 -I -B -u test/chaos/chaoshandler/handler.py \\
      --brokers 127.0.0.1:7443,127.0.0.1:7444 --namespace chaos --instance handler-py
"""

import argparse
import datetime
import json
import logging
import os
import sys
import threading

# The SDK of this source tree; python3 -I puts neither this folder nor
# $PYTHONPATH on sys.path.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "sdk", "python"))

import tether  # noqa: E402
from tether import durations, log  # noqa: E402

WIDGETS = ("test.tether.dev", "v1", "widgets")
CONFIGMAPS = ("", "v1", "configmaps")
# As main.go's quick options: sdk.Backoff(100ms, 1s), sdk.Timeout(5s).
# results="annotation": the Go instances of main.go store results in the
# broker's annotation, and instances of one handler must bind alike.
QUICK = {"backoff": 0.1, "max_backoff": 1.0, "timeout": 5.0, "results": "annotation"}


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


class DeliveryLog:
    """Writes one chaos.Delivery per line, from the event loop and the
    reviews' threads."""

    def __init__(self, instance):
        self.instance = instance
        self.lock = threading.Lock()

    def line(self, binding, resource, reason, body, namespace, name, uid, retry, received):
        meta = body.get("metadata") or {}
        return json.dumps({
            "Received": received, "Answered": now(), "Instance": self.instance, "Binding": binding,
            "Kind": reason, "Resource": resource, "Namespace": namespace, "Name": name, "UID": uid,
            "ResourceVersion": meta.get("resourceVersion", ""), "Attempt": retry + 1, "Outcome": "ok",
        }, separators=(",", ":"))

    def write(self, *args):
        line = self.line(*args)
        with self.lock:
            print(line, flush=True)

    def record(self, binding, resource):
        """A function that answers OK at once and logs the delivery."""
        async def fn(reason, body, namespace, name, uid, retry, **_):
            self.write(binding, resource, reason, body, namespace, name, uid, retry, now())
        return fn

    def review(self):
        """Allows every request and logs it; on CREATE the object has no
        UID yet. A sync function: the SDK runs reviews in its threads."""
        def fn(body, namespace, name, **_):
            uid = (body.get("metadata") or {}).get("uid", "")
            self.write("validate", "widgets", "validate", body, namespace, name, uid, 0, now())
        return fn

    def daemon(self):
        """Runs until it is told to stop, and logs its start when it does."""
        async def fn(reason, body, namespace, name, uid, retry, stopped, **_):
            received = now()
            await stopped.wait()
            self.write("daemon", "widgets", reason, body, namespace, name, uid, retry, received)
        return fn


def registry(out, variant):
    """The bindings of main.go, in its order."""
    reg = tether.Registry()
    interval = float(variant)
    tether.on.create(*WIDGETS, id="create", registry=reg, **QUICK)(out.record("create", "widgets"))
    tether.on.update(*WIDGETS, id="update", registry=reg, **QUICK)(out.record("update", "widgets"))
    tether.on.delete(*WIDGETS, id="delete", finalizer=tether.HOLD, registry=reg, **QUICK)(
        out.record("delete", "widgets"))
    tether.timer(*WIDGETS, id="tick", interval=interval, finalizer=tether.HOLD, registry=reg, **QUICK)(
        out.record("tick", "widgets"))
    tether.daemon(*WIDGETS, id="daemon", cancellation_timeout=10, results="annotation", registry=reg)(out.daemon())
    tether.on.event(*WIDGETS, id="event", registry=reg, **QUICK)(out.record("event", "widgets"))
    tether.on.delete(*CONFIGMAPS, id="strict-delete", finalizer=tether.STRICT, registry=reg, **QUICK)(
        out.record("strict-delete", "configmaps"))
    tether.timer(*CONFIGMAPS, id="tick-none", interval=interval, finalizer=tether.NONE, registry=reg, **QUICK)(
        out.record("tick-none", "configmaps"))
    tether.on.validate(*WIDGETS, id="validate", operations=["CREATE", "UPDATE"], failure_policy="Ignore", timeout=2,
                       registry=reg)(out.review())
    return reg


def main():
    p = argparse.ArgumentParser(description="The chaos run's handler instance, on the Python SDK.")
    p.add_argument("--brokers", default="127.0.0.1:7443", help="broker addresses, comma-separated; dialled in turn")
    p.add_argument("--name", default="chaos", help="handler name")
    p.add_argument("--namespace", default="", help="the namespace of the load")
    p.add_argument("--instance", default="", help="instance id")
    p.add_argument("--grace", type=durations.parse, default=5.0, help="the grace asked for (a Go duration)")
    p.add_argument("--variant", type=int, default=1, help="the bindings' variant: the timers' interval in seconds")
    args = p.parse_args()
    # Warnings and errors to stderr, the run's log of this instance; stdout
    # is the deliveries'.
    log.configure("plain", stream=sys.stderr)
    logging.getLogger().setLevel(logging.WARNING)
    out = DeliveryLog(args.instance)
    try:
        tether.run(registry(out, args.variant), name=args.name, broker=tuple(args.brokers.split(",")),
                   insecure=True, instance_id=args.instance, namespaces=(args.namespace,), grace=args.grace,
                   max_backoff=1.0)
    except (tether.RejectedError, tether.ConfigError) as e:
        print(f"chaoshandler {args.instance}: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
