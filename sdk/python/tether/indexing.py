"""Kopf's indices: in-memory views of a resource that the SDK keeps from
the broker's stream of an index binding (every object that matches, sent to
this instance whatever the instance shares of the deliveries), passed to
functions as keyword arguments named after the index function.

An index function returns what to index for one object: a dict merges its
keys (each key's Store gets the value), anything else goes under the key
None, and None indexes nothing (what was indexed for the object stays).
The object's values go when it is deleted or stops matching."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from .errors import ErrorsMode, PermanentError, TemporaryError
from .log import for_object
from .types import Index, Store

LOGGER = logging.getLogger("tether.indexing")
# Kopf's delay before an object that failed with errors=TEMPORARY is indexed
# again, when neither the error's delay= nor the decorator's backoff= says.
DEFAULT_BACKOFF = 60.0
# What an index's call returns when a callable filter says no: the object
# leaves the index, as one that stops matching the broker's filters does.
UNMATCHED = object()


class ObjectStore(Store[Any]):
    """The values under one key, one per object (by UID), in the order the
    objects were first indexed."""

    def __init__(self) -> None:
        self._by_uid: dict[str, Any] = {}

    def __len__(self) -> int:
        return len(self._by_uid)

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._by_uid.values()))

    def __contains__(self, value: object) -> bool:
        return value in self._by_uid.values()

    def __repr__(self) -> str:
        return repr(list(self._by_uid.values()))


class ObjectIndex(Index[Any, Any]):
    """Keys to Stores; a key whose last value goes is removed."""

    def __init__(self) -> None:
        self._stores: dict[Any, ObjectStore] = {}
        self._keys: dict[str, set[Any]] = {}  # what each object (by UID) is indexed under

    def __getitem__(self, key: Any) -> ObjectStore:
        return self._stores[key]

    def __len__(self) -> int:
        return len(self._stores)

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._stores))

    def __repr__(self) -> str:
        return repr(dict(self._stores))

    def has(self, uid: str) -> bool:
        return uid in self._keys

    def uids(self) -> list[str]:
        return list(self._keys)

    def replace(self, uid: str, result: Any) -> None:
        """Index the object's result instead of what it had."""
        entries = result if type(result) is dict else {None: result}  # strictly dict, as Kopf
        self.remove(uid)
        for key, value in entries.items():
            self._stores.setdefault(key, ObjectStore())._by_uid[uid] = value
        self._keys[uid] = set(entries)

    def remove(self, uid: str) -> None:
        for key in self._keys.pop(uid, ()):
            store = self._stores.get(key)
            if store is not None:
                store._by_uid.pop(uid, None)
                if not store._by_uid:
                    del self._stores[key]


class Indexer:
    """One index: its function, its view, and which objects are kept out of
    it after an error (errors=TEMPORARY for a while, PERMANENT for good)."""

    def __init__(self, name: str, binding_id: str, call: Callable[[dict[str, Any]], Any],
                 errors: ErrorsMode, backoff: float | None):
        self.name, self.binding_id, self.call = name, binding_id, call
        self.errors = errors
        self.backoff = DEFAULT_BACKOFF if backoff is None else backoff
        self.index = ObjectIndex()
        self.excluded: dict[str, float] = {}  # UID: monotonic time it may be indexed again (inf: never)
        self.seen: set[str] = set()  # the objects this session's stream has sent

    async def update(self, uid: str, body: dict[str, Any], log: logging.LoggerAdapter) -> None:
        self.seen.add(uid)
        if self.excluded.get(uid, 0.0) > time.monotonic():
            return
        self.excluded.pop(uid, None)
        try:
            result = await self.call(body)
        except Exception as e:
            self._failed(uid, e, log)
            return
        if result is UNMATCHED:
            self.index.remove(uid)
        elif result is not None:
            self.index.replace(uid, result)

    def _failed(self, uid: str, e: Exception, log: logging.LoggerAdapter) -> None:
        ours = isinstance(e, (TemporaryError, PermanentError))
        if isinstance(e, PermanentError) or (not ours and self.errors is ErrorsMode.PERMANENT):
            log.error("index %s: failed for good; the object is left out of it: %s", self.name, e,
                      exc_info=None if ours else e)
            self.index.remove(uid)
            self.excluded[uid] = float("inf")
        elif isinstance(e, TemporaryError) or self.errors is ErrorsMode.TEMPORARY:
            delay = e.delay if isinstance(e, TemporaryError) and e.delay is not None else self.backoff
            log.warning("index %s: failed; the object is left out of it for %gs: %s", self.name, delay, e,
                        exc_info=None if ours else e)
            self.index.remove(uid)
            self.excluded[uid] = time.monotonic() + delay
        else:  # IGNORED, Kopf's default for indices: the stale values stay
            log.warning("index %s: failed, ignored; what it had for the object stays: %s", self.name, e, exc_info=e)

    def delete(self, uid: str) -> None:
        self.index.remove(uid)
        self.excluded.pop(uid, None)
        self.seen.discard(uid)

    def begin(self) -> None:
        """A new session: its stream sends every object again."""
        self.seen = set()

    def synced(self) -> None:
        """The stream has sent every object: those it did not are gone
        (deleted while no session was up)."""
        for uid in self.index.uids():
            if uid not in self.seen:
                self.index.remove(uid)


class Indices:
    """The indices of one handler process, by binding id, and whether this
    session's streams have all sent their full lists."""

    def __init__(self, indexers: list[Indexer]):
        self.by_binding = {i.binding_id: i for i in indexers}
        self.complete = asyncio.Event()
        if not self.by_binding:
            # Nothing to wait for, even on a session for reviews only
            # (which never begins the indices).
            self.complete.set()
        self._pending: set[str] = set()

    def kwargs(self) -> dict[str, ObjectIndex]:
        return {i.name: i.index for i in self.by_binding.values()}

    def begin(self) -> None:
        """A session begins: deliveries wait until every index is complete."""
        self._pending = set(self.by_binding)
        for i in self.by_binding.values():
            i.begin()
        if self._pending:
            self.complete.clear()
        else:
            self.complete.set()

    async def take(self, binding_id: str, event_type: str, body: dict[str, Any], synced: bool) -> None:
        indexer = self.by_binding.get(binding_id)
        if indexer is None:
            LOGGER.warning("index message for binding %r, which this instance did not declare", binding_id)
            return
        if synced:
            indexer.synced()
            self._pending.discard(binding_id)
            if not self._pending:
                self.complete.set()
            return
        meta = body.get("metadata") or {}
        uid = meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        if event_type == "DELETED":
            indexer.delete(uid)
            return
        await indexer.update(uid, body, for_object(meta.get("namespace", ""), meta.get("name", ""), LOGGER,
                                                   binding=binding_id))


def caller(reg: Any) -> Callable[[dict[str, Any]], Any]:
    """The call of an index function for one object's body: its keyword
    arguments, its callable filters (UNMATCHED when one says no), a sync
    function in the loop's default executor."""
    from . import filters, kwargs  # kwargs imports the bindings; indexing is imported by them

    async def call(body: dict[str, Any]) -> Any:
        meta = body.get("metadata") or {}
        logger = for_object(meta.get("namespace", ""), meta.get("name", ""), binding=reg.spec.id)
        values = {"body": body, "spec": body.get("spec") or {}, "meta": meta, "status": body.get("status") or {},
                  "name": meta.get("name", ""), "namespace": meta.get("namespace", ""), "uid": meta.get("uid", ""),
                  "labels": meta.get("labels") or {}, "annotations": meta.get("annotations") or {},
                  "logger": logger, "type": None, "event": {"type": None, "object": body}}
        if filters.failing(reg.checks, values) is not None:
            return UNMATCHED
        kw = values if reg.wants is None else {k: values[k] for k in reg.wants}
        kw = {k: v for k, v in kw.items() if k in kwargs.INDEX}
        if reg.is_async:
            return await reg.fn(**kw)
        return await asyncio.get_running_loop().run_in_executor(None, functools.partial(reg.fn, **kw))

    return call
