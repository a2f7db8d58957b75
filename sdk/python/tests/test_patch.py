"""The patch argument, merge patches, and the JSON patches of mutations."""

import unittest

from tether.patch import MetaPatch, Patch, equal, json_patch, merge, pointer_token, pruned


class PatchArgument(unittest.TestCase):
    def test_parts_are_made_on_first_use(self):
        p = Patch()
        p.metadata.labels["a"] = "1"
        p.meta.annotations["b"] = "2"
        p.spec["replicas"] = 3
        p.status["phase"] = "Ready"
        self.assertEqual(p, {"metadata": {"labels": {"a": "1"}, "annotations": {"b": "2"}},
                             "spec": {"replicas": 3}, "status": {"phase": "Ready"}})

    def test_a_plain_metadata_dict_gains_the_helpers(self):
        p = Patch({"metadata": {"labels": {"a": "1"}}})
        p.metadata.labels["b"] = "2"
        self.assertIsInstance(p["metadata"], MetaPatch)
        self.assertEqual(p["metadata"]["labels"], {"a": "1", "b": "2"})

    def test_empty_parts_are_dropped_and_nulls_kept(self):
        p = Patch()
        p.status  # noqa: B018  (touched, left empty)
        p.metadata.labels["gone"] = None
        self.assertEqual(pruned(p), {"metadata": {"labels": {"gone": None}}})
        self.assertEqual(pruned(Patch()), {})


class MergePatch(unittest.TestCase):
    def test_rfc7386(self):
        target = {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}
        patch = {"a": "z", "c": {"f": None, "n": {"x": 1}}, "l": [3]}
        self.assertEqual(merge(target, patch), {"a": "z", "c": {"d": "e", "n": {"x": 1}}, "l": [3]})
        self.assertEqual(target["c"], {"d": "e", "f": "g"}, "the target is not changed")
        self.assertEqual(merge({"a": 1}, {"a": {"b": None}}), {"a": {}})


class JsonPatch(unittest.TestCase):
    def test_diff_of_objects(self):
        before = {"metadata": {"name": "w", "labels": {"a/b": "1", "keep": "x"}}, "spec": {"list": [1, 2], "n": 1}}
        after = {"metadata": {"name": "w", "labels": {"keep": "x", "new~1": "y"}}, "spec": {"list": [1], "n": 1.0},
                 "extra": None}
        self.assertEqual(json_patch(before, after), [
            {"op": "add", "path": "/extra", "value": None},
            {"op": "remove", "path": "/metadata/labels/a~1b"},
            {"op": "add", "path": "/metadata/labels/new~01", "value": "y"},
            {"op": "replace", "path": "/spec/list", "value": [1]},
        ])

    def test_equal_objects_have_no_patch(self):
        self.assertEqual(json_patch({"a": {"b": [1, {"c": 2}]}}, {"a": {"b": [1, {"c": 2}]}}), [])

    def test_bools_are_not_numbers(self):
        self.assertEqual(json_patch({"x": 1}, {"x": True}), [{"op": "replace", "path": "/x", "value": True}])
        self.assertFalse(equal(True, 1))
        self.assertTrue(equal(1, 1.0))
        self.assertFalse(equal([0], [False]))

    def test_pointer_tokens(self):
        self.assertEqual(pointer_token("a/b~c"), "a~1b~0c")
        self.assertEqual(pointer_token("~1"), "~01")


if __name__ == "__main__":
    unittest.main()
