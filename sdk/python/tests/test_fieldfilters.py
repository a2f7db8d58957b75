"""Kopf's field filters (field= with value=, old=, new=) on any decorator:
values become CEL for the broker, callables are the SDK's to call."""

import unittest

import tether
from tether import bindings
from tether.testing import FakeBroker

W = ("test.tether.dev", "v1", "widgets")


def when(decorator, **options):
    r = tether.Registry()
    decorator(*W, registry=r, id="b", **options)(lambda **_: "ran")
    reg = list(r)[0]  # a field binding's create companion comes second (test_fieldcreate.py)
    return bindings.to_proto(reg.spec).when


class ToCEL(unittest.TestCase):
    def test_values_become_the_brokers_cel(self):
        for name, decorator, options, want in [
            ("a value", tether.on.create, dict(field="spec.mode", value="fast"),
             '("spec" in object && "mode" in object["spec"] && object["spec"]["mode"] == "fast")'),
            ("present", tether.on.create, dict(field="spec.mode", value=tether.PRESENT),
             '("spec" in object && "mode" in object["spec"])'),
            ("absent", tether.timer, dict(field="spec.mode", value=tether.ABSENT, interval=1),
             '(!("spec" in object && "mode" in object["spec"]))'),
            ("a key with dots and slashes", tether.daemon,
             dict(field=("metadata", "labels", "app.kubernetes.io/name"), value="web"),
             '("metadata" in object && "labels" in object["metadata"] && "app.kubernetes.io/name" in '
             'object["metadata"]["labels"] && object["metadata"]["labels"]["app.kubernetes.io/name"] == "web")'),
            ("old and new", tether.on.update, dict(field="spec.n", old=1, new=2),
             '(oldObject != null && "spec" in oldObject && "n" in oldObject["spec"] && oldObject["spec"]["n"] == 1)'
             ' && ("spec" in object && "n" in object["spec"] && object["spec"]["n"] == 2)'),
            ("an update's field alone asks for a change", tether.on.update, dict(field="spec.n"),
             '(oldObject == null || !((("spec" in oldObject && "n" in oldObject["spec"]) && ("spec" in object && '
             '"n" in object["spec"]) && oldObject["spec"]["n"] == object["spec"]["n"]) || '
             '(!("spec" in oldObject && "n" in oldObject["spec"]) && !("spec" in object && "n" in object["spec"]))))'),
            ("with a when= of its own", tether.on.create, dict(field="spec.mode", value=3, when="object.x == 1"),
             '(object.x == 1) && ("spec" in object && "mode" in object["spec"] && object["spec"]["mode"] == 3)'),
            ("a field binding's value", tether.on.field, dict(field="spec.mode", value=True),
             '("spec" in object && "mode" in object["spec"] && object["spec"]["mode"] == true)'),
        ]:
            with self.subTest(name):
                self.assertEqual(when(decorator, **options), want)

    def test_a_callable_is_not_sent(self):
        self.assertEqual(when(tether.on.create, field="spec.mode", value=lambda value, **_: True), "")


class Callables(unittest.TestCase):
    def deliver(self, decorator, call, **options):
        r = tether.Registry()
        decorator(*W, registry=r, id="b", **options)(lambda **_: "ran")
        with FakeBroker(r) as k:
            return call(k)

    def test_a_value_callable_gets_the_fields_value(self):
        seen = []

        def fast(value, name, **_):
            seen.append((name, value))
            return value == "fast"

        obj = {"apiVersion": "test.tether.dev/v1", "kind": "Widget", "metadata": {"name": "w"}}
        ran = self.deliver(tether.on.create, lambda k: k.create({**obj, "spec": {"mode": "fast"}}),
                           field="spec.mode", value=fast)
        skipped = self.deliver(tether.on.create, lambda k: k.create({**obj, "spec": {}}), field="spec.mode", value=fast)
        self.assertEqual((ran.result, skipped.result), ("ran", None))
        self.assertEqual(seen, [("w", "fast"), ("w", None)])

    def test_old_and_new_callables_of_an_update(self):
        obj = {"apiVersion": "test.tether.dev/v1", "kind": "Widget", "metadata": {"name": "w"}}
        grew = self.deliver(tether.on.update, lambda k: k.update({**obj, "spec": {"n": 1}}, {**obj, "spec": {"n": 5}}),
                            field="spec.n", old=lambda value, **_: value < 3, new=lambda value, **_: value >= 3)
        same = self.deliver(tether.on.update, lambda k: k.update({**obj, "spec": {"n": 4}}, {**obj, "spec": {"n": 5}}),
                            field="spec.n", old=lambda value, **_: value < 3)
        self.assertEqual((grew.result, same.result), ("ran", None))


if __name__ == "__main__":
    unittest.main()
