"""The replicator, through tether.testing's FakeBroker (the deliveries the
broker would make) and an in-memory Kubernetes API; the same cases as the
Go example's replicator_test.go, and the bindings it declares."""

import copy
import unittest

import kube
import replicator
import tether
from tether.testing import FAIL, OK, RETRY, FakeBroker

from .fake_kube import FakeKube

SECRETS = kube.SECRETS


def source(**annotations):
    """A Secret in src that asks to be replicated to a and b, not c."""
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque", "data": {"password": "czNjcjN0"},
        "metadata": {
            "name": "db", "namespace": "src", "uid": "uid-src", "resourceVersion": "42",
            "finalizers": ["tether.dev/replicator"], "labels": {"app": "db"},
            "annotations": {
                replicator.ENABLED: "true", replicator.INCLUDE: "a,b", replicator.EXCLUDE: "c",
                "replicator.tether.dev/last-handled": "{}", "ttl.tether.dev/ttl": "1h",
                replicator.LAST_APPLIED: '{"data":{"password":"czNjcjN0"}}', "team": "storage",
                **annotations,
            },
        },
    }


class Pure(unittest.TestCase):
    def test_select_namespaces(self):
        every = ["a", "b", "c", "d", "kube-system"]
        for own, include, exclude, want in [
            ("a", "", "", ["b", "c", "d", "kube-system"]),  # every other namespace
            ("a", "b,c", "", ["b", "c"]),
            ("a", "", "d,kube-system", ["b", "c"]),
            ("a", "b,c,d", "d", ["b", "c"]),  # exclude wins over include
            ("a", "a,b", "", ["b"]),  # never the source's own
            ("a", " b , ,c ", " ", ["b", "c"]),  # blanks ignored
            ("a", "b,missing", "", ["b"]),  # included namespaces that do not exist are skipped
            ("a", "a", "", []),
        ]:
            with self.subTest(include=include, exclude=exclude):
                self.assertEqual(replicator.select_namespaces(every, own, include, exclude), want)

    def test_active_namespaces_skip_terminating(self):
        items = [{"metadata": {"name": "live"}},
                 {"metadata": {"name": "going", "deletionTimestamp": "2026-01-01T00:00:00Z"}},
                 {"metadata": {"name": "phase"}, "status": {"phase": "Terminating"}}]
        self.assertEqual(replicator.active_namespaces(items), ["live"])

    def test_tether_annotation(self):
        for key, want in {replicator.ENABLED: True, replicator.SOURCE: True, "ttl.tether.dev/ttl": True,
                          "tether.dev/anything": True, "example.tether.dev/last-handled": True,
                          "nottether.dev/x": False, "example.com/tether.dev": False, "team": False}.items():
            self.assertIs(replicator.tether_annotation(key), want, key)

    def test_a_new_copy_carries_the_payload_and_no_tether_annotations(self):
        c = replicator.build_copy(source(), "a")
        self.assertEqual(c["metadata"], {
            "namespace": "a", "name": "db", "labels": {"app": "db", replicator.COPY: "true"},
            "annotations": {"team": "storage", replicator.SOURCE: "src/db"}})
        self.assertEqual((c["data"], c["type"]), ({"password": "czNjcjN0"}, "Opaque"))
        c["data"]["password"] = "x"
        self.assertEqual(source()["data"]["password"], "czNjcjN0", "the copy shares data with the source")

    def test_an_existing_copy_is_updated_in_place(self):
        cur = replicator.build_copy(source(), "a")
        cur["metadata"].update(uid="uid-copy", resourceVersion="7", finalizers=["other.example.com/keep"])
        cur["metadata"]["annotations"].update({"audit.tether.dev/last-handled": "{}", "stale": "gone from the source",
                                               replicator.INCLUDE: "x"})
        want = replicator.build_copy(source(), "a", cur)
        meta = want["metadata"]
        self.assertEqual((meta["uid"], meta["resourceVersion"], meta["finalizers"]),
                         ("uid-copy", "7", ["other.example.com/keep"]))
        self.assertEqual(meta["annotations"], {"team": "storage", replicator.SOURCE: "src/db",
                                               "audit.tether.dev/last-handled": "{}"})
        self.assertFalse(replicator.up_to_date(cur, want))
        self.assertTrue(replicator.up_to_date(want, replicator.build_copy(source(), "a", want)))

    def test_up_to_date_sees_payload_drift(self):
        cur = replicator.build_copy(source(), "a")
        for change in ({"data": {"password": "b3RoZXI="}}, {"immutable": True}):
            drifted = {**copy.deepcopy(cur), **change}
            self.assertFalse(replicator.up_to_date(drifted, replicator.build_copy(source(), "a", drifted)), change)


class Bindings(unittest.TestCase):
    def test_sources_only_and_held(self):
        specs = {r.spec.id: r.spec for r in tether.get_default_registry() if r.fn in (replicator.sync, replicator.cleanup)}
        self.assertEqual(sorted(specs), sorted(f"{kind}-{plural}" for plural in ("secrets", "configmaps")
                                               for kind in ("create", "update", "reconcile", "cleanup")))
        for spec in specs.values():
            self.assertEqual(spec.annotations, ((replicator.ENABLED, "equals", "true"),), spec.id)
            self.assertIsNone(spec.finalizer, f"{spec.id}: the default, HOLD for the timer and delete bindings")
            self.assertFalse(spec.optional, spec.id)
        timer = specs["reconcile-secrets"]
        self.assertEqual((timer.interval, timer.initial_delay), (replicator.RECONCILE_INTERVAL,) * 2)


class Deliveries(unittest.TestCase):
    def setUp(self):
        self.broker = FakeBroker()
        self.kube = FakeKube(namespaces=["src", "a", "b", "c", "old"])
        self.addCleanup(setattr, replicator, "api", replicator.api)
        replicator.api = self.kube

    def copy_in(self, ns, resource=SECRETS):
        return self.kube.object(resource, ns, "db")

    def test_create_copies_into_the_targets_only(self):
        got = self.broker.create(source(), binding="create-secrets")
        self.assertEqual(got.outcome, OK, got.message)
        for ns in ("a", "b"):
            c = self.copy_in(ns)
            self.assertTrue(replicator.is_copy_of(c, "src/db"), ns)
            self.assertEqual(c["data"], {"password": "czNjcjN0"})
            self.assertNotIn(replicator.ENABLED, c["metadata"]["annotations"], "a copy would be a source")
        for ns in ("c", "old"):
            self.assertIsNone(self.copy_in(ns), ns)

    def test_configmaps_too(self):
        cm = {**source(), "kind": "ConfigMap", "data": {"k": "v"}}
        del cm["type"]
        self.assertEqual(self.broker.create(cm, binding="create-configmaps").outcome, OK)
        self.assertEqual(self.copy_in("a", kube.CONFIGMAPS)["data"], {"k": "v"})
        self.assertIsNone(self.copy_in("a"), "a ConfigMap copied as a Secret")

    def test_a_foreign_object_is_left_alone_and_stale_targets_pruned(self):
        self.kube.add(SECRETS, {"apiVersion": "v1", "kind": "Secret", "data": {"password": "bWluZQ=="},
                                "metadata": {"name": "db", "namespace": "b"}})
        self.kube.add(SECRETS, replicator.build_copy(source(), "old"))
        got = self.broker.create(source(), binding="create-secrets")
        self.assertEqual(got.outcome, FAIL)
        self.assertIn("b/db exists and is not a copy", got.message)
        self.assertTrue(replicator.is_copy_of(self.copy_in("a"), "src/db"), "the other target was not done")
        self.assertEqual(self.copy_in("b")["data"], {"password": "bWluZQ=="})
        self.assertIsNone(self.copy_in("old"), "a copy stays where it is no longer a target")

    def test_another_sources_copy_is_named(self):
        other = source()
        other["metadata"]["namespace"] = "elsewhere"
        self.kube.add(SECRETS, replicator.build_copy(other, "a"))
        got = self.broker.create(source(), binding="create-secrets")
        self.assertEqual(got.outcome, FAIL)
        self.assertIn("a/db is a copy of elsewhere/db", got.message)

    def test_update_follows_the_source(self):
        self.broker.create(source(), binding="create-secrets")
        new = source(**{replicator.INCLUDE: "a"})
        new["data"] = {"password": "bmV3"}
        got = self.broker.update(source(), new, binding="update-secrets")
        self.assertEqual(got.outcome, OK, got.message)
        self.assertEqual(self.copy_in("a")["data"], {"password": "bmV3"})
        self.assertIsNone(self.copy_in("b"), "b left the include list")

    def test_the_timer_repairs_drift(self):
        self.broker.create(source(), binding="create-secrets")
        self.kube.delete(SECRETS, "a", "db")
        edited = self.copy_in("b")
        edited["data"] = {"password": "aGFja2Vk"}
        self.kube.replace(SECRETS, "b", edited)
        got = self.broker.tick(source(), binding="reconcile-secrets")
        self.assertEqual(got.outcome, OK, got.message)
        for ns in ("a", "b"):
            self.assertEqual(self.copy_in(ns)["data"], {"password": "czNjcjN0"}, ns)

    def test_a_current_copy_is_not_written(self):
        self.broker.create(source(), binding="create-secrets")
        del self.kube.calls[:]
        self.assertEqual(self.broker.tick(source(), binding="reconcile-secrets").outcome, OK)
        self.assertEqual([c[0] for c in self.kube.calls], ["list", "list"], "a tick with nothing to do writes")

    def test_a_conflict_is_retried_on_fresh_state(self):
        self.broker.create(source(), binding="create-secrets")
        self.kube.plan("replace", kube.Conflict(409, "Conflict", "the object has been modified"))
        new = source()
        new["data"] = {"password": "bmV3"}
        self.assertEqual(self.broker.update(source(), new, binding="update-secrets").outcome, OK)
        self.assertEqual(self.copy_in("a")["data"], {"password": "bmV3"})

    def test_an_immutable_copy_is_replaced(self):
        self.broker.create(source(), binding="create-secrets")
        before = self.copy_in("a")["metadata"]["uid"]
        self.kube.plan("replace", kube.Invalid(422, "Invalid", "field is immutable"))
        new = source()
        new["data"] = {"password": "bmV3"}
        self.assertEqual(self.broker.update(source(), new, binding="update-secrets").outcome, OK)
        after = self.copy_in("a")
        self.assertEqual(after["data"], {"password": "bmV3"})
        self.assertNotEqual(after["metadata"]["uid"], before, "the immutable copy was not re-created")

    def test_endless_conflicts_are_left_to_the_broker(self):
        self.broker.create(source(), binding="create-secrets")
        self.kube.plan("replace", *[kube.Conflict(409, "Conflict", "modified")] * replicator.WRITE_ATTEMPTS)
        new = source()
        new["data"] = {"password": "bmV3"}
        got = self.broker.update(source(), new, binding="update-secrets")
        self.assertEqual((got.outcome, got.delay), (RETRY, None), "retried on the binding's backoff")
        self.assertIn("conflicting writes", got.message)

    def test_an_api_failure_is_retried(self):
        self.kube.plan("list", kube.ApiError(503, "ServiceUnavailable", "etcd is down"))
        got = self.broker.create(source(), binding="create-secrets")
        self.assertEqual(got.outcome, RETRY)
        self.assertIn("etcd is down", got.message)

    def test_delete_removes_only_this_sources_copies(self):
        other = source()
        other["metadata"]["namespace"] = "elsewhere"
        self.kube.add(SECRETS, replicator.build_copy(other, "b"))
        self.kube.add(SECRETS, replicator.build_copy(source(), "a"))
        self.assertEqual(self.broker.delete(source(), binding="cleanup-secrets").outcome, OK)
        self.assertIsNone(self.copy_in("a"))
        self.assertIsNotNone(self.copy_in("b"), "the copy of another source was deleted")

    def test_a_copy_changed_since_it_was_read_is_not_deleted(self):
        self.kube.add(SECRETS, replicator.build_copy(source(), "a"))
        read = self.copy_in("a")
        changed = {**read, "data": {"password": "bmV3"}}
        self.kube.replace(SECRETS, "a", changed)
        with self.assertRaises(kube.Conflict):
            replicator.delete_exact(SECRETS, read)
        self.assertEqual(self.copy_in("a")["data"], {"password": "bmV3"})
        self.kube.delete(SECRETS, "a", "db")
        replicator.delete_exact(SECRETS, read)  # gone already: nothing to do


if __name__ == "__main__":
    unittest.main()
