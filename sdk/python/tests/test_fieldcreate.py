"""@tether.on.field fires on creation too, as Kopf's: an object created
with the field set is a change from absent (old None) to its value."""

import unittest

import tether
from tether import bindings
from tether.testing import FakeBroker
from tether.v1 import broker_pb2 as pb

W = ("test.tether.dev", "v1", "widgets")


def widget(**spec):
    return {"apiVersion": "test.tether.dev/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "ns", "uid": "u1"}, "spec": spec}


class FieldOnCreate(unittest.TestCase):
    def test_a_create_binding_stands_for_the_fields_creation(self):
        r, calls = tether.Registry(), []

        @tether.on.field(*W, field="spec.mode", registry=r)
        def mode(old, new, reason, **_):
            calls.append((old, new, reason))

        field, created = list(r)
        self.assertEqual(field.spec.id, "field-mode")
        b = bindings.to_proto(created.spec)
        self.assertEqual((b.id, b.kind), ("field-mode-on-create", pb.BINDING_KIND_CREATE))
        self.assertEqual(b.when, '("spec" in object && "mode" in object["spec"])')
        with FakeBroker(r) as broker:
            got = broker.create(widget(mode="fast"), binding="field-mode-on-create")
        self.assertEqual(got.outcome, "ok")
        self.assertEqual(calls, [(None, "fast", "field")])

    def test_value_and_new_narrow_the_creation_and_old_values_rule_it_out(self):
        for name, options, want in [
            ("value", dict(value="fast"), '"mode" in object["spec"] && object["spec"]["mode"] == "fast"'),
            ("new", dict(new="fast"), '"mode" in object["spec"] && object["spec"]["mode"] == "fast"'),
            ("old absent", dict(old=tether.ABSENT), '("spec" in object && "mode" in object["spec"])'),
            ("an old value: no creation has one", dict(old="slow"), None),
        ]:
            with self.subTest(name):
                r = tether.Registry()
                tether.on.field(*W, field="spec.mode", registry=r, id="m", **options)(lambda **_: None)
                regs = list(r)
                if want is None:
                    self.assertEqual(len(regs), 1)
                else:
                    self.assertIn(want, bindings.to_proto(regs[1].spec).when)

    def test_the_function_gets_only_what_it_declares(self):
        r, seen = tether.Registry(), []

        @tether.on.field(*W, field="spec.mode", registry=r)
        async def mode(new, body):
            seen.append((new, body["metadata"]["name"]))

        with FakeBroker(r) as broker:
            broker.create(widget(mode=3), binding="field-mode-on-create")
        self.assertEqual(seen, [(3, "w")])


if __name__ == "__main__":
    unittest.main()
