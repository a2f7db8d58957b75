"""Kopf's top-level names that Tether has no counterpart for, and why: an
operator ported with ``import tether as kopf`` that reaches for one gets an
AttributeError saying what to do instead, not a bare "no attribute"."""

from __future__ import annotations

_ORDER = "the broker delivers each binding on its own, so there is no order of handlers to choose"
_LOGIN = ("the broker watches and writes with its own credentials, and the handler authenticates to the broker "
          "with a token (--token-file); for the handler's own API calls, log in with any client")
_RUN = "run the handler with tether.run(name=...) or await tether.operator(name=...)"
_WEBHOOKS = ("the broker serves the webhooks and forwards each review to the handler on its stream: no server, "
             "certificate or tunnel in the handler")
_LIMITS = ("timeouts and retries are the broker's: an attempt past timeout= is cancelled and tried again, and one "
           "past retries= fails with a Warning Event on the object; the function never sees either")
_STORAGE = ("the broker keeps the progress and last-handled records in annotations of its own "
            "(<name>.tether.dev/last-handled, result.<id>); there is no storage to choose")
_DICTS = "Tether passes and takes plain dicts: annotate with dict[str, Any]"

WHY = {
    "lifecycles": _ORDER, "get_default_lifecycle": _ORDER, "set_default_lifecycle": _ORDER,
    "login_via_pykube": _LOGIN, "login_via_client": _LOGIN, "login_via_async_client": _LOGIN,
    "login_with_kubeconfig": _LOGIN, "login_with_service_account": _LOGIN, "LoginError": _LOGIN,
    "AiohttpSession": _LOGIN,
    "spawn_tasks": _RUN, "run_tasks": _RUN,
    "WebhookServerProtocol": _WEBHOOKS, "WebhookClientConfig": _WEBHOOKS,
    "WebhookClientConfigService": _WEBHOOKS, "WebhookFn": _WEBHOOKS,
    "HandlerTimeoutError": _LIMITS, "HandlerRetriesError": _LIMITS,
    "DiffBaseStorage": _STORAGE, "AnnotationsDiffBaseStorage": _STORAGE, "StatusDiffBaseStorage": _STORAGE,
    "MultiDiffBaseStorage": _STORAGE, "ProgressRecord": _STORAGE, "ProgressStorage": _STORAGE,
    "AnnotationsProgressStorage": _STORAGE, "StatusProgressStorage": _STORAGE, "MultiProgressStorage": _STORAGE,
    "SmartProgressStorage": _STORAGE,
    "build_object_reference": "write the dict: {apiVersion, kind, name, namespace, uid} of the body",
    "ObjectReference": _DICTS, "OwnerReference": _DICTS,
    "FieldSpec": "a field is a dotted string or a tuple of keys", "FieldPath": "a field path is a tuple of keys",
    "HandlerId": "binding ids are strings (id=)",
    "PatchFn": "a function's patch is a tether.Patch; there are no patch functions",
    "ObjectLogger": "a function's logger is a logging.LoggerAdapter: annotate with tether.Logger",
    "LocalObjectLogger": "a function's logger is a logging.LoggerAdapter: annotate with tether.Logger",
    "DaemonStoppingReason": "stopped.reason is a string",
    "SyncDaemonStopperChecker": "a sync daemon's stopped is a tether.DaemonStopped",
    "AsyncDaemonStopperChecker": "an async daemon's stopped is a tether.AsyncDaemonStopped",
    "EVERYTHING": "one binding names one resource: register the function once for each resource",
}


# kopf.on's decorators that tether.on has no counterpart for
WHY_ON = {"this": "it is Kopf's former name of kopf.on.subhandler: use tether.subhandler"}


def missing(name: str, module: str = "tether", why: dict[str, str] = WHY) -> AttributeError:
    """The error for module.<name>: with Kopf's reason when it is one of
    Kopf's names, else Python's usual message."""
    reason = why.get(name)
    if reason is None:
        return AttributeError(f"module {module!r} has no attribute {name!r}")
    kopf = "kopf" + module.removeprefix("tether")
    return AttributeError(f"module {module!r} has no attribute {name!r}: {kopf}.{name} has no counterpart in "
                          f"Tether: {reason} (see docs/from-kopf.md)")
