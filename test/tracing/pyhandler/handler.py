"""The Python handler test/tracing runs: a create and a delete binding on
the Widgets of one namespace, whose functions log "CREATE ns/name" and
"DELETE ns/name" with the logger the SDK gives them, one JSON line each on
standard output. Without the opentelemetry package (not installed on the
machines the tests run on) the SDK sends no span; the lines of a traced
delivery carry its trace_id.

    PYTHONPATH=sdk/python /usr/bin/python3 test/tracing/pyhandler/handler.py \\
        --broker 127.0.0.1:7443 --name pyhandler --namespace ns
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import tether
from tether import log

WIDGETS = ("test.tether.dev", "v1", "widgets")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--broker", required=True, help="broker gRPC address HOST:PORT (insecure mode)")
    p.add_argument("--name", required=True, help="handler name")
    p.add_argument("--namespace", required=True, help="the namespace to bind")
    args = p.parse_args()
    log.configure("json", stream=sys.stdout)

    @tether.on.create(*WIDGETS, id="create", namespaces=[args.namespace])
    def created(namespace: str, name: str, logger: Any, **_: Any) -> None:
        logger.info("CREATE %s/%s", namespace, name)

    @tether.on.delete(*WIDGETS, id="delete", namespaces=[args.namespace])
    def deleted(namespace: str, name: str, logger: Any, **_: Any) -> None:
        logger.info("DELETE %s/%s", namespace, name)

    tether.run(name=args.name, broker=args.broker, insecure=True, max_backoff=0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
