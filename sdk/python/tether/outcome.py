"""How a function's end becomes an ack, as in the Go SDK: returning is OK
(with the patch and the return value as the result), TemporaryError is
RETRY after its delay, PermanentError is FAIL, and any other exception is
what the binding's errors= says: RETRY after the binding's backoff, FAIL, or
OK as if the function had returned None."""

from __future__ import annotations

import json
from typing import Any

from . import durations, limits
from .errors import ErrorsMode, PermanentError, TemporaryError
from .log import LOGGER
from .v1 import broker_pb2 as pb

_NAMES = {pb.OUTCOME_OK: "ok", pb.OUTCOME_RETRY: "retry", pb.OUTCOME_FAIL: "fail"}


def name(outcome: int) -> str:
    """"ok", "retry" or "fail"."""
    return _NAMES.get(outcome, "fail")


def truncate(message: str, limit: int = limits.MAX_MESSAGE) -> str:
    """Cut message to limit bytes of UTF-8 without splitting a character."""
    raw = message.encode()
    if len(raw) <= limit:
        return message
    return raw[:limit - len("…".encode())].decode(errors="ignore") + "…"


def describe(exc: BaseException) -> str:
    """The message of an exception: a Tether error's own text, else its
    type and text (a bare ValueError() says nothing by itself)."""
    if isinstance(exc, (TemporaryError, PermanentError)):
        return str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def to_json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False).encode()


def ok(delivery_id: str) -> pb.Ack:
    return pb.Ack(delivery_id=delivery_id, outcome=pb.OUTCOME_OK)


def retry(delivery_id: str, message: str, delay: float | None = None) -> pb.Ack:
    return pb.Ack(delivery_id=delivery_id, outcome=pb.OUTCOME_RETRY, message=truncate(message),
                  retry_after=durations.optional(delay))


def fail(delivery_id: str, message: str) -> pb.Ack:
    return pb.Ack(delivery_id=delivery_id, outcome=pb.OUTCOME_FAIL, message=truncate(message))


def of_error(delivery_id: str, exc: Exception, mode: ErrorsMode = ErrorsMode.TEMPORARY,
             patch: dict[str, Any] | None = None) -> pb.Ack:
    """The ack for exc; an IGNORED one is the OK of returning None, with the
    patch made before it was raised."""
    if isinstance(exc, PermanentError) or mode is ErrorsMode.PERMANENT and not isinstance(exc, TemporaryError):
        return fail(delivery_id, describe(exc))
    if isinstance(exc, TemporaryError):
        return retry(delivery_id, describe(exc), exc.delay)
    if mode is ErrorsMode.IGNORED:
        return of_return(delivery_id, patch or {}, None)
    return retry(delivery_id, describe(exc))


def of_return(delivery_id: str, patch: dict[str, Any], value: Any) -> pb.Ack:
    """The OK ack with the patch and, unless value is None, the result; a
    FAIL when either cannot be sent (not JSON, or a result too large for the
    annotation it is stored in)."""
    ack = ok(delivery_id)
    try:
        if patch:
            ack.patch = to_json(patch)
    except (TypeError, ValueError) as e:
        return fail(delivery_id, f"the patch is not JSON: {e}")
    if value is not None:
        try:
            ack.result = to_json(value)
        except (TypeError, ValueError) as e:
            return fail(delivery_id, f"the return value is not JSON: {e}")
        if len(ack.result) > limits.MAX_RESULT_BYTES:
            return fail(delivery_id, f"the return value is {len(ack.result)} bytes of JSON, more than the "
                        f"{limits.MAX_RESULT_BYTES} the broker stores; return less, or keep large state elsewhere")
    return ack


def request(ack: pb.Ack) -> pb.ConnectRequest:
    """The message carrying ack, or when it is more than the broker takes
    in one message (sending it would end the session, and the broker would
    send the same delivery again), a FAIL that says so."""
    req = pb.ConnectRequest(ack=ack)
    size = req.ByteSize()
    if size > limits.DEFAULT_MAX_MESSAGE_BYTES:
        LOGGER.error("the answer to delivery %s is %d bytes, too large for the broker; failing it",
                     ack.delivery_id, size)
        req = pb.ConnectRequest(ack=fail(ack.delivery_id, (
            f"the answer is {size} bytes, more than the {limits.DEFAULT_MAX_MESSAGE_BYTES} the broker takes "
            "in one message: patch less, or keep large state elsewhere")))
    return req
