"""Validate and mutate functions: returning allows, AdmissionError
refuses, a mutate function's patch becomes a JSON patch, and any other
exception is a failure for the binding's failure policy."""

import asyncio
import unittest

import tether
from tether.testing import FAIL, OK, FakeBroker

W = ("test.tether.dev", "v1", "widgets")


def widget(size=3, labels=None):
    meta = {"name": "w", "namespace": "ns", "uid": "u"}
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "test.tether.dev/v1", "kind": "Widget", "metadata": meta, "spec": {"size": size}}


class Reviews(unittest.TestCase):
    def setUp(self):
        self.r = tether.Registry()
        self.broker = FakeBroker(self.r)

    def test_validate_refuses_with_code_and_warnings(self):
        @tether.on.validate(*W, registry=self.r)
        def check_size(spec, warnings, **_):
            warnings.append("size is checked")
            if spec["size"] > 10:
                raise tether.AdmissionError(f"spec.size is {spec['size']}; at most 10", code=422)

        v = self.broker.validate(widget(size=11))
        self.assertEqual((v.outcome, v.allowed, v.code), (OK, False, 422))
        self.assertEqual(v.message, "spec.size is 11; at most 10")
        self.assertEqual(v.warnings, ("size is checked",))
        v = self.broker.validate(widget(size=3))
        self.assertEqual((v.allowed, v.code, v.patch, v.warnings), (True, None, None, ("size is checked",)))

    def test_a_refusal_without_a_client_error_code_is_403(self):
        for code in (None, 200, 700):
            with self.subTest(code):
                r = tether.Registry()
                tether.on.validate(*W, registry=r, id="v")(lambda **_: (_ for _ in ()).throw(
                    tether.AdmissionError("no", code=code)))
                v = FakeBroker(r).validate(widget())
                self.assertEqual((v.allowed, v.code, v.message), (False, 403, "no"))

    def test_other_exceptions_fail_the_review(self):
        @tether.on.validate(*W, registry=self.r)
        async def broken(**_):
            await asyncio.sleep(0)
            raise tether.PermanentError("backend down")

        v = self.broker.validate(widget())
        self.assertEqual((v.outcome, v.allowed), (FAIL, False))
        self.assertIn("backend down", v.message)

    def test_mutate_patch_becomes_a_json_patch(self):
        @tether.on.mutate(*W, registry=self.r)
        def mark(patch, **_):
            patch.metadata.labels["example.com/seen"] = "true"
            patch.spec["size"] = None

        v = self.broker.mutate(widget())
        self.assertEqual((v.outcome, v.allowed), (OK, True))
        self.assertEqual(v.patch, [
            {"op": "add", "path": "/metadata/labels", "value": {"example.com/seen": "true"}},
            {"op": "remove", "path": "/spec/size"},
        ])
        v = self.broker.mutate(widget(labels={"a": "b"}), operation="UPDATE", old=widget())
        self.assertEqual(v.patch[0], {"op": "add", "path": "/metadata/labels/example.com~1seen", "value": "true"})

    def test_a_mutation_that_changes_nothing_has_no_patch(self):
        @tether.on.mutate(*W, registry=self.r)
        def keep(patch, labels, **_):
            patch.metadata.labels["a"] = labels.get("a", "b")

        self.assertIsNone(self.broker.mutate(widget(labels={"a": "b"})).patch)

    def test_a_validate_functions_patch_is_ignored(self):
        @tether.on.validate(*W, registry=self.r)
        def sneaky(patch, **_):
            patch.spec["size"] = 0

        v = self.broker.validate(widget())
        self.assertEqual((v.allowed, v.patch), (True, None))

    def test_mutating_a_delete_fails(self):
        @tether.on.mutate(*W, registry=self.r, operations=["DELETE"])
        def mark(patch, body, old, new, operation, **_):
            self.assertEqual((operation, new, old["metadata"]["name"], body["metadata"]["name"]),
                             ("DELETE", None, "w", "w"))
            patch.spec["size"] = 1

        v = self.broker.mutate(None, old=widget(), operation="DELETE")
        self.assertEqual(v.outcome, FAIL)
        self.assertIn("no object to mutate", v.message)

    def test_review_arguments(self):
        seen = {}

        @tether.on.validate(*W, registry=self.r)
        def check(operation, dryrun, userinfo, subresource, request, reason, old, new, **_):
            seen.update(operation=operation, dryrun=dryrun, userinfo=userinfo, subresource=subresource,
                        request=request["operation"], reason=reason, old=old, new=new["spec"])

        self.broker.validate(widget(size=2), old=widget(size=1), operation="UPDATE", dry_run=True, user="alice",
                             groups=("devs",), subresource="status")
        self.assertEqual(seen, {"operation": "UPDATE", "dryrun": True, "subresource": "status", "request": "UPDATE",
                                "userinfo": {"username": "alice", "groups": ["devs"]}, "reason": "validate",
                                "old": widget(size=1), "new": {"size": 2}})

    def test_subresource_is_none_for_the_main_resource_as_in_kopf(self):
        # Kopf's subresource=None binds the main resource only ("*": it and
        # every subresource), and its functions see subresource None for a
        # review of the main resource, the name for a subresource's.
        seen = []

        @tether.on.validate(*W, registry=self.r, id="main", subresource=None)
        def main(subresource, **_):
            seen.append(subresource)

        @tether.on.validate(*W, registry=self.r, id="all", subresource="*")
        def every(subresource, **_):
            seen.append(subresource)

        self.assertEqual((self.r.get("main").spec.subresource, self.r.get("all").spec.subresource), ("", "*"))
        self.broker.validate(widget(size=2), binding="main")
        self.broker.validate(widget(size=2), old=widget(size=1), operation="UPDATE", binding="all",
                             subresource="status")
        self.assertEqual(seen, [None, "status"])


if __name__ == "__main__":
    unittest.main()
