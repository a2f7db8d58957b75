"""Kopf's flags for an embedded operator (tether.operator(stop_flag=,
ready_flag=)): an asyncio.Event or Future, a threading.Event or a
concurrent.futures.Future, set from any thread or event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Union

Flag = Union[asyncio.Event, asyncio.Future, threading.Event, concurrent.futures.Future]
_TYPES = (asyncio.Event, asyncio.Future, threading.Event, concurrent.futures.Future)
# How often a threading.Event is looked at: it has no callback, and a
# thread blocked on it for good would outlive the operator.
THREAD_EVENT_POLL = 0.5


def check(name: str, flag: Any) -> None:
    if flag is not None and not isinstance(flag, _TYPES):
        raise TypeError(f"{name}= is an asyncio.Event or Future, a threading.Event or a concurrent.futures.Future, "
                        f"not {flag!r}")


async def wait(flag: Flag) -> None:
    """Return once flag is set (a future: done, whatever its result)."""
    if isinstance(flag, asyncio.Event):
        await flag.wait()
    elif isinstance(flag, asyncio.Future):
        await asyncio.wait({flag})
    elif isinstance(flag, concurrent.futures.Future):
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        flag.add_done_callback(lambda _: loop.call_soon_threadsafe(done.set))
        await done.wait()
    else:
        loop = asyncio.get_running_loop()
        while not await loop.run_in_executor(None, flag.wait, THREAD_EVENT_POLL):
            pass


def raise_(flag: Flag | None) -> None:
    """Set flag (a future's result is None); one already set stays as it is."""
    if flag is None:
        return
    if isinstance(flag, (asyncio.Event, threading.Event)):
        flag.set()
    elif isinstance(flag, asyncio.Future):
        # It may belong to another thread's loop.
        flag.get_loop().call_soon_threadsafe(lambda: flag.done() or flag.set_result(None))
    elif not flag.done():
        try:
            flag.set_result(None)
        except concurrent.futures.InvalidStateError:
            pass  # set meanwhile by another thread
