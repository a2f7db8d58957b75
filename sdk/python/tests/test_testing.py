"""tether.testing.FakeBroker itself: which binding a delivery goes to, the
broker's view of updates, and the plain values it gives back."""

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import unittest.mock

import tether
import tether.testing
from tether.testing import FAIL, OK, RETRY, FakeBroker, Result

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


class OneLoop(unittest.TestCase):
    def test_tasks_a_function_started_live_on_to_the_next_delivery(self):
        r, state = tether.Registry(), {}

        async def background(event):
            await event.wait()
            return "finished"

        @tether.on.create(*W, registry=r)
        async def created(name, **_):
            if name == "first":
                state["event"] = asyncio.Event()
                state["task"] = asyncio.create_task(background(state["event"]))
                return None
            state["event"].set()
            return await state["task"]

        with FakeBroker(r) as broker:
            self.assertEqual(broker.create(widget("first")).outcome, OK)
            self.assertEqual(broker.create(widget("second")), Result(binding="create-created", outcome=OK,
                                                                     result="finished"))
            task = state["task"]
        self.assertTrue(task.done(), "closing the broker ends its loop")


class Daemons(unittest.TestCase):
    def test_a_daemon_runs_until_the_test_sets_stopped(self):
        r, seen = tether.Registry(), []

        @tether.daemon(*W, registry=r)
        def watch(stopped, name, **_):  # sync: in a thread
            while not stopped.wait(0.01):
                seen.append(name)
            seen.append(stopped.reason)

        @tether.daemon(*W, registry=r)
        async def watching(stopped, **_):
            await stopped
            seen.append(stopped.reason)

        @tether.daemon(*W, registry=r)
        async def crashing(**_):
            raise ValueError("lost")

        with FakeBroker(r) as broker:
            self.assertEqual(broker.daemon(widget("w1"), binding="daemon-watch", stop_after=0.05, reason="enough"),
                             Result(binding="daemon-watch", outcome=OK))
            self.assertEqual(seen[0], "w1")
            self.assertEqual(seen[-1], "enough")
            seen.clear()
            self.assertEqual(broker.daemon(widget(), binding="daemon-watching").outcome, OK)
            self.assertEqual(seen, ["stopped by the test"], "stopped is set at once by default")
            self.assertEqual(broker.daemon(widget(), binding="daemon-crashing", stop_after=None),
                             Result(binding="daemon-crashing", outcome=FAIL, message="ValueError: lost"))


    def test_a_daemon_that_ignores_stopped_is_a_timeout(self):
        r = tether.Registry()

        @tether.daemon(*W, registry=r)
        async def deaf(**_):
            await asyncio.sleep(3600)

        with FakeBroker(r) as broker, unittest.mock.patch.object(tether.testing, "TIMEOUT", 0.05):
            with self.assertRaises(TimeoutError) as caught:
                broker.daemon(widget())
        self.assertIn("daemon daemon-deaf did not return within 0.05s after stopped was set", str(caught.exception))


HANDLER = """
import tether

@tether.on.create("test.tether.dev", "v1", "widgets")
def created(**_):
    return WHO
"""


class Loading(unittest.TestCase):
    def write(self, who):
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder)
        path = os.path.join(folder, "handler.py")
        with open(path, "w") as f:
            f.write(HANDLER.replace("WHO", repr(who)))
        return path

    def test_handler_files_load_into_registries_of_their_own(self):
        default = list(tether.get_default_registry())
        first, second = tether.testing.load(self.write("first")), tether.testing.load(self.write("second"))
        again = tether.testing.load(self.write("again"))
        for handler, who in ((first, "first"), (second, "second"), (again, "again")):
            self.assertEqual(handler.registry.get("create-created").fn, handler.module.created)
            with FakeBroker(handler.registry) as broker:
                self.assertEqual(broker.create(widget()).result, who)
        self.assertEqual(list(tether.get_default_registry()), default, "the default registry is left as it was")

    def test_a_file_that_does_not_import_restores_the_default_registry(self):
        default = tether.get_default_registry()
        path = self.write("x")
        with open(path, "a") as f:
            f.write("raise RuntimeError('broken')\n")
        with self.assertRaises(RuntimeError):
            tether.testing.load(path)
        self.assertIs(tether.get_default_registry(), default)


# A FakeBroker a test never closes is finalized by the garbage collector,
# which runs in whichever thread allocates at the moment: in CPython 3.11
# even inside Thread.start's bookkeeping, with the threading module's lock
# on thread shutdowns held. This program finalizes one there, as the
# collector did when the SDK's suite hung, after a sync function ran on
# the broker's loop (so that its executor has a thread to stop).
COLLECTED_IN_THREAD_START = """
import sys, threading
sys.path.insert(0, sys.argv[1])
import tether
from tether.testing import FakeBroker
r = tether.Registry()
tether.on.create("test.tether.dev", "v1", "widgets", registry=r, id="done")(lambda **_: "done")
k = FakeBroker(r)
assert k.create({"metadata": {"name": "w", "uid": "u"}}).result == "done"
with threading._shutdown_locks_lock:
    k._finalizer()
print("finalized")
"""


class Collected(unittest.TestCase):
    @unittest.skipUnless(hasattr(__import__("threading"), "_shutdown_locks_lock"),
                         "this Python's threading keeps no such lock")
    def test_a_broker_never_closed_is_finalized_without_waiting_on_other_threads(self):
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        try:
            out = subprocess.run([sys.executable, "-c", COLLECTED_IN_THREAD_START, root],
                                 capture_output=True, text=True, timeout=20)
        except subprocess.TimeoutExpired:
            self.fail("finalizing a FakeBroker inside the threading module's bookkeeping hung")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "finalized")


if __name__ == "__main__":
    unittest.main()
