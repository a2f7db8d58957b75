"""Kopf's ways of naming a resource, to the protocol's Resource: the
broker resolves a name by discovery, so the SDK only sorts the arguments."""

import unittest

import tether
from tether import bindings


def resource(*args, **options):
    r = tether.Registry()
    tether.on.create(*args, registry=r, id="x", **options)(lambda **_: None)
    (reg,) = list(r)
    got = bindings.to_proto(reg.spec).resource
    return {f.name: v for f, v in got.ListFields()}


class KopfForms(unittest.TestCase):
    def test_each_form_names_the_resource_as_the_broker_looks_it_up(self):
        for args, options, want in [
            (("kopfexamples",), {}, dict(name="kopfexamples")),
            (("kex",), {}, dict(name="kex")),
            (("KopfExample",), {}, dict(name="KopfExample")),
            (("kopfexamples.kopf.dev",), {}, dict(group="kopf.dev", name="kopfexamples")),
            (("kopfexamples.v1.kopf.dev",), {}, dict(group="kopf.dev", version="v1", name="kopfexamples")),
            (("pods.v1",), {}, dict(version="v1", name="pods")),
            (("kopf.dev", "kopfexamples"), {}, dict(group="kopf.dev", name="kopfexamples")),
            (("kopf.dev/v1", "kex"), {}, dict(group="kopf.dev", version="v1", name="kex")),
            (("apps/v1", "deployments"), {}, dict(group="apps", version="v1", name="deployments")),
            (("v1", "pods"), {}, dict(version="v1", name="pods")),
            (("kopf.dev", "v1", "kopfexamples"), {}, dict(group="kopf.dev", version="v1", name="kopfexamples")),
            (("", "v1", "secrets"), {}, dict(version="v1", name="secrets")),
            ((), dict(group="kopf.dev", version="v1", plural="kopfexamples"),
             dict(group="kopf.dev", version="v1", resource="kopfexamples")),
            ((), dict(group="kopf.dev", plural="kopfexamples"), dict(group="kopf.dev", resource="kopfexamples")),
            ((), dict(group="apps", version="v1", kind="Deployment"), dict(group="apps", version="v1", kind="Deployment")),
            ((), dict(kind="KopfExample"), dict(name="KopfExample")),
            ((), dict(plural="kopfexamples"), dict(name="kopfexamples")),
            ((), dict(singular="kopfexample"), dict(name="kopfexample")),
            ((), dict(shortcut="kex"), dict(name="kex")),
            (("apps", "v1"), dict(kind="Deployment"), dict(group="apps", version="v1", kind="Deployment")),
            (("apps/v1",), dict(kind="Deployment"), dict(group="apps", version="v1", kind="Deployment")),
            (("v1",), dict(kind="Pod"), dict(version="v1", kind="Pod")),
            (("kopf.dev",), dict(shortcut="kex"), dict(group="kopf.dev", name="kex")),
            (("kopf.dev", "v1", "x"), dict(kind="KopfExample"), None),
        ]:
            with self.subTest(args=args, options=options):
                if want is None:
                    with self.assertRaises(TypeError):
                        resource(*args, **options)
                    continue
                self.assertEqual(resource(*args, **options), want)

    def test_the_core_group_by_an_empty_group(self):
        # An empty group says "the core group": the broker reads that from
        # a version with no group, since an empty group alone is "any".
        self.assertEqual(resource("", "secrets"), dict(version="v1", name="secrets"))
        self.assertEqual(resource(group="", plural="secrets"), dict(resource="secrets"))


if __name__ == "__main__":
    unittest.main()
