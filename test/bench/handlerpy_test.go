package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tether-dev/tether/test/controlplane"
)

// pythonBenchProgram registers the Python bench handler for each workload
// and delivers a create and a delete through tether.testing, printing what
// each answered.
const pythonBenchProgram = `
import sys
import tether
from tether.testing import FakeBroker
sys.path.insert(0, sys.argv[1])
import handler

w = {"apiVersion": "test.tether.dev/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "ns", "uid": "u"}}
for workload in ("result", "label", "status"):
    reg = tether.Registry()
    handler.register(workload, namespace="ns", registry=reg)
    c, d = FakeBroker(reg).create(w), FakeBroker(reg).delete(w)
    print(workload, c.binding, c.outcome, c.patch, c.result, d.binding, d.outcome)
`

// TestPythonBenchHandlerDoesEachWorkload: the Python bench handler's create
// binding returns the result, patches the label or patches status, with the
// names of package workload, and its delete binding acks.
func TestPythonBenchHandlerDoesEachWorkload(t *testing.T) {
	if _, err := checkPython(context.Background(), defaultPython); err != nil {
		t.Skip(err)
	}
	wd, _ := os.Getwd()
	repo, err := controlplane.FindRepoRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(defaultPython, "-c", pythonBenchProgram, filepath.Join(repo, filepath.Dir(benchHandlerPy)))
	cmd.Env = append(os.Environ(), pythonEnv(repo)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := `result create ok None {'ok': True} delete ok
label create ok {'metadata': {'labels': {'bench.example.com/handled': 'true'}}} None delete ok
status create ok {'status': {'handled': True}} None delete ok
`
	if got := string(out); got != want {
		t.Errorf("the Python handler answered\n%s\nwant\n%s", got, want)
	}
}
