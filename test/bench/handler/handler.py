"""The Python handler of the create/delete benchmark (go run ./test/bench
-handler python): the Go handler beside this file (main.go) on the Python
SDK, as a user writes one. A create binding and a delete binding on the
Widgets of one namespace, plain functions (run in the SDK's thread pool, as
most Kopf handlers are written), served by tether.run. The delete binding
holds every Widget with tether.dev/<name> until its deletion is handled.

The create function does what --workload says, with the names of the Go
package test/bench/workload:

- result: returns a small dict, which the broker stores as its result;
- label: sets the label bench.example.com/handled through ``patch``;
- status: sets status.handled through ``patch.status``.

    PYTHONPATH=sdk/python /usr/bin/python3 test/bench/handler/handler.py \\
        --addr 127.0.0.1:7443 --namespace bench-broker-python-result-1000-1 --workload result
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

import tether
from tether import log

WIDGETS = ("test.tether.dev", "v1", "widgets")

# As in test/bench/workload.
RESULT, LABEL, STATUS = "result", "label", "status"
LABEL_KEY = "bench.example.com/handled"
STATUS_FIELD = "handled"


def register(workload: str, *, namespace: str, registry: tether.Registry | None = None) -> None:
    """The bindings "create" and "delete", as the Go handler's."""
    options: dict[str, Any] = dict(namespaces=[namespace], registry=registry)
    if workload == RESULT:
        # In the annotation, as the Go handler's SetResult and raw's: in
        # status (the Python default) it would be a second write.
        @tether.on.create(*WIDGETS, id="create", results="annotation", **options)
        def create(**_: Any) -> dict[str, bool]:
            return {"ok": True}
    elif workload == LABEL:
        @tether.on.create(*WIDGETS, id="create", **options)
        def create(patch: tether.Patch, **_: Any) -> None:
            patch.metadata.labels[LABEL_KEY] = "true"
    elif workload == STATUS:
        @tether.on.create(*WIDGETS, id="create", **options)
        def create(patch: tether.Patch, **_: Any) -> None:
            patch.status[STATUS_FIELD] = True
    else:
        raise ValueError(f"workload {workload!r} is none of {RESULT}, {LABEL}, {STATUS}")

    @tether.on.delete(*WIDGETS, id="delete", **options)
    def delete(**_: Any) -> None:
        pass


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--addr", default="127.0.0.1:7443", help="broker gRPC address HOST:PORT (insecure mode)")
    p.add_argument("--name", default="bench", help="handler name; the hold is tether.dev/<name>")
    p.add_argument("--namespace", required=True, help="namespace whose Widgets are handled")
    p.add_argument("--window", type=int, default=64, help="deliveries handled at once (and threads)")
    p.add_argument("--workload", default=RESULT, choices=(RESULT, LABEL, STATUS),
                   help="what the create function does")
    p.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    return p.parse_args(argv)


def main() -> int:
    args = parse_args()
    log.configure("plain", verbose=args.log_level == "debug")
    logging.getLogger().setLevel(args.log_level.upper())
    register(args.workload, namespace=args.namespace)
    # Until SIGTERM or SIGINT; then it drains and says goodbye.
    tether.run(name=args.name, broker=args.addr, insecure=True, window=args.window, max_backoff=1.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
