"""A handler with Kopf's process hooks, for hooks_test.go, run as
`python3 -m tether run hooks_handler.py --liveness URL ...`:

  startup  waits, retrying, until the file $HOOKS_GATE exists, then logs
           "startup done after N retries"
  create   labels nothing; logs "delivered CREATE ns/name" and counts it
  probe    "created": how many creates this process has handled
  cleanup  logs "cleanup after the goodbye"
"""

import logging
import os

import tether

WIDGETS = ("test.tether.dev", "v1", "widgets")
say = logging.getLogger("handler").info
created_here = []  # names of the widgets this process has handled


@tether.on.startup()
def wait_for_the_gate(retry, **_):
    if not os.path.exists(os.environ["HOOKS_GATE"]):
        raise tether.TemporaryError("waiting for the gate file", delay=0.1)
    say("startup done after %d retries", retry)


@tether.on.create(*WIDGETS, id="create")
def created(namespace, name, **_):
    say("delivered CREATE %s/%s", namespace, name)
    created_here.append(name)
    return {"hooks": True}


@tether.on.probe()
def created_count(**_):
    return len(created_here)


@tether.on.cleanup()
def closing(**_):
    say("cleanup after the goodbye")
