"""Kopf's subhandlers: registered by a create, update, delete, resume or
field function while it runs, run after it, each tracked on its own; a
retry runs the parent again but not the subhandlers already done, which
the ack's progress records (FakeBroker passes it back as the broker does)."""

import json
import unittest

import tether
from tether.testing import FAIL, OK, RETRY, FakeBroker

W = ("test.tether.dev", "v1", "widgets")
OBJ = {"apiVersion": "test.tether.dev/v1", "kind": "Widget",
       "metadata": {"name": "w", "namespace": "ns", "uid": "uid-w", "labels": {"app": "a"}},
       "spec": {"items": ["one", "two", "three"]}}


class Subhandlers(unittest.TestCase):
    def setUp(self):
        self.r = tether.Registry()
        self.k = FakeBroker(self.r)
        self.addCleanup(self.k.close)
        self.calls = []

    def items(self, fail_once=(), fail_always=(), errors=None):
        """A create function with a subhandler per item of spec.items; those
        in fail_once raise TemporaryError on their first run."""
        failed = set()

        @tether.on.create(*W, registry=self.r, id="c")
        def create_fn(spec, **_):
            self.calls.append("parent")
            for item in spec["items"]:
                @tether.subhandler(id=item, errors=errors)
                def handle_item(patch, retry, item=item, **_):
                    self.calls.append(item)
                    if item in fail_always:
                        raise tether.PermanentError(f"{item} cannot")
                    if item in fail_once and item not in failed:
                        failed.add(item)
                        raise tether.TemporaryError(f"{item} not yet", delay=3)
                    patch.spec[item] = retry
                    return {"item": item}
            return "parent done"

    def test_a_retry_runs_the_parent_again_but_not_the_items_done(self):
        self.items(fail_once={"two"})
        first = self.k.create(OBJ)
        self.assertEqual((first.outcome, first.delay), (RETRY, 3))
        self.assertIn("c/two: two not yet", first.message)
        self.assertEqual(self.calls, ["parent", "one", "two", "three"])
        self.calls.clear()
        second = self.k.create(OBJ, attempt=2)
        self.assertEqual(second.outcome, OK)
        self.assertEqual(self.calls, ["parent", "two"])
        # the patches and results of all the items, those of the first attempt included
        self.assertEqual(second.patch, {"spec": {"one": 0, "two": 1, "three": 0},
                                        "status": {"c/one": {"item": "one"}, "c/two": {"item": "two"},
                                                   "c/three": {"item": "three"}}})
        self.assertEqual(second.result, "parent done")

    def test_without_progress_every_item_runs_again(self):
        # A first attempt (a broker restarted, say) has no progress.
        self.items(fail_once={"two"})
        self.k.create(OBJ)
        self.calls.clear()
        self.assertEqual(self.k.create(OBJ).outcome, OK)
        self.assertEqual(self.calls, ["parent", "one", "two", "three"])

    def test_a_failed_item_finishes_with_a_warning_and_the_parent_is_done(self):
        self.items(fail_always={"two"})
        got = self.k.create(OBJ)
        self.assertEqual(got.outcome, OK)
        self.assertEqual([(e["type"], e["reason"]) for e in got.events], [("Warning", "SubhandlerFailed")])
        self.assertIn("c/two failed: two cannot", got.events[0]["message"])
        self.assertNotIn("two", got.patch["spec"])

    def test_an_item_of_its_own_retries_fails_when_they_run_out(self):
        @tether.on.create(*W, registry=self.r, id="c")
        def create_fn(**_):
            @tether.subhandler(id="flaky", retries=2, backoff=5)
            def flaky(**_):
                self.calls.append("flaky")
                raise ValueError("no")

        first = self.k.create(OBJ)
        self.assertEqual((first.outcome, first.delay), (RETRY, 5))
        second = self.k.create(OBJ, attempt=2)
        self.assertEqual(second.outcome, OK)
        self.assertEqual(self.calls, ["flaky", "flaky"])
        self.assertEqual(second.events[0]["reason"], "SubhandlerFailed")

    def test_the_parent_failing_keeps_the_progress(self):
        fail_parent = []

        @tether.on.create(*W, registry=self.r, id="c")
        def create_fn(**_):
            self.calls.append("parent")
            if fail_parent:
                raise tether.TemporaryError("parent not yet")

            @tether.subhandler(id="a")
            def a(**_):
                self.calls.append("a")

            @tether.subhandler(id="b")
            def b(retry, **_):
                self.calls.append("b")
                if not retry:
                    raise tether.TemporaryError("b not yet")

        self.assertEqual(self.k.create(OBJ).outcome, RETRY)
        fail_parent.append(True)
        self.assertEqual(self.k.create(OBJ, attempt=2).outcome, RETRY)
        fail_parent.clear()
        self.assertEqual(self.k.create(OBJ, attempt=3).outcome, OK)
        self.assertEqual(self.calls, ["parent", "a", "b", "parent", "parent", "b"])

    def test_execute_runs_them_inside_an_async_parent(self):
        after = []

        @tether.on.create(*W, registry=self.r, id="c")
        async def create_fn(**_):
            await tether.execute(fns={"x": lambda **_: self.calls.append("x"), "y": lambda **_: self.calls.append("y")})
            after.append("after")

        self.assertEqual(self.k.create(OBJ).outcome, OK)
        self.assertEqual((self.calls, after), (["x", "y"], ["after"]))

    def test_a_subhandler_registered_after_execute_runs_after_the_parent(self):
        @tether.on.create(*W, registry=self.r, id="c")
        async def create_fn(**_):
            await tether.execute(fns={"x": lambda **_: self.calls.append("x")})
            tether.register(lambda **_: self.calls.append("late"), id="late")
            self.calls.append("parent done")

        self.assertEqual(self.k.create(OBJ).outcome, OK)
        self.assertEqual(self.calls, ["x", "parent done", "late"])

    def test_register_and_filters(self):
        @tether.on.update(*W, registry=self.r, id="u")
        def update_fn(**_):
            tether.register(lambda **_: self.calls.append("app-a"), id="a", labels={"app": "a"})
            tether.register(lambda **_: self.calls.append("app-b"), id="b", labels={"app": "b"})
            tether.register(lambda **_: self.calls.append("when"), id="w", when=lambda spec, **_: "items" in spec)

        self.assertEqual(self.k.update(OBJ, OBJ).outcome, OK)
        self.assertEqual(self.calls, ["app-a", "when"])

    def test_a_parent_that_reads_no_body_still_gives_its_subhandlers_one(self):
        @tether.on.create(*W, registry=self.r, id="c")
        def create_fn(name):
            @tether.subhandler(id="x", labels={"app": "a"})
            def x(spec, **_):
                self.calls.append(spec["items"][0])

        self.assertEqual(self.k.create(OBJ).outcome, OK)
        self.assertEqual(self.calls, ["one"])

    def test_two_explicit_executes_keep_both_patches(self):
        def patching(key):
            def fn(patch, **_):
                patch.spec[key] = True
            return fn

        @tether.on.create(*W, registry=self.r, id="c")
        async def create_fn(**_):
            await tether.execute(fns={"a": patching("a")})
            await tether.execute(fns={"b": patching("b")})

        self.assertEqual(self.k.create(OBJ).patch, {"spec": {"a": True, "b": True}})

    def test_a_value_that_is_not_json_fails_the_item(self):
        @tether.on.create(*W, registry=self.r, id="c")
        def create_fn(**_):
            tether.register(lambda **_: object(), id="odd")

        got = self.k.create(OBJ)
        self.assertEqual(got.outcome, OK)
        self.assertIn("c/odd failed: its patch or return value is not JSON", got.events[0]["message"])

    def test_only_changing_functions_register_them(self):
        @tether.on.event(*W, registry=self.r, id="e")
        def event_fn(**_):
            tether.subhandler(id="x")(lambda **_: None)

        got = self.k.event(OBJ)
        self.assertEqual(got.outcome, RETRY)
        self.assertIn("only by a create, update, delete, resume or field function", got.message)
        with self.assertRaises(TypeError):
            tether.subhandler(id="x")
        with self.assertRaisesRegex(TypeError, "timeout= is not supported"):
            tether.subhandler(id="x", timeout=5)

    def test_progress_past_the_limit_fails(self):
        @tether.on.create(*W, registry=self.r, id="c")
        def create_fn(**_):
            @tether.subhandler(id="big")
            def big(patch, **_):
                patch.spec["big"] = "x" * (20 << 10)

            @tether.subhandler(id="later")
            def later(**_):
                raise tether.TemporaryError("later")

        got = self.k.create(OBJ)
        self.assertEqual(got.outcome, FAIL)
        self.assertIn("more than the 16384 the broker keeps", got.message)

    def test_a_function_without_subhandlers_sends_no_progress(self):
        @tether.on.create(*W, registry=self.r, id="c")
        def create_fn(**_):
            raise tether.TemporaryError("later")

        from tether.v1 import broker_pb2 as pb
        reg = self.r.get("c")
        d = self.k._delivery(reg, pb.DELIVERY_KIND_CREATE, OBJ, 1)
        ack = self.k._ack(reg, d)
        self.assertEqual((ack.outcome, ack.progress), (pb.OUTCOME_RETRY, b""))


if __name__ == "__main__":
    unittest.main()
