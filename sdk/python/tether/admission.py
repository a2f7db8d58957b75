"""The answer to an admission review, as in the Go SDK: returning allows
(a mutate function's ``patch`` becomes the RFC 6902 JSON patch the API
server applies), AdmissionError refuses, and any other exception is a
failure of the webhook, for the binding's failure policy to decide."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import outcome, patch
from .bindings import Kind
from .errors import AdmissionError
from .v1 import broker_pb2 as pb


class MutationError(Exception):
    """A mutate function's patch cannot be answered."""


def _warnings(warnings: Iterable[Any]) -> list[str]:
    return [outcome.truncate(str(w)) for w in warnings]


def refusal(e: AdmissionError, warnings: Iterable[Any]) -> pb.AdmissionResponse:
    code = e.code if isinstance(e.code, int) and 400 <= e.code <= 599 else 0  # 0: the broker's 403
    return pb.AdmissionResponse(allowed=False, message=outcome.truncate(str(e) or "denied"), code=code,
                                warnings=_warnings(warnings))


def allowed(kind: Kind, original: dict[str, Any] | None, merge_patch: dict[str, Any],
            warnings: Iterable[Any]) -> pb.AdmissionResponse:
    """Allow; for a mutate binding with the JSON patch from the request's
    object to that object with merge_patch applied. A validate function's
    patch is ignored, as the Go SDK ignores its changes."""
    resp = pb.AdmissionResponse(allowed=True, warnings=_warnings(warnings))
    if kind is not Kind.MUTATE or not merge_patch:
        return resp
    if original is None:
        raise MutationError("the review has no object to mutate (a DELETE or CONNECT): leave patch empty")
    ops = patch.json_patch(original, patch.merge(original, merge_patch))
    if ops:
        try:
            resp.patch = outcome.to_json(ops)
        except (TypeError, ValueError) as e:
            raise MutationError(f"the patch is not JSON: {e}") from None
    return resp
