"""The exceptions a handler function raises to choose its outcome, and the
one the runner raises when the broker refuses the handler."""

from __future__ import annotations

import datetime
import enum


class TemporaryError(Exception):
    """Try the delivery again: the ack is RETRY, after ``delay`` seconds (a
    number or a timedelta). Without a delay the binding's backoff decides
    (Kopf's default is 60 s; Tether leaves it to ``backoff=``)."""

    def __init__(self, message: str = "", delay: float | datetime.timedelta | None = None):
        super().__init__(message)
        if isinstance(delay, datetime.timedelta):
            delay = delay.total_seconds()
        if delay is not None and (isinstance(delay, bool) or not isinstance(delay, (int, float))):
            raise TypeError(f"TemporaryError delay must be seconds or a timedelta, not {delay!r}")
        # A negative delay means "as soon as the backoff allows", as in Go.
        self.delay = None if delay is None or delay <= 0 else float(delay)


class ErrorsMode(enum.Enum):
    """What an exception other than TemporaryError and PermanentError means,
    per binding (Kopf's errors=): TEMPORARY retries it (the default),
    PERMANENT fails the delivery for good, IGNORED logs it and answers as if
    the function had returned None."""

    TEMPORARY = "temporary"
    PERMANENT = "permanent"
    IGNORED = "ignored"


class PermanentError(Exception):
    """Give up: the ack is FAIL and the broker does not try again; the
    message becomes a Kubernetes Event on the object."""


class AdmissionError(PermanentError):
    """Refuse an admission request (from a validate or mutate function). The
    client sees ``message`` and the HTTP status ``code``: 400 to 599, any
    other value (None included) means 403 Forbidden. Kopf's default code is
    500; a refusal is not a server error, so Tether's is 403."""

    def __init__(self, message: str = "", code: int | None = None):
        super().__init__(message)
        self.code = code


class RejectedError(Exception):
    """The broker refused the handler's Hello: a binding it cannot serve, a
    missing permission, a bad token. Trying again cannot help."""

    def __init__(self, handler: str, code: str, message: str):
        super().__init__(f"broker rejected handler {handler!r}: {code}: {message}")
        self.handler = handler
        self.code = code
        self.message = message
