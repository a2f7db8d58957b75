"""tether.testing.FakeBroker itself: which binding a delivery goes to, the
broker's view of updates, and the plain values it gives back."""

import asyncio
import unittest

import tether
from tether.testing import OK, RETRY, FakeBroker, Result

W = ("test.tether.dev", "v1", "widgets")


def widget(name="w", size=3, **meta):
    return {"apiVersion": "test.tether.dev/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": "ns", "uid": "uid-" + name, **meta}, "spec": {"size": size}}


class Kit(unittest.TestCase):
    def setUp(self):
        self.r = tether.Registry()
        self.k = FakeBroker(self.r)

    def test_result_is_plain_values(self):
        @tether.on.create(*W, registry=self.r)
        def created(patch, **_):
            patch.metadata.labels["seen"] = "yes"
            return [1, "two"]

        self.assertEqual(self.k.create(widget()), Result(binding="create-created", outcome=OK,
                                                         patch={"metadata": {"labels": {"seen": "yes"}}},
                                                         result=[1, "two"]))
        self.assertEqual(self.k.binding_ids, ["create-created"])

    def test_deliveries_go_to_the_binding_of_the_objects_resource(self):
        tether.on.create(*W, registry=self.r, id="widgets")(lambda **_: "widget")
        tether.on.create("", "v1", "secrets", registry=self.r, id="secrets")(lambda **_: "secret")
        tether.on.create("apps", "v1", kind="Deployment", registry=self.r, id="deployments")(lambda **_: "deploy")
        tether.on.create("test.tether.dev", "v1", "policies", registry=self.r, id="policies")(lambda **_: "policy")
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}
        deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}
        policy = {"apiVersion": "test.tether.dev/v1", "kind": "Policy", "metadata": {"name": "p"}}
        self.assertEqual([self.k.create(o).result for o in (widget(), secret, deploy, policy)],
                         ["widget", "secret", "deploy", "policy"])

    def test_ambiguous_or_missing_bindings_ask_for_one(self):
        tether.on.create(*W, registry=self.r, id="one")(lambda **_: 1)
        tether.on.create(*W, registry=self.r, id="two")(lambda **_: 2)
        with self.assertRaises(LookupError) as caught:
            self.k.create(widget())
        self.assertIn("binding=", str(caught.exception))
        self.assertEqual(self.k.create(widget(), binding="two").result, 2)
        with self.assertRaises(LookupError):
            self.k.update(widget(), widget())
        with self.assertRaises(LookupError):
            self.k.delete(widget(), binding="one")  # a create binding
        with self.assertRaises(LookupError):
            self.k.create(widget(), binding="three")

    def test_updates_carry_the_brokers_diff_of_essences(self):
        seen = {}

        @tether.on.update(*W, registry=self.r)
        def updated(old, diff, **_):
            seen.update(old=old, diff=diff)

        old = widget(labels={"a": "1"}, annotations={"h.tether.dev/last-handled": "{}", "note": "x"},
                     resourceVersion="1")
        new = widget(size=4, labels={"a": "1", "b": "2"}, resourceVersion="2")
        new["status"] = {"phase": "changed, but status is no essence"}
        self.k.update(old, new)
        self.assertEqual(seen["old"], {"spec": {"size": 3}, "metadata": {"labels": {"a": "1"},
                                                                         "annotations": {"note": "x"}}})
        self.assertEqual(seen["diff"], (
            tether.DiffItem("remove", ("metadata", "annotations"), {"note": "x"}, None),
            tether.DiffItem("add", ("metadata", "labels", "b"), None, "2"),
            tether.DiffItem("change", ("spec", "size"), 3, 4),
        ))

    def test_secret_values_are_compared_by_digest(self):
        seen = {}
        tether.on.update("", "v1", "secrets", registry=self.r, id="u")(lambda old, **_: seen.update(old=old))
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "c2VjcmV0"}}
        self.k.update(secret, secret)
        self.assertTrue(seen["old"]["data"]["k"].startswith("sha256:"))

    def test_ticks_resumes_deletes_and_events(self):
        calls = []
        for deco, extra in ((tether.timer, {"interval": 1}), (tether.on.resume, {}), (tether.on.delete, {}),
                            (tether.on.event, {})):
            deco(*W, registry=self.r, id=f"b{len(self.r)}", **extra)(lambda reason, **_: calls.append(reason))
        self.k.tick(widget())
        self.k.resume(widget())
        self.k.delete(widget())
        self.k.event(widget(), "ADDED")
        self.assertEqual(calls, ["tick", "resume", "delete", "event"])

    def test_async_tests_are_told_to_use_plain_functions(self):
        tether.on.create(*W, registry=self.r, id="c")(lambda **_: None)

        async def inside_a_loop():
            self.k.create(widget())

        with self.assertRaises(RuntimeError) as caught:
            asyncio.run(inside_a_loop())
        self.assertIn("plain", str(caught.exception))

    def test_no_state_is_kept_between_calls(self):
        @tether.on.create(*W, registry=self.r)
        def created(patch, retry, **_):
            patch.spec["n"] = retry
            if retry == 0:
                raise tether.TemporaryError("first time", delay=1)

        self.assertEqual(self.k.create(widget()).outcome, RETRY)
        self.assertEqual(self.k.create(widget()).outcome, RETRY, "the kit does not retry or remember")
        self.assertEqual(self.k.create(widget(), attempt=2).patch, {"spec": {"n": 1}})


if __name__ == "__main__":
    unittest.main()
