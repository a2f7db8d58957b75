"""The README's Python examples run: in a process of their own, since the
first one registers with the default registry."""

import os
import subprocess
import sys
import textwrap
import unittest

from broker_fake import SDK_ROOT, WAIT

PROGRAM = textwrap.dedent('''
    import re, sys
    import tether
    from tether.testing import FakeBroker

    blocks = re.findall(r"```python\\n(.*?)```", open(sys.argv[1]).read(), re.S)
    assert len(blocks) == 3, len(blocks)
    namespace = {}
    exec(blocks[0], namespace)
    print(sorted(r.spec.id for r in tether.get_default_registry()))
    k = FakeBroker()
    widget = {"apiVersion": "test.tether.dev/v1", "kind": "Widget",
              "metadata": {"name": "w", "namespace": "ns", "uid": "u", "annotations": {"example.com/busy": "true"}},
              "spec": {"size": 11}}
    print(k.create(widget).result, k.delete(widget).outcome, k.tick(widget).patch, k.validate(widget).code)
    exec(blocks[1], namespace)
    gadget = {"apiVersion": "test.tether.dev/v1", "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"size": 11}}
    got = FakeBroker().create(gadget)
    print(got.outcome, [(e["type"], e["reason"], e["message"]) for e in got.events])
    tests = {}
    exec(blocks[2], tests)
    tests["test_created_labels_the_widget"]()
    print("ok")
''')


class Readme(unittest.TestCase):
    def test_examples_run(self):
        env = dict(os.environ, PYTHONPATH=SDK_ROOT)
        out = subprocess.run([sys.executable, "-c", PROGRAM, os.path.join(SDK_ROOT, "README.md")], env=env,
                             capture_output=True, text=True, timeout=WAIT)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.splitlines(), [
            "['create-created', 'delete-deleted', 'timer-audit', 'validate-check-size']",
            "{'size': 11} retry {'status': {'audited': True}} 422",
            "fail [('Normal', 'Provisioning', 'a gadget of size 11'), "
            "('Warning', 'OSError', 'provisioning failed: no room for it')]",
            "ok",
        ])


if __name__ == "__main__":
    unittest.main()
