"""The process's own hooks, as Kopf has them: ``@tether.on.startup``
(before the handler connects), ``@tether.on.cleanup`` (after it has said
goodbye) and ``@tether.on.probe`` (answers of the --liveness endpoint).
They belong to the process and not to the broker: they are in no Hello.
``@tether.on.login`` is accepted and never called: the broker watches
with its own credentials."""

from __future__ import annotations

import dataclasses
import enum
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from . import bindings, durations, kwargs
from .log import LOGGER
from .registry import Registry, get_default_registry

F = TypeVar("F", bound=Callable[..., Any])

# What startup, cleanup and probe functions may take.
ARGUMENTS = ("logger", "memo", "settings", "retry", "started", "runtime", "activity")
# Kopf's options with no counterpart here, and what to do instead.
_REFUSED = {
    "param": "close over the value, or use functools.partial",
    "errors": "raise tether.PermanentError to stop the process; other exceptions are retried with backoff",
    "timeout": "bound the function's own waits (asyncio.wait_for); it runs until it returns",
}


class Activity(enum.Enum):
    """When the process runs a hook; the value names it in logs."""

    STARTUP = "startup"
    CLEANUP = "cleanup"
    PROBE = "probe"


@dataclasses.dataclass(frozen=True)
class Hook:
    """A startup, cleanup or probe function and its options; durations in
    seconds, 0 meaning the default."""

    id: str
    activity: Activity
    fn: Callable[..., Any]
    is_async: bool
    wants: frozenset[str] | None  # the arguments fn declares; None: **kwargs
    retries: int | None = None  # retries after the first attempt; None or negative: forever
    backoff: float = 0.0
    max_backoff: float = 0.0


def startup(fn: F | None = None, *, id: str | None = None, retries: int | None = None,
            backoff: float | None = None, max_backoff: float | None = None, registry: Registry | None = None,
            **unsupported: Any) -> Any:
    """A function run before the handler connects, after the previous one
    succeeded, in the order registered: a TemporaryError or another
    exception is retried with backoff, a PermanentError stops the process.
    It may change ``settings``, which then make the Hello."""
    return _hook(Activity.STARTUP, fn, id, retries, backoff, max_backoff, registry, unsupported)


def cleanup(fn: F | None = None, *, id: str | None = None, retries: int | None = None,
            backoff: float | None = None, max_backoff: float | None = None, registry: Registry | None = None,
            **unsupported: Any) -> Any:
    """A function run when the handler stops, after the stream has drained
    and the goodbye is said (SIGTERM, or the end of tether.operator()),
    once the startup functions have succeeded; retried as they are."""
    return _hook(Activity.CLEANUP, fn, id, retries, backoff, max_backoff, registry, unsupported)


def probe(fn: F | None = None, *, id: str | None = None, registry: Registry | None = None,
          **unsupported: Any) -> Any:
    """A function whose return value (JSON) the --liveness endpoint answers
    under its id; run on a request, at most every few seconds, never retried."""
    return _hook(Activity.PROBE, fn, id, None, None, None, registry, unsupported)


LOGIN_IGNORED = ("is never called: the broker watches and writes with its own credentials, and the handler "
                 "authenticates to the broker with a token (--token-file, default the pod's ServiceAccount token); "
                 "for the handler's own API calls, log in with any client in a startup function")


@dataclasses.dataclass
class ConnectionInfo:
    """What a Kopf login function returns, so that one ported as it is
    still loads; Tether never calls login functions, and nothing reads it."""

    server: str = ""
    ca_path: str | None = None
    ca_data: str | bytes | None = None
    insecure: bool | None = None
    username: str | None = None
    password: str | None = None
    scheme: str | None = None
    token: str | None = None
    certificate_path: str | None = None
    certificate_data: str | bytes | None = None
    private_key_path: str | None = None
    private_key_data: str | bytes | None = None
    default_namespace: str | None = None
    priority: int = 0
    expiration: Any = None


def login(*args: Any, **_: Any) -> Any:
    """Kopf's login hook, accepted so that a ported operator loads, and
    never called: there is no login for the SDK to make. Saying so once,
    as a warning, is better than a port that fails on a function it does
    not need."""

    def decorator(fn: F) -> F:
        LOGGER.warning("@tether.on.login function %s %s", getattr(fn, "__qualname__", fn), LOGIN_IGNORED)
        return fn

    if len(args) == 1 and callable(args[0]):
        return decorator(args[0])
    return decorator


def _hook(activity: Activity, fn: Callable[..., Any] | None, id: str | None, retries: Any, backoff: Any,
          max_backoff: Any, registry: Registry | None, unsupported: dict[str, Any]) -> Any:
    where = f"@tether.on.{activity.value}()"
    if unsupported:
        name = sorted(unsupported)[0]
        if name in _REFUSED:
            raise TypeError(f"{where}: Kopf's {name}= has no counterpart: {_REFUSED[name]}")
        raise TypeError(f"{where} got an unexpected keyword argument {name!r}")
    try:
        first, most = _backoff(retries, backoff, max_backoff)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{where}: {e}") from None

    def decorator(f: F) -> F:
        try:
            if not callable(f):
                raise TypeError(f"{f!r} is not a function")
            hook_id = id if id is not None else getattr(f, "__name__", "")
            if not isinstance(hook_id, str) or not hook_id:
                raise ValueError("the function has no name: pass id=")
            reg = registry if registry is not None else get_default_registry()
            wants = kwargs.declared(f, ARGUMENTS + reg.index_names(), f"{activity.value} functions")
            is_async = inspect.iscoroutinefunction(f) or inspect.iscoroutinefunction(getattr(f, "__call__", None))
            after_first = None if retries is None else bindings.retries_after_first(retries)
            hook = Hook(hook_id, activity, f, is_async, wants, after_first, first, most)
            reg.add_hook(hook)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{where} on {getattr(f, '__qualname__', f)!s}: {e}") from None
        return f

    # Kopf writes @kopf.on.startup(); @tether.on.startup without the call works too.
    return decorator if fn is None else decorator(fn)


def _backoff(retries: Any, backoff: Any, max_backoff: Any) -> tuple[float, float]:
    """Check retries=, and backoff= and max_backoff= in seconds (0: unset)."""
    if retries is not None:
        bindings.retries_after_first(retries)  # checked here; _hook converts it
    first = durations.seconds("backoff", backoff) if backoff is not None else 0.0
    most = durations.seconds("max_backoff", max_backoff) if max_backoff is not None else 0.0
    if first and most and first > most:
        raise ValueError(f"backoff={first} is more than max_backoff={most}")
    return first, most
