"""The Python timer handler of the timer benchmark (go run ./test/bench
-timers -timer-handler python): the Go handler beside this file (main.go)
on the Python SDK. One timer binding on the Widgets of one namespace,
registered with @tether.timer and served by tether.run, whose function only
records the tick and returns, so that it is acked at once.

For every tick it records the object's uid, when the function was called
(the arrival), the tick's scheduled keyword (when the broker had it due) and
when the function returned (the ack left right after). Every second it
writes the progress file (--stats: ticks so far, objects that had at least
one tick), which the bench waits on for the warm-up. On SIGTERM the SDK
drains and says goodbye, and the handler writes every tick to --ticks, in
the JSON format of timerstats.Ticks (test/bench/timerstats/ticks.go). It
computes nothing: the bench summarizes the window with the same Go code
(timerstats.Summarize) that the Go handler runs on its own ticks. Both files
are written to a temporary name and renamed, so a reader never sees half of
one.

    PYTHONPATH=sdk/python /usr/bin/python3 test/bench/timerhandler/handler.py \\
        --addr 127.0.0.1:7443 --namespace bench-timers-1000 --interval 1s \\
        --stats stats.json --ticks ticks.json

The function is async by default: it then runs on the SDK's event loop;
--sync makes it a plain function, which the SDK runs in its thread pool of
--window threads.
"""

from __future__ import annotations

import argparse
import array
import json
import logging
import os
import sys
import tempfile
import threading
import time
from typing import Any

import tether
from tether import durations, log

WIDGETS = ("test.tether.dev", "v1", "widgets")


def unix_ns(dt: Any) -> int:
    """An aware datetime as unix ns (datetimes stop at microseconds)."""
    return round(dt.timestamp() * 1e6) * 1000


class Recorder:
    """Every tick, as timerstats.Ticks has it: parallel arrays of 28 bytes a
    tick, so that the handler's RSS is not mostly its own records."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # sync functions run in several threads
        self.ids: dict[str, int] = {}
        self.uids: list[str] = []
        self.object = array.array("i")
        self.arrival = array.array("q")
        self.scheduled = array.array("q")
        self.ack = array.array("q")

    def record(self, uid: str, arrival: int, scheduled: Any) -> None:
        due = unix_ns(scheduled)
        with self.lock:
            i = self.ids.get(uid)
            if i is None:
                i = self.ids[uid] = len(self.uids)
                self.uids.append(uid)
            self.object.append(i)
            self.arrival.append(arrival)
            self.scheduled.append(due)
            # The ack leaves when the function returns, right after this.
            self.ack.append(time.time_ns())

    def progress(self) -> dict[str, int]:
        with self.lock:
            return {"ticks": len(self.object), "objects": len(self.uids), "last_unix_nano": time.time_ns()}

    def ticks(self) -> dict[str, list]:
        with self.lock:
            return {"uids": list(self.uids), "object": self.object.tolist(),
                    "arrival_unix_nano": self.arrival.tolist(), "scheduled_unix_nano": self.scheduled.tolist(),
                    "ack_unix_nano": self.ack.tolist()}


def register(rec: Recorder, *, interval: float, namespace: str, sharp: bool = False, no_hold: bool = False,
             sync: bool = False, registry: tether.Registry | None = None) -> None:
    """The timer binding "tick", as the Go handler's OnTimer."""
    options: dict[str, Any] = dict(id="tick", interval=interval, namespaces=[namespace], registry=registry)
    if sharp:
        options["sharp"] = True
    if no_hold:
        options["finalizer"] = tether.NONE
    if sync:
        @tether.timer(*WIDGETS, **options)
        def tick(uid: str, scheduled: Any) -> None:
            rec.record(uid, time.time_ns(), scheduled)
    else:
        @tether.timer(*WIDGETS, **options)
        async def tick(uid: str, scheduled: Any) -> None:
            rec.record(uid, time.time_ns(), scheduled)


def write_json(path: str, value: Any) -> None:
    """value to path through a temporary file and a rename."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=os.path.basename(path) + ".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(value, f)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_progress(rec: Recorder, path: str, stop: threading.Event) -> None:
    while True:
        try:
            write_json(path, rec.progress())
        except OSError as e:
            print(f"timerhandler: writing stats: {e}", file=sys.stderr)
        if stop.wait(1.0):
            return


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--addr", default="127.0.0.1:7443", help="broker gRPC address HOST:PORT (insecure mode)")
    p.add_argument("--name", default="timers", help="handler name; the hold is tether.dev/<name>")
    p.add_argument("--namespace", required=True, help="namespace whose Widgets get a timer each")
    p.add_argument("--interval", type=durations.parse, default=1.0, help="timer interval (1s, 500ms, seconds)")
    p.add_argument("--sharp", action="store_true", help="tick on a fixed grid of the interval (sharp=True)")
    p.add_argument("--no-hold", action="store_true", help="finalizer=tether.NONE: the timer holds no object")
    p.add_argument("--window", type=int, default=256, help="deliveries handled at once (and sync threads)")
    p.add_argument("--sync", action="store_true",
                   help="a plain function, run in the SDK's thread pool, instead of an async one on its event loop")
    p.add_argument("--stats", help="write progress (ticks, objects) to this JSON file every second")
    p.add_argument("--ticks", help="on exit, write every tick to this JSON file (timerstats.Ticks)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    return p.parse_args(argv)


def main() -> int:
    args = parse_args()
    log.configure("plain", verbose=args.log_level == "debug")
    logging.getLogger().setLevel(args.log_level.upper())
    rec = Recorder()
    register(rec, interval=args.interval, namespace=args.namespace, sharp=args.sharp, no_hold=args.no_hold,
             sync=args.sync)
    stop = threading.Event()
    writer = None
    if args.stats:
        writer = threading.Thread(target=write_progress, args=(rec, args.stats, stop), daemon=True)
        writer.start()
    try:
        # Until SIGTERM or SIGINT; then it drains and says goodbye.
        tether.run(name=args.name, broker=args.addr, insecure=True, window=args.window, max_backoff=1.0)
    finally:
        stop.set()
        if writer:
            writer.join()
    if args.ticks:
        write_json(args.ticks, rec.ticks())
    return 0


if __name__ == "__main__":
    sys.exit(main())
