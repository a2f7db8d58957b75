"""Kopf's type names, for the annotations of ported functions
(``def created(spec: tether.Spec, logger: tether.Logger, **_)``): each names
what Tether passes, which is a plain value (a dict, a tuple, a string) and
not one of Kopf's live views."""

from __future__ import annotations

import enum
import logging
from collections.abc import Collection, Mapping
from typing import Any, Generic, Literal, TypedDict, TypeVar, Union

from .delivery import DiffItem

# The object and its parts, as the broker saw it: plain dicts (Kopf: views).
Body = dict[str, Any]
RawBody = dict[str, Any]
Spec = dict[str, Any]
Meta = dict[str, Any]
Status = dict[str, Any]
Labels = dict[str, str]
Annotations = dict[str, str]
BodyEssence = dict[str, Any]

# The changes of an update: a tuple of DiffItem.
Diff = tuple[DiffItem, ...]

# What a function's ``logger`` is: Tether passes a LoggerAdapter naming the object.
Logger = Union[logging.Logger, logging.LoggerAdapter]

RawEventType = Literal["ADDED", "MODIFIED", "DELETED"]
# A review's operation.
Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class RawEvent(TypedDict):
    """An event function's ``event``: the watch event's type and object."""

    type: str
    object: dict[str, Any]


class UserInfo(TypedDict):
    """A review's ``userinfo``: who made the request."""

    username: str
    groups: list[str]


class DiffOperation(str, enum.Enum):
    """A DiffItem's operation; equal to the plain string Tether passes."""

    ADD = "add"
    CHANGE = "change"
    REMOVE = "remove"


class Reason(str, enum.Enum):
    """A function's ``reason``; equal to the plain string Tether passes.
    Kopf's four, and Tether's kinds of delivery besides."""

    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    RESUME = "resume"
    FIELD = "field"
    EVENT = "event"
    TICK = "tick"
    DAEMON = "daemon"
    VALIDATE = "validate"
    MUTATE = "mutate"


class Memo(dict):  # type: ignore[type-arg]
    """A dict whose keys are also attributes (``memo.lock = ...``): what
    startup, cleanup and probe functions get as ``memo``, one for the process
    (``tether.operator(memo=...)``, default an empty Memo), and what each
    object's functions get, a shallow copy of it per object kept in this
    process (memos.py)."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(f"the memo has no {key!r}") from None

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value

    def __delattr__(self, key: str) -> None:
        try:
            del self[key]
        except KeyError:
            raise AttributeError(f"the memo has no {key!r}") from None


K = TypeVar("K")
V = TypeVar("V")


class Store(Collection[V], Generic[V]):
    """Kopf's values under one index key: a read-only collection, never
    empty (tether.index keeps them; see indexing.py)."""


class Index(Mapping[K, Store[V]], Generic[K, V]):
    """Kopf's in-memory index: a read-only mapping of keys to Stores, kept
    by the SDK from the broker's stream of the indexed resource and passed
    to functions under the index function's name."""


# A review's HTTP headers and TLS peer (Kopf's webhook arguments): both
# empty in Tether, where the API server's request ends at the broker.
Headers = Mapping[str, str]
SSLPeer = Mapping[str, Any]
