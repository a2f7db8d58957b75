"""The TTL reaper: deletes Secrets once their annotation ttl.tether.dev/ttl
(a Go duration: "90s", "24h", "1h30m") has passed since their creation, as
the Go example handler (cmd/example-handler/ttl.go) does. Its timer has
finalizer=tether.NONE, so a Secret with a ttl is never held: the opt-out
Kopf refused, safe because the broker stops the timer when the Secret goes
and ticks belong to the object's UID, not its name.

A validating webhook, served by the broker, refuses on CREATE and UPDATE a
Secret whose ttl is not a positive duration, so the client sees the mistake
at once. It fails open: while the handler is away, Secrets are admitted
unchecked. It needs a broker started with --admission-listen; with another,
set TTL_WEBHOOK=false, or the broker refuses the handler.

    python3 -m tether run examples/ttl_reaper.py --name ttl-reaper

TTL_INTERVAL (seconds, default 5) sets how often each Secret with a ttl is
looked at. The handler's own Kubernetes access (see kube.py) must let it
delete Secrets."""

from __future__ import annotations

import datetime
import json
import os

import kube
import tether
from tether import durations

TTL = "ttl.tether.dev/ttl"
INTERVAL = float(os.environ.get("TTL_INTERVAL", "5"))
WEBHOOK = os.environ.get("TTL_WEBHOOK", "true").lower() not in ("false", "0", "no")

# Where Secrets are deleted; the tests put an in-memory fake here.
api: kube.Api = kube.Lazy(user_agent="tether-example-ttl-reaper")


@tether.timer("", "v1", "secrets", id="ttl-secrets", interval=INTERVAL, annotations={TTL: tether.PRESENT},
              finalizer=tether.NONE)
def reap(meta, name, namespace, uid, logger, **_):
    """Delete the Secret once its creation plus its ttl has passed. Only the
    Secret that ticked is deleted (a UID precondition): one re-created under
    the name is another object, with a lifetime of its own."""
    ttl = parse_ttl((meta.get("annotations") or {}).get(TTL, ""))
    created = datetime.datetime.fromisoformat(meta["creationTimestamp"])
    now = datetime.datetime.now(datetime.timezone.utc)
    if not expired(created, ttl, now):
        return
    try:
        api.delete(kube.SECRETS, namespace, name, uid=uid)
    except (kube.NotFound, kube.Conflict):
        return  # already gone, or the name now belongs to another Secret
    except kube.ApiError as e:
        raise tether.TemporaryError(f"deleting the expired Secret: {e}") from e
    logger.info("Secret reaped: ttl %s, %ds old", meta["annotations"][TTL], (now - created).total_seconds())


def review_ttl(annotations, **_):
    """Refuse a Secret whose ttl is not a positive duration, with a message
    for the client that wrote it."""
    if message := check_ttl(annotations.get(TTL, "")):
        raise tether.AdmissionError(message)


if WEBHOOK:
    # The match condition makes the API server skip the webhook for every
    # other Secret, so their writes never wait for the broker; annotations=
    # makes the broker admit them without asking, should it be asked anyway.
    tether.on.validate("", "v1", "secrets", id="validate-ttl", operations=["CREATE", "UPDATE"],
                       annotations={TTL: tether.PRESENT},
                       match_conditions={"has-ttl": f"has(object.metadata.annotations) && {json.dumps(TTL)} "
                                                    "in object.metadata.annotations"})(review_ttl)


def parse_ttl(text):
    """The ttl in seconds, for the reaper: a Go duration of zero or more;
    anything else fails the tick for good (retrying cannot fix it)."""
    if not text:
        raise tether.PermanentError(f"annotation {TTL} is empty")
    try:
        seconds = durations.parse_go(text)
    except ValueError:
        raise tether.PermanentError(f"annotation {TTL}: {quote(text)} is not a Go duration such as 90s or 24h") from None
    if seconds < 0:
        raise tether.PermanentError(f"annotation {TTL}: {quote(text)} is negative")
    return seconds


def check_ttl(text):
    """What is wrong with a ttl, for the webhook; "" when it is a positive
    duration. Zero is refused too: the reaper would delete the Secret as
    soon as it saw it."""
    try:
        seconds = durations.parse_go(text)
    except ValueError:
        return f"{TTL}: {quote(text)} is not a duration such as 1h or 30m"
    if seconds <= 0:
        return (f"{TTL}: {quote(text)} is not positive; the Secret would be deleted at once "
                "(use a duration such as 1h or 30m)")
    return ""


def expired(created, ttl, now):
    """Whether an object created at created with ttl seconds is due at now."""
    return now >= created + datetime.timedelta(seconds=ttl)


def quote(text):
    """text in double quotes, as Go's %q writes it in the Go example's messages."""
    return json.dumps(text, ensure_ascii=False)
