"""The replicator: copies Secrets and ConfigMaps annotated
replicator.tether.dev/enabled: "true" into other namespaces, as the Go
example handler (cmd/example-handler/replicator.go) does.

replicator.tether.dev/include-namespaces and exclude-namespaces (both
comma-separated) pick the namespaces; no include list means every other
namespace. Copies are labelled replicator.tether.dev/copy: "true", name their
source in replicator.tether.dev/source: "<namespace>/<name>", and are kept in
step on create, update and a reconcile timer that repairs drift (a copy
deleted or edited by hand); deleting the source deletes them. The timer and
the delete binding hold each source (tether.dev/<handler name>) until its
copies are gone, or the handler has been away past its grace.

    python3 -m tether run examples/replicator.py --name replicator

REPLICATOR_RECONCILE_INTERVAL (seconds, default 30) sets the timer. The
copies are written with the handler's own Kubernetes access (see kube.py):
it must be allowed to list namespaces, and to list, get, create, update and
delete Secrets and ConfigMaps in every namespace."""

from __future__ import annotations

import copy
import os

import kube
import tether

PREFIX = "replicator.tether.dev/"
ENABLED = PREFIX + "enabled"
INCLUDE = PREFIX + "include-namespaces"
EXCLUDE = PREFIX + "exclude-namespaces"
SOURCE = PREFIX + "source"
COPY = PREFIX + "copy"
# kubectl's record of an apply: on a Secret it holds the data, and it
# describes the source, not the copy.
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
FIELD_MANAGER = "tether-example-replicator"
# Conflicting writes of one copy in one delivery; past them the broker
# retries the delivery on its backoff.
WRITE_ATTEMPTS = 5
RECONCILE_INTERVAL = float(os.environ.get("REPLICATOR_RECONCILE_INTERVAL", "30"))
REPLICATED = (kube.SECRETS, kube.CONFIGMAPS)

# Where the copies are written; the tests put an in-memory fake here.
api: kube.Api = kube.Lazy(field_manager=FIELD_MANAGER, user_agent=FIELD_MANAGER)


class NotACopy(Exception):
    """An object stands where a copy should go and is not this source's copy."""

    def __init__(self, namespace: str, name: str, owner: str = ""):
        super().__init__(f"{namespace}/{name} is a copy of {owner}" if owner
                         else f"{namespace}/{name} exists and is not a copy; left as it is")


def sync(body, resource, logger, **_):
    """Make the copies of the source match it: one in every target
    namespace, none elsewhere. An object of the source's name that is not its
    copy is left alone and named in a permanent error (after the other
    targets are done), which becomes a Warning Event on the source."""
    meta = body["metadata"]
    key = source_key(body)
    anns = meta.get("annotations") or {}
    try:
        existing = active_namespaces(api.list(kube.NAMESPACES))
        copies = copies_of(resource, key)
    except kube.ApiError as e:
        raise tether.TemporaryError(f"listing namespaces and copies: {e}") from e
    targets = select_namespaces(existing, meta["namespace"], anns.get(INCLUDE, ""), anns.get(EXCLUDE, ""))
    skipped = []
    for ns in targets:
        try:
            ensure(resource, body, ns, copies.get(ns))
        except NotACopy as e:
            skipped.append(str(e))
        except kube.ApiError as e:
            raise tether.TemporaryError(f"replicating {key} to namespace {ns}: {e}") from e
    for ns, stale in copies.items():
        if ns not in targets:
            try:
                delete_exact(resource, stale)
            except kube.ApiError as e:
                raise tether.TemporaryError(f"removing the copy in {ns}, no longer a target: {e}") from e
            logger.info("removed the copy in %s, no longer a target", ns)
    logger.debug("replicated to %s", ", ".join(targets) or "no namespace")
    if skipped:
        raise tether.PermanentError("not replicated: " + "; ".join(skipped))


def cleanup(body, resource, logger, **_):
    """Delete every copy of the source being deleted; the hold keeps the
    source until this returns."""
    try:
        copies = copies_of(resource, source_key(body))
        for c in copies.values():
            delete_exact(resource, c)
    except kube.ApiError as e:
        raise tether.TemporaryError(f"deleting the copies: {e}") from e
    logger.info("source deleted; copies removed: %d", len(copies))


def source_key(obj):
    """How a copy names its source: "<namespace>/<name>"."""
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def copies_of(resource, key):
    """The copies of the source key, by namespace."""
    out = {}
    for c in api.list(resource, label_selector=f"{COPY}=true"):
        if is_copy_of(c, key):
            out[c["metadata"]["namespace"]] = c
    return out


def ensure(resource, src, ns, cur):
    """Create or update the copy of src in ns; cur is the copy as listed
    (None when there was none). Conflicts are retried on fresh state."""
    key, name = source_key(src), src["metadata"]["name"]
    for _ in range(WRITE_ATTEMPTS):
        if cur is None:
            try:
                api.create(resource, ns, build_copy(src, ns))
                return
            except kube.AlreadyExists:
                pass  # made since the list: read it and look again
        else:
            if not is_copy_of(cur, key):
                raise NotACopy(ns, name, _annotations(cur).get(SOURCE, ""))
            want = build_copy(src, ns, cur)
            if up_to_date(cur, want):
                return
            try:
                api.replace(resource, ns, want)
                return
            except kube.Invalid:
                # An immutable copy (or a Secret whose type changed) cannot
                # be updated: replace it.
                delete_exact(resource, cur)
                cur = None
                continue
            except (kube.Conflict, kube.NotFound):
                pass  # changed or deleted since read: read it again
        try:
            cur = api.get(resource, ns, name)
        except kube.NotFound:
            cur = None
        if cur is not None and _labels(cur).get(COPY) != "true":
            raise NotACopy(ns, name)
    raise tether.TemporaryError(f"{WRITE_ATTEMPTS} conflicting writes of {ns}/{name} in a row; trying again later")


def delete_exact(resource, obj):
    """Delete obj, but only the version that was read: a newer one, or
    another object re-created under the name, stays (a Conflict)."""
    meta = obj["metadata"]
    try:
        api.delete(resource, meta["namespace"], meta["name"], uid=meta.get("uid", ""),
                   resource_version=meta.get("resourceVersion", ""))
    except kube.NotFound:
        pass


def active_namespaces(items):
    """The names of the namespaces not being deleted (nothing can be created there)."""
    return [ns["metadata"]["name"] for ns in items
            if not ns["metadata"].get("deletionTimestamp") and (ns.get("status") or {}).get("phase") != "Terminating"]


def select_namespaces(existing, own, include, exclude):
    """The namespaces a source in own is copied to, out of the existing ones:
    those in the include list (every one when it is empty), minus those in
    the exclude list and own; sorted."""
    inc, exc = split_list(include), split_list(exclude)
    return sorted({ns for ns in existing if ns != own and ns not in exc and (not inc or ns in inc)})


def split_list(text):
    """A comma-separated list, without blanks."""
    return [part.strip() for part in text.split(",") if part.strip()]


def is_copy_of(obj, key):
    return _labels(obj).get(COPY) == "true" and _annotations(obj).get(SOURCE) == key


def tether_annotation(key):
    """Whether an annotation is in the tether.dev domain: the replicator's
    settings, the TTL, and every handler's bookkeeping (<handler>.tether.dev/...)."""
    prefix, slash, _ = key.partition("/")
    return bool(slash) and (prefix == "tether.dev" or prefix.endswith(".tether.dev"))


def build_copy(src, ns, cur=None):
    """The copy of src in ns: its payload (every top-level field but
    metadata and status: data, type, immutable...), its labels plus
    replicator.tether.dev/copy, and its annotations without tether.dev ones
    (so that a copy is never replicated, reaped or taken for handled) plus
    replicator.tether.dev/source. With cur, the existing copy, it is cur
    updated: its other metadata (uid, resourceVersion, finalizers, owners)
    and other handlers' tether.dev annotations stay."""
    out = {k: copy.deepcopy(v) for k, v in src.items() if k not in ("metadata", "status")}
    meta = out["metadata"] = copy.deepcopy(cur["metadata"]) if cur else {}
    meta["namespace"], meta["name"] = ns, src["metadata"]["name"]
    meta["labels"] = {**_labels(src), COPY: "true"}
    anns = {k: v for k, v in _annotations(src).items() if not tether_annotation(k) and k != LAST_APPLIED}
    if cur:
        anns.update((k, v) for k, v in _annotations(cur).items() if tether_annotation(k) and not k.startswith(PREFIX))
    anns[SOURCE] = source_key(src)
    meta["annotations"] = anns
    return out


def up_to_date(cur, want):
    """Whether the copy cur already is what want says: the same labels,
    annotations and payload."""
    return (_labels(cur) == _labels(want) and _annotations(cur) == _annotations(want)
            and _payload(cur) == _payload(want))


def _payload(obj):
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "status")}


def _labels(obj):
    return obj["metadata"].get("labels") or {}


def _annotations(obj):
    return obj["metadata"].get("annotations") or {}


def _register() -> None:
    """Four bindings per resource, all for sources only (copies never carry
    the enabled annotation). The timer and the delete binding keep the
    default finalizer policy, HOLD; the timer's first tick waits one interval,
    since create has just synced."""
    only = {"annotations": {ENABLED: "true"}}
    for group, version, plural in REPLICATED:
        tether.on.create(group, version, plural, id=f"create-{plural}", **only)(sync)
        tether.on.update(group, version, plural, id=f"update-{plural}", **only)(sync)
        tether.timer(group, version, plural, id=f"reconcile-{plural}", interval=RECONCILE_INTERVAL,
                     initial_delay=RECONCILE_INTERVAL, **only)(sync)
        tether.on.delete(group, version, plural, id=f"cleanup-{plural}", **only)(cleanup)


_register()
