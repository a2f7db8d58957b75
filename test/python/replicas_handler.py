"""A handler that answers reviews on every broker replica, for
everyreplica_test.go, run as `python3 -m tether run replicas_handler.py
--broker A --broker B ...`:

  allow  a fail-closed validate binding on Widget creates that allows each
         and logs "review CREATE ns/name"

Given several brokers, the SDK keeps a session to each and lists
CAPABILITY_EVERY_REPLICA: the replica that leads takes the full session,
the other one a session for reviews only.
"""

import logging

import tether

WIDGETS = ("test.tether.dev", "v1", "widgets")
say = logging.getLogger("handler").info


@tether.on.validate(*WIDGETS, id="allow", operations=["CREATE"], failure_policy="Fail", timeout=5)
def allow(namespace, name, **_):
    say("review CREATE %s/%s", namespace, name)
