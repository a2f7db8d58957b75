"""tether.adopt and the other object helpers: Kopf's semantics on plain
dicts, and the owner taken from the delivery a function runs for."""

import unittest

import tether
from tether.testing import OK, FakeBroker

W = ("test.tether.dev", "v1", "widgets")
OWNER = {"apiVersion": "test.tether.dev/v1", "kind": "Widget",
         "metadata": {"name": "w", "namespace": "ns", "uid": "uid-w", "labels": {"app": "web", "tier": "front"}}}
REF = {"apiVersion": "test.tether.dev/v1", "kind": "Widget", "name": "w", "uid": "uid-w",
       "controller": True, "blockOwnerDeletion": True}


def child(**meta):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": dict(meta)}


class Helpers(unittest.TestCase):
    def test_adopt_owns_names_places_and_labels_a_child(self):
        obj = child()
        tether.adopt(obj, OWNER)
        self.assertEqual(obj["metadata"], {"ownerReferences": [REF], "generateName": "w-", "namespace": "ns",
                                           "labels": {"app": "web", "tier": "front"}})

    def test_adopt_keeps_what_the_child_has_unless_forced(self):
        for forced, want in ((False, {"name": "mine", "namespace": "other", "labels": {"app": "db", "tier": "front"}}),
                             (True, {"generateName": "w-", "namespace": "ns", "labels": {"app": "web", "tier": "front"}})):
            with self.subTest(forced=forced):
                obj = child(name="mine", namespace="other", labels={"app": "db"})
                tether.adopt(obj, OWNER, forced=forced)
                self.assertEqual(obj["metadata"], {"ownerReferences": [REF], **want})

    def test_strict_naming_uses_the_name_itself(self):
        obj = child(generateName="x-")
        tether.harmonize_naming(obj, "w", strict=True, forced=True)
        self.assertEqual(obj["metadata"], {"name": "w"})
        obj = child()
        tether.harmonize_naming(obj, "w", strict=True)
        self.assertEqual(obj["metadata"], {"name": "w"})
        with self.assertRaises(LookupError):
            tether.harmonize_naming(child(), None)

    def test_helpers_take_lists_nested_to_any_depth(self):
        objs = [child(), (child(), [child()])]
        tether.adopt(objs, OWNER)
        for obj in (objs[0], objs[1][0], objs[1][1][0]):
            self.assertEqual(obj["metadata"]["ownerReferences"], [REF])
        with self.assertRaises(TypeError):
            tether.label(42, {"a": "b"})

    def test_an_owner_reference_is_added_once_and_removed_by_uid(self):
        obj = child(ownerReferences=[{"uid": "other"}])
        tether.append_owner_reference(obj, OWNER)
        tether.append_owner_reference(obj, OWNER, controller=False)
        self.assertEqual(obj["metadata"]["ownerReferences"], [{"uid": "other"}, REF])
        tether.remove_owner_reference(obj, OWNER)
        self.assertEqual(obj["metadata"]["ownerReferences"], [{"uid": "other"}])
        obj = child()
        tether.append_owner_reference(obj, OWNER, controller=None, block_owner_deletion=False)
        self.assertEqual(obj["metadata"]["ownerReferences"],
                         [{"apiVersion": "test.tether.dev/v1", "kind": "Widget", "name": "w", "uid": "uid-w",
                           "blockOwnerDeletion": False}])

    def test_label_sets_nested_templates_and_overwrites_only_when_forced(self):
        deploy = {"metadata": {"labels": {"app": "mine"}}, "spec": {"template": {"spec": {}}}}
        tether.label(deploy, {"app": "web", "x": "1"}, nested="spec.template")
        self.assertEqual(deploy["metadata"]["labels"], {"app": "mine", "x": "1"})
        self.assertEqual(deploy["spec"]["template"]["metadata"]["labels"], {"app": "web", "x": "1"})
        tether.label(deploy, {"app": "web"}, forced=True, nested=["spec.missing", "spec.template"])
        self.assertEqual(deploy["metadata"]["labels"]["app"], "web")
        self.assertNotIn("missing", deploy["spec"])

    def test_adjust_namespace(self):
        obj = child(namespace="mine")
        tether.adjust_namespace(obj, "ns")
        self.assertEqual(obj["metadata"]["namespace"], "mine")
        tether.adjust_namespace(obj, "ns", forced=True)
        self.assertEqual(obj["metadata"]["namespace"], "ns")

    def test_outside_a_function_the_owner_must_be_given(self):
        for call in (lambda: tether.adopt(child()), lambda: tether.label(child()),
                     lambda: tether.append_owner_reference(child()), lambda: tether.harmonize_naming(child()),
                     lambda: tether.adjust_namespace(child())):
            with self.assertRaises(LookupError):
                call()


class DefaultOwner(unittest.TestCase):
    """Without owner=, the object of the delivery: in a sync function (in a
    thread), an async one, a daemon, and a function that declares no body."""

    def setUp(self):
        self.r = tether.Registry()
        self.k = FakeBroker(self.r)
        self.addCleanup(self.k.close)

    def test_sync_and_async_functions_adopt_their_object(self):
        @tether.on.create(*W, registry=self.r, id="sync")
        def sync(name, **_):  # declares no body: the owner is decoded on demand
            obj = child()
            tether.adopt(obj)
            return obj["metadata"]

        @tether.on.create(*W, registry=self.r, id="async")
        async def asynchronous(**_):
            obj = child()
            tether.adopt(obj)
            return obj["metadata"]

        want = {"ownerReferences": [REF], "generateName": "w-", "namespace": "ns",
                "labels": {"app": "web", "tier": "front"}}
        for binding in ("sync", "async"):
            with self.subTest(binding=binding):
                got = self.k.create(OWNER, binding=binding)
                self.assertEqual((got.outcome, got.result), (OK, want))
        with self.assertRaises(LookupError):
            tether.adopt(child())  # the delivery's owner does not leak out of the function

    def test_a_daemon_adopts_its_object(self):
        seen = []

        @tether.daemon(*W, registry=self.r)
        def watching(stopped, **_):
            obj = child()
            tether.label(obj)
            seen.append(obj["metadata"]["labels"])

        self.assertEqual(self.k.daemon(OWNER).outcome, OK)
        self.assertEqual(seen, [{"app": "web", "tier": "front"}])
