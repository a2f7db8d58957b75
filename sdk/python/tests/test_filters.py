"""Kopf's callable filters: what the broker is sent for them, and the
delivery answered without the function when one says no, per binding kind."""

import unittest

import tether
from tether import bindings
from tether.testing import OK, RETRY, FakeBroker

W = ("test.tether.dev", "v1", "widgets")


def widget(name="w", size=3, labels=None, annotations=None):
    meta = {"name": name, "namespace": "ns", "uid": "uid-" + name, "labels": labels or {},
            "annotations": annotations or {}}
    return {"apiVersion": "test.tether.dev/v1", "kind": "Widget", "metadata": meta, "spec": {"size": size}}


def big(spec, **_):
    return spec.get("size", 0) > 3


class Wire(unittest.TestCase):
    def test_the_broker_gets_the_keys_of_callables_as_present_and_no_cel_for_a_callable_when(self):
        r = tether.Registry()
        tether.on.create(*W, registry=r, id="c", labels={"app": "web", "n": lambda value, **_: int(value) > 3},
                         annotations={"example.com/mode": lambda value, **_: value != "off"}, when=big)(
            lambda **_: None)
        [reg] = list(r)
        b = bindings.to_proto(reg.spec)
        self.assertEqual((b.label_selector, b.when), ("app=web,n", ""))
        self.assertEqual([(a.key, a.operator) for a in b.annotations],
                         [("example.com/mode", b.annotations[0].OPERATOR_PRESENT)])
        self.assertEqual([c.option for c in reg.checks], ["when=", "labels['n']", "annotations['example.com/mode']"])

    def test_a_cel_when_is_no_callable(self):
        r = tether.Registry()
        tether.on.create(*W, registry=r, id="c", when="object.spec.size > 3")(lambda **_: None)
        [reg] = list(r)
        self.assertEqual((bindings.to_proto(reg.spec).when, reg.checks), ("object.spec.size > 3", ()))


class PerKind(unittest.TestCase):
    """One object passes (size 5), one does not (size 1): the function runs
    for the first only, and the second is answered OK with nothing."""

    def setUp(self):
        self.r = tether.Registry()
        self.k = FakeBroker(self.r)
        self.addCleanup(self.k.close)
        self.ran = []

    def fn(self, name, patch, **_):
        self.ran.append(name)
        patch.metadata.labels["seen"] = "yes"
        return {"seen": name}

    def test_lifecycle_timer_and_event_bindings_skip_the_function(self):
        for decorator, deliver in (
                (tether.on.create, lambda o: self.k.create(o)),
                (tether.on.update, lambda o: self.k.update(widget(o["metadata"]["name"], size=0), o)),
                (tether.on.delete, lambda o: self.k.delete(o)),
                (tether.on.resume, lambda o: self.k.resume(o)),
                (tether.on.event, lambda o: self.k.event(o)),
                (lambda *a, **kw: tether.timer(*a, interval=1, **kw), lambda o: self.k.tick(o))):
            with self.subTest(decorator=decorator):
                self.r, self.ran = tether.Registry(), []
                self.k = FakeBroker(self.r)
                self.addCleanup(self.k.close)
                decorator(*W, registry=self.r, when=big)(self.fn)
                passed, skipped = deliver(widget("big", size=5)), deliver(widget("small", size=1))
                self.assertEqual((passed.outcome, passed.result), (OK, {"seen": "big"}))
                self.assertEqual((skipped.outcome, skipped.patch, skipped.result), (OK, None, None))
                self.assertEqual(self.ran, ["big"])

    def test_a_field_binding_gets_old_and_new_of_its_field(self):
        tether.on.field(*W, registry=self.r, field="spec.size", when=lambda old, new, **_: new > old)(self.fn)
        self.assertEqual(self.k.field(widget("up", size=1), widget("up", size=2)).result, {"seen": "up"})
        self.assertEqual(self.k.field(widget("down", size=2), widget("down", size=1)).result, None)
        self.assertEqual(self.ran, ["up"])

    def test_label_and_annotation_callables_get_the_value(self):
        seen = []

        def mode(value, name, **_):
            seen.append((name, value))
            return value != "off"

        tether.on.create(*W, registry=self.r, labels={"n": lambda value, **_: int(value) > 3},
                         annotations={"mode": mode})(self.fn)
        self.k.create(widget("a", labels={"n": "5"}, annotations={"mode": "on"}))
        self.k.create(widget("b", labels={"n": "1"}, annotations={"mode": "on"}))
        self.k.create(widget("c", labels={"n": "5"}, annotations={"mode": "off"}))
        self.assertEqual(self.ran, ["a"])
        self.assertEqual(seen, [("a", "on"), ("c", "off")])  # b stopped at its label

    def test_reviews_a_filter_passes_over_are_allowed(self):
        @tether.on.validate(*W, registry=self.r, when=big)
        def no_big(**_):
            raise tether.AdmissionError("too big")

        @tether.on.mutate(*W, registry=self.r, when=big)
        def mark(patch, **_):
            patch.metadata.labels["big"] = "yes"

        self.assertFalse(self.k.validate(widget(size=5)).allowed)
        small = self.k.validate(widget(size=1))
        self.assertEqual((small.outcome, small.allowed), (OK, True))
        self.assertIsNotNone(self.k.mutate(widget(size=5)).patch)
        small = self.k.mutate(widget(size=1))
        self.assertEqual((small.allowed, small.patch), (True, None))

    def test_an_exception_in_a_callable_is_the_functions(self):
        def broken(**_):
            raise ValueError("no")

        tether.on.create(*W, registry=self.r, when=broken)(self.fn)
        got = self.k.create(widget())
        self.assertEqual((got.outcome, got.message), (RETRY, "ValueError: no"))
        self.assertEqual(self.ran, [])

    def test_a_function_that_reads_no_body_still_gets_a_filter_that_does(self):
        tether.on.create(*W, registry=self.r, id="c", when=big)(lambda name, **_: name)
        self.assertEqual(self.k.create(widget("big", size=5)).result, "big")


class Combinators(unittest.TestCase):
    def test_all_any_none_not(self):
        small = lambda spec, **_: spec["size"] < 3  # noqa: E731
        named_a = lambda name: name == "a"  # noqa: E731  (declares only what it reads)
        kw = {"spec": {"size": 1}, "name": "b", "labels": {}}
        cases = [(tether.all_([small, named_a]), False), (tether.any_([small, named_a]), True),
                 (tether.none_([small, named_a]), False), (tether.not_(named_a), True),
                 (tether.all_([]), True), (tether.none_([]), True)]
        for fn, want in cases:
            with self.subTest(fn=fn.__name__, want=want):
                self.assertIs(fn(**kw), want)

    def test_a_combined_filter_on_a_binding(self):
        r = tether.Registry()
        k = FakeBroker(r)
        self.addCleanup(k.close)
        tether.on.create(*W, registry=r, id="c", when=tether.all_([big, tether.not_(lambda name, **_: name == "x")]))(
            lambda name, **_: name)
        self.assertEqual([k.create(widget(n, size=s)).result for n, s in (("a", 5), ("x", 5), ("b", 1))],
                         ["a", None, None])
