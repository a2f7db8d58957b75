"""Kopf's per-object ``memo``: each object's functions share a Memo that
starts as a shallow copy of the process's (``tether.operator(memo=...)``)
and lives in this process until the object's deletion is handled.

It is memory of one process, as Kopf's is of one operator: deliveries for
an object may move to another instance (another process starts a fresh
copy), and a restart forgets it. Keep anything that must last on the
object, in the result or in patch.status."""

from __future__ import annotations

import copy
import threading

from .types import Memo


class Memos:
    """The memos of the objects this process has handled, by UID."""

    def __init__(self, base: Memo | None = None):
        self.base = base if base is not None else Memo()
        self._by_uid: dict[str, Memo] = {}
        self._lock = threading.Lock()  # sync functions run on threads

    def of(self, uid: str) -> Memo:
        """The object's memo, made from the base on first use; an object
        without a UID yet (a review of a create) gets a copy of its own."""
        if not uid:
            return Memo(copy.copy(dict(self.base)))
        with self._lock:
            memo = self._by_uid.get(uid)
            if memo is None:
                memo = self._by_uid[uid] = Memo(copy.copy(dict(self.base)))
            return memo

    def forget(self, uid: str) -> None:
        """Drop the object's memo: its deletion has been handled."""
        with self._lock:
            self._by_uid.pop(uid, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_uid)
