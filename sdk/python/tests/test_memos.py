"""Kopf's per-object memo: one Memo per object, a shallow copy of the
process's, kept across deliveries until the object's deletion is handled."""

import unittest

import tether
from tether.memos import Memos
from tether.testing import FakeBroker

W = ("test.tether.dev", "v1", "widgets")


def widget(uid):
    return {"apiVersion": "test.tether.dev/v1", "kind": "Widget", "metadata": {"name": uid, "uid": uid}}


class PerObject(unittest.TestCase):
    def test_an_objects_functions_share_its_memo_and_others_do_not(self):
        r = tether.Registry()

        @tether.on.create(*W, registry=r)
        def created(memo, **_):
            memo.count = memo.get("count", 0) + 1
            return memo.count

        @tether.on.update(*W, registry=r)
        def updated(memo, **_):
            memo.count += 1
            return memo.count

        with FakeBroker(r) as k:
            self.assertEqual(k.create(widget("a")).result, 1)
            self.assertEqual(k.update(widget("a"), widget("a")).result, 2)
            self.assertEqual(k.create(widget("b")).result, 1)

    def test_the_base_is_copied_shallowly_and_forgotten_objects_start_again(self):
        shared = []
        memos = Memos(tether.Memo(template="hello {}", seen=shared))
        a = memos.of("a")
        a.template = "changed"
        a.seen.append("a")
        self.assertEqual(memos.of("b").template, "hello {}", "an object's own keys are its own")
        self.assertIs(memos.of("b").seen, shared, "a shallow copy: the values are the process's")
        memos.forget("a")
        self.assertEqual(memos.of("a").template, "hello {}")
        self.assertIsNot(memos.of(""), memos.of(""), "an object without a UID keeps nothing")

    def test_a_handled_deletion_forgets_the_memo(self):
        r = tether.Registry()
        kept = {}

        @tether.on.create(*W, registry=r)
        def created(memo, uid, **_):
            kept.setdefault(uid, []).append(memo)

        @tether.on.delete(*W, registry=r)
        def deleted(**_):
            pass

        with FakeBroker(r) as k:
            k.create(widget("a"))
            k.create(widget("a"))
            k.delete(widget("a"))
            k.create(widget("a"))
        first, again, after = kept["a"]
        self.assertIs(first, again, "until its deletion is handled, an object keeps its memo")
        self.assertIsNot(first, after, "after it, the object starts afresh")


if __name__ == "__main__":
    unittest.main()
