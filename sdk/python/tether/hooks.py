"""Running the process's hooks: the startup and cleanup functions one after
the other, each until it succeeds (a TemporaryError or another exception is
retried with backoff, as Kopf retries them; a PermanentError, or running
out of retries=, is an ActivityError that stops the process), and the
probe functions once per --liveness request."""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
from collections.abc import Iterator
from typing import Any

from . import outcome
from .activities import Activity, Hook
from .errors import PermanentError, TemporaryError
from .registry import Registry
from .settings import OperatorSettings
from .types import Memo

# The first wait after a failed startup or cleanup function, doubled after
# each failure up to the maximum, unless the function's backoff= and
# max_backoff= say otherwise or a TemporaryError gives its delay.
BACKOFF = 1.0
MAX_BACKOFF = 60.0


_STOPPED = object()  # an attempt that stopping interrupted


class ActivityError(Exception):
    """A startup or cleanup function failed for good: the process stops."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


async def run(activity: Activity, registry: Registry, *, memo: Memo, settings: OperatorSettings,
              stopping: asyncio.Event | None = None) -> bool:
    """Run the activity's functions in the order registered, each until it
    succeeds; False when stopping was set while one waited to be retried
    (the later ones do not run). Raises ActivityError."""
    for hook in registry.hooks(activity):
        if not await _until_done(hook, memo, settings, stopping, registry.indices.kwargs()):
            return False
    return True


async def _until_done(hook: Hook, memo: Memo, settings: OperatorSettings, stopping: asyncio.Event | None,
                      indices: dict[str, Any]) -> bool:
    logger = logging.getLogger(f"tether.activities.{hook.activity.value}")
    what = f"{hook.activity.value} function {hook.id}"
    first, delays = _now(), _backoff(hook)
    retry = 0
    while True:
        try:
            if await _attempt(hook, _arguments(hook, logger, memo, settings, retry, first, indices), stopping) is _STOPPED:
                logger.info("stopping: %s cancelled", what)
                return False
            logger.debug("%s succeeded", what)
            return True
        except PermanentError as e:
            raise ActivityError(f"{what} failed permanently: {outcome.describe(e)}") from e
        except Exception as e:
            if hook.retries is not None and 0 <= hook.retries <= retry:
                raise ActivityError(f"{what} failed after {retry + 1} attempts: {outcome.describe(e)}") from e
            step = next(delays)
            delay = e.delay if isinstance(e, TemporaryError) and e.delay is not None else step
            logger.warning("%s failed and will be retried in %gs: %s", what, delay, outcome.describe(e),
                           exc_info=e if not isinstance(e, TemporaryError) else None)
        retry += 1
        if stopping is None:
            await asyncio.sleep(delay)
            continue
        try:
            await asyncio.wait_for(stopping.wait(), delay)
            logger.info("stopping: %s is not retried", what)
            return False
        except asyncio.TimeoutError:
            pass


async def _attempt(hook: Hook, kw: dict[str, Any], stopping: asyncio.Event | None) -> Any:
    """One call; _STOPPED when stopping comes first, which cancels an async
    function (a sync one cannot be interrupted, and is waited for)."""
    if stopping is None or not hook.is_async:
        return await call(hook, kw)
    task = asyncio.ensure_future(call(hook, kw))
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.wait({task})
    return _STOPPED


def _backoff(hook: Hook) -> Iterator[float]:
    """The waits after each failure: backoff= (or BACKOFF), doubled up to
    max_backoff= (or MAX_BACKOFF, or backoff= when that is more)."""
    most = hook.max_backoff or max(MAX_BACKOFF, hook.backoff)
    step = min(hook.backoff or BACKOFF, most)
    while True:
        yield step
        step = min(step * 2, most)


async def probe(registry: Registry, memo: Memo, settings: OperatorSettings) -> tuple[bool, dict[str, Any]]:
    """Each probe function's result under its id, and whether all returned;
    a probe that raised has {"error": message}. Probes are not retried."""
    logger = logging.getLogger("tether.activities.probe")
    results: dict[str, Any] = {}
    healthy = True
    for hook in registry.hooks(Activity.PROBE):
        try:
            results[hook.id] = await call(hook, _arguments(hook, logger, memo, settings, 0, _now(),
                                                                registry.indices.kwargs()))
        except Exception as e:
            healthy = False
            results[hook.id] = {"error": outcome.describe(e)}
            logger.warning("probe function %s failed: %s", hook.id, outcome.describe(e),
                           exc_info=e if not isinstance(e, (TemporaryError, PermanentError)) else None)
    return healthy, results


async def call(hook: Hook, kw: dict[str, Any]) -> Any:
    if hook.is_async:
        return await hook.fn(**kw)
    # The loop's default executor: the deliveries' pool is made after the
    # startup, whose settings may change its size.
    return await asyncio.get_running_loop().run_in_executor(None, functools.partial(hook.fn, **kw))


def _arguments(hook: Hook, logger: logging.Logger, memo: Memo, settings: OperatorSettings, retry: int,
               first: datetime.datetime, indices: dict[str, Any]) -> dict[str, Any]:
    """As Kopf's: started is when the first attempt started, runtime the
    time since."""
    values = {"logger": logger, "memo": memo, "settings": settings, "retry": retry, "started": first,
              "runtime": _now() - first, "activity": hook.activity.value, **indices}
    return values if hook.wants is None else {k: values[k] for k in hook.wants}
