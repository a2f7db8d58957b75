#!/usr/bin/python3
"""The Python SDK's handler for the conformance kit: the bindings and
answers of test/conformance/README.md, on the Python SDK (sdk/python).

  /usr/bin/python3 -I -B -u test/conformance/handlers/python/handler.py
"""

import asyncio
import os
import sys
import tempfile
import time

# The SDK of this source tree: run with python3 -I, neither this folder nor
# $PYTHONPATH is on sys.path.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "sdk", "python"))

import tether  # noqa: E402

WIDGETS = ("test.tether.dev", "v1", "widgets")
registry = tether.Registry()


# The protocol's default store, the annotation, which the kit reads.
@tether.on.create(*WIDGETS, registry=registry, id="create", results="annotation")
def create(body, spec, patch, retry, **_):
    scenario = spec.get("scenario")
    if scenario == "ok":
        return {"scenario": "ok"}
    if scenario == "retry":
        if retry == 0:
            raise tether.TemporaryError("conformance: try again", delay=1)
        return {"attempt": retry + 1}
    if scenario == "fail":
        raise tether.PermanentError("conformance: permanent failure")
    if scenario == "patch":
        patch.metadata.labels["conformance.tether.dev/patched"] = "yes"
        patch.status["phase"] = "Patched"
    if scenario == "big":
        patch.metadata.annotations["conformance.tether.dev/big"] = "x" * (5 << 20)
    if scenario == "events":
        tether.event(body, type="Normal", reason="Conformance", message="conformance: an Event")
    if scenario == "slow":
        time.sleep(1)  # runs a second, so that the kit's second create finds the window full
    if scenario == "held":
        await_release(body["metadata"]["name"])
    return None


def await_release(name):
    """Returns once the kit has released the create of widget name: the
    file release-<name> is in $TETHER_CONFORMANCE_DIR. Looks every 20 ms,
    and gives up waiting after 30 s."""
    path = os.path.join(os.environ["TETHER_CONFORMANCE_DIR"], "release-" + name)
    give_up = time.monotonic() + 30
    while not os.path.exists(path) and time.monotonic() < give_up:
        time.sleep(0.02)


@tether.on.delete(*WIDGETS, registry=registry, id="delete")
def delete(**_):
    pass


@tether.timer(*WIDGETS, registry=registry, id="tick", interval=0.5, labels="conformance.tether.dev/timer=yes",
              results="annotation")
def tick(**_):
    return {"ticked": True}


@tether.daemon(*WIDGETS, registry=registry, id="daemon", labels="conformance.tether.dev/daemon=yes",
               cancellation_timeout=10)
async def daemon(stopped, spec, **_):
    if spec.get("scenario") == "exit":
        return  # returns by itself, which the SDK reports with DaemonExited
    if spec.get("scenario") == "session":
        await beat(stopped)
    await stopped.wait()
    await asyncio.sleep(0.5)  # the daemon's cleanup, which its stop's ack waits for


async def beat(stopped):
    """Appends a line to a new file of $TETHER_CONFORMANCE_DIR every 100 ms
    until stopped, so that the kit sees when the daemon stops."""
    fd, _ = tempfile.mkstemp(prefix="session-", dir=os.environ["TETHER_CONFORMANCE_DIR"])
    with os.fdopen(fd, "w") as f:
        while not stopped.is_set():
            f.write("beat\n")
            f.flush()
            await stopped.wait(0.1)


@tether.on.validate(*WIDGETS, registry=registry, id="validate", labels="conformance.tether.dev/admission=yes")
def validate(spec, **_):
    if spec.get("scenario") == "deny":
        raise tether.AdmissionError("conformance: denied")


@tether.on.mutate(*WIDGETS, registry=registry, id="mutate", labels="conformance.tether.dev/admission=yes")
def mutate(spec, patch, **_):
    if spec.get("scenario") == "mutate":
        patch.metadata.labels["conformance.tether.dev/mutated"] = "yes"


def main():
    try:
        tether.run(registry, name=os.environ["TETHER_HANDLER"], broker=os.environ["TETHER_BROKER"],
                   insecure=os.environ.get("TETHER_INSECURE") == "true",
                   namespaces=(os.environ["TETHER_NAMESPACE"],))
    except (tether.RejectedError, tether.ConfigError) as e:
        print(f"conformance handler: {e}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
