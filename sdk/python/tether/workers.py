"""The threads that run sync functions, as a ThreadPoolExecutor would, for
less per call: a call is a job on a queue and a future of the event loop,
and the calls that end while the loop is busy are settled together, with
one wake-up of the loop for all of them. Through run_in_executor a call
pays for two futures chained across threads and one wake-up each; those
were a third of the Python handler's CPU per delivery (a handler storing
a result, plain functions): test/bench/sdkpace."""

from __future__ import annotations

import asyncio
import collections
import queue
import threading
from collections.abc import Callable
from typing import Any

_STOP = None  # a job that ends the thread taking it


class Workers:
    """At most size threads, started as calls need them (named
    <prefix>_<n>), serving the event loop of the first run; shutdown lets
    the idle ones end and those running end after their call."""

    def __init__(self, size: int, prefix: str = "tether"):
        if size < 1:
            raise ValueError(f"size must be at least 1, not {size}")
        self.size = size
        self.prefix = prefix
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for a job, or about to
        self._ended: collections.deque = collections.deque()  # (future, value, error) to settle on the loop
        self._woken = False  # a settle is scheduled on the loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = False

    async def run(self, fn: Callable[[], Any]) -> Any:
        """fn() in one of the threads: its value, or what it raised.
        Cancelling the caller does not stop fn; its outcome is dropped."""
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError("Workers serve one event loop")
        if self._stopped:
            raise RuntimeError("cannot run a function after shutdown")
        fut = loop.create_future()
        with self._lock:
            if self._idle > 0:
                self._idle -= 1
                start = False
            else:
                start = len(self._threads) < self.size
        if start:
            t = threading.Thread(target=self._work, name=f"{self.prefix}_{len(self._threads)}")
            self._threads.append(t)
            t.start()
        self._jobs.put((fn, fut))
        return await fut

    def grow(self, n: int) -> None:
        """Allow n threads more (fewer for n < 0: none is ended, but no
        new one starts until the threads are fewer than the size)."""
        with self._lock:
            self.size += n

    def shutdown(self) -> None:
        """End every thread once it is idle; calls not yet started are
        dropped (their callers are cancelled with the loop)."""
        self._stopped = True
        for _ in self._threads:
            self._jobs.put(_STOP)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            fn, fut = job
            try:
                ended = (fut, fn(), None)
            except BaseException as e:  # the caller gets it, as from a future
                ended = (fut, None, e)
            with self._lock:
                self._idle += 1
                self._ended.append(ended)
                wake, self._woken = not self._woken, True
            if wake:
                try:
                    self._loop.call_soon_threadsafe(self._settle)
                except RuntimeError:  # the loop is closed: nobody waits
                    pass
            del job, fn, fut, ended

    def _settle(self) -> None:
        with self._lock:
            ended, self._ended = self._ended, collections.deque()
            self._woken = False
        for fut, value, error in ended:
            if fut.cancelled():
                continue
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(value)
