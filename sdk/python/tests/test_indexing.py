"""tether.index: Kopf's in-memory indices, kept from the broker's stream of
the index binding and passed to functions by name."""

import unittest

import tether
from tether import testing
from tether.v1 import broker_pb2 as pb


def pod(name, ns="default", uid=None, labels=None, phase="Running"):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": uid or f"uid-{ns}-{name}", "labels": labels or {}},
            "status": {"phase": phase}}


class Indices(unittest.TestCase):
    def setUp(self):
        self.registry = tether.Registry()

    def test_results_are_merged_by_key_and_leave_with_their_object(self):
        @tether.index("pods", registry=self.registry)
        def by_label(labels, name, **_):
            return {(k, v): name for k, v in labels.items()}

        with testing.FakeBroker(self.registry) as broker:
            broker.index(pod("a", labels={"app": "web"}))
            broker.index(pod("b", labels={"app": "web", "tier": "x"}))
            idx = broker.indices["by_label"]
            self.assertEqual(sorted(idx[("app", "web")]), ["a", "b"])
            self.assertEqual(list(idx[("tier", "x")]), ["b"])
            broker.index(pod("b", labels={"app": "db"}), "MODIFIED")
            self.assertEqual(list(idx[("app", "web")]), ["a"])
            self.assertNotIn(("tier", "x"), idx)  # a Store is never empty: the key goes
            broker.index(pod("a", labels={"app": "web"}), "DELETED")
            self.assertNotIn(("app", "web"), idx)
            self.assertEqual(dict(idx), {("app", "db"): idx[("app", "db")]})

    def test_a_value_that_is_not_a_dict_is_kept_under_none_and_none_indexes_nothing(self):
        @tether.index("pods", registry=self.registry)
        def names(name, **_):
            return None if name == "skip" else name

        with testing.FakeBroker(self.registry) as broker:
            broker.index(pod("a"))
            broker.index(pod("skip"))
            self.assertEqual(list(broker.indices["names"][None]), ["a"])

    def test_errors_keep_stale_values_by_default_and_drop_them_when_permanent(self):
        calls = []

        @tether.index("pods", registry=self.registry)
        def stale(name, spec, **_):
            calls.append(name)
            if spec.get("fail"):
                raise ValueError("boom")
            return name

        @tether.index("pods", registry=self.registry, errors=tether.ErrorsMode.PERMANENT)
        def strict(name, spec, **_):
            if spec.get("fail"):
                raise ValueError("boom")
            return name

        with testing.FakeBroker(self.registry) as broker:
            broker.index(pod("a"))
            failing = pod("a")
            failing["spec"] = {"fail": True}
            broker.index(failing, "MODIFIED")
            self.assertEqual(list(broker.indices["stale"][None]), ["a"])
            self.assertNotIn(None, broker.indices["strict"])
            broker.index(pod("a"), "MODIFIED")  # excluded for good from strict
            self.assertNotIn(None, broker.indices["strict"])

    def test_functions_and_probes_get_the_index_by_name(self):
        seen = {}

        @tether.index("pods", registry=self.registry)
        def is_running(namespace, name, status, **_):
            return {(namespace, name): status.get("phase") == "Running"}

        @tether.timer("kex.kopf.dev", interval=5, registry=self.registry)
        def tick(is_running: tether.Index, **_):
            seen["tick"] = dict(is_running)

        @tether.on.probe(registry=self.registry)
        def count(is_running, **_):
            return len(is_running)

        with testing.FakeBroker(self.registry) as broker:
            broker.index(pod("a"))
            broker.tick({"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "metadata": {"name": "x", "uid": "u"}},
                        binding="timer-tick")
            self.assertEqual({k: list(v) for k, v in seen["tick"].items()}, {("default", "a"): [True]})

    def test_a_callable_filter_that_says_no_takes_the_object_out(self):
        @tether.index("pods", registry=self.registry, labels={"app": lambda value, **_: value == "web"})
        def web(name, **_):
            return name

        with testing.FakeBroker(self.registry) as broker:
            broker.index(pod("a", labels={"app": "web"}))
            broker.index(pod("a", labels={"app": "db"}), "MODIFIED")
            self.assertEqual(len(broker.indices["web"]), 0)

    def test_the_binding_is_an_index_binding_without_delivery_options(self):
        @tether.index("pods", registry=self.registry, id="my_pods")
        def whatever(**_):
            return 1

        (reg,) = list(self.registry)
        b = tether.bindings.to_proto(reg.spec)
        self.assertEqual(b.kind, pb.BINDING_KIND_INDEX)
        self.assertEqual(b.id, "index-my-pods")
        self.assertFalse(b.HasField("retries") or b.HasField("backoff") or b.HasField("timeout"))
        self.assertEqual(self.registry.index_names(), ("my_pods",))

    def test_retries_are_refused_and_a_function_declared_before_its_index_is_refused(self):
        with self.assertRaisesRegex(TypeError, "retries.*not retried"):
            tether.index("pods", registry=self.registry, retries=3)
        with self.assertRaisesRegex(TypeError, "requires 'later'"):
            @tether.on.create("pods", registry=self.registry)
            def early(later, **_):
                pass

    def test_an_object_the_new_session_does_not_list_is_dropped_at_synced(self):
        @tether.index("pods", registry=self.registry)
        def names(name, **_):
            return name

        indices = self.registry.indices
        import asyncio

        async def run():
            indices.begin()
            await indices.take("index-names", "ADDED", pod("a"), False)
            await indices.take("index-names", "ADDED", pod("b"), False)
            await indices.take("index-names", "", {}, True)
            self.assertTrue(indices.complete.is_set())
            indices.begin()  # a reconnect: the stream lists what is there now
            self.assertFalse(indices.complete.is_set())
            await indices.take("index-names", "ADDED", pod("b"), False)
            self.assertEqual(sorted(indices.kwargs()["names"][None]), ["a", "b"])  # no gap meanwhile
            await indices.take("index-names", "", {}, True)
            self.assertEqual(list(indices.kwargs()["names"][None]), ["b"])

        asyncio.run(run())


if __name__ == "__main__":
    unittest.main()
