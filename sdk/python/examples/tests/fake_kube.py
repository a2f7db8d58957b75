"""An in-memory kube.Api for the examples' tests: objects by resource,
namespace and name, with resourceVersions, uids, the API server's answers
for the cases the examples act on (NotFound, AlreadyExists, Conflict on a
stale version or a failed delete precondition), and errors a test plans for
the next calls."""

from __future__ import annotations

import copy
import itertools

import kube


class FakeKube:
    def __init__(self, namespaces=(), objects=()):
        self.store = {}  # (plural, namespace, name) -> object
        self.planned = {}  # method -> errors to raise on its next calls, in order
        self.calls = []  # (method, plural, namespace, name), in order
        self._versions = itertools.count(1)
        for ns in namespaces:
            self.add(kube.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        for resource, obj in objects:
            self.add(resource, obj)

    def add(self, resource, obj):
        """Store obj as if created, keeping the uid it has; return the stored copy."""
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        meta.setdefault("uid", f"uid-{meta.get('namespace', '')}-{meta['name']}-{next(self._versions)}")
        meta["resourceVersion"] = str(next(self._versions))
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        self.store[(resource[2], meta.get("namespace", ""), meta["name"])] = obj
        return copy.deepcopy(obj)

    def plan(self, method, *errors):
        """Raise these errors on the next calls of method, one a call."""
        self.planned.setdefault(method, []).extend(errors)

    def object(self, resource, namespace, name):
        """The stored object, or None."""
        return copy.deepcopy(self.store.get((resource[2], namespace, name)))

    def _enter(self, method, resource, namespace, name=""):
        self.calls.append((method, resource[2], namespace, name))
        if self.planned.get(method):
            raise self.planned[method].pop(0)

    def _get(self, resource, namespace, name):
        obj = self.store.get((resource[2], namespace, name))
        if obj is None:
            raise kube.NotFound(404, "NotFound", f'{resource[2]} "{name}" not found')
        return obj

    def list(self, resource, namespace="", label_selector=""):
        self._enter("list", resource, namespace)
        # Only key=value selectors: what the examples use.
        want = dict(part.split("=", 1) for part in label_selector.split(",") if part)
        return [copy.deepcopy(o) for (plural, ns, _), o in sorted(self.store.items())
                if plural == resource[2] and (not namespace or ns == namespace)
                and all((o["metadata"].get("labels") or {}).get(k) == v for k, v in want.items())]

    def get(self, resource, namespace, name):
        self._enter("get", resource, namespace, name)
        return copy.deepcopy(self._get(resource, namespace, name))

    def create(self, resource, namespace, obj):
        name = obj["metadata"]["name"]
        self._enter("create", resource, namespace, name)
        if (resource[2], namespace, name) in self.store:
            raise kube.AlreadyExists(409, "AlreadyExists", f'{resource[2]} "{name}" already exists')
        obj = copy.deepcopy(obj)
        for field in ("uid", "resourceVersion", "creationTimestamp"):
            obj["metadata"].pop(field, None)  # the API server's to set
        obj["metadata"]["namespace"] = namespace
        return self.add(resource, obj)

    def replace(self, resource, namespace, obj):
        name = obj["metadata"]["name"]
        self._enter("replace", resource, namespace, name)
        cur = self._get(resource, namespace, name)
        if obj["metadata"].get("resourceVersion") != cur["metadata"]["resourceVersion"]:
            raise kube.Conflict(409, "Conflict", "the object has been modified")
        return self.add(resource, {**obj, "metadata": {**obj["metadata"], "uid": cur["metadata"]["uid"]}})

    def delete(self, resource, namespace, name, *, uid="", resource_version=""):
        self._enter("delete", resource, namespace, name)
        cur = self._get(resource, namespace, name)
        if (uid and uid != cur["metadata"]["uid"]) or (
                resource_version and resource_version != cur["metadata"]["resourceVersion"]):
            raise kube.Conflict(409, "Conflict", "Precondition failed")
        del self.store[(resource[2], namespace, name)]
