package pyhandler

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

// sdkDir is the Python SDK's source tree.
const sdkDir = "../../sdk/python"

// TestPythonSDKUnitTests runs the SDK's own tests and its examples' tests,
// which need no cluster (the examples' go through tether.testing), with
// Debian's pytest (python3-pytest), or with unittest where pytest is
// missing: the tests are written for both.
func TestPythonSDKUnitTests(t *testing.T) {
	needPython(t)
	pytest := true
	if out, err := exec.Command(python, "-c", "import pytest").CombinedOutput(); err != nil {
		t.Logf("no pytest here (apt-get install -y python3-pytest), so unittest runs the tests: %s", bytes.TrimSpace(out))
		pytest = false
	}
	for _, suite := range []struct{ dir, top string }{{"tests", "tests"}, {"examples/tests", "examples"}} {
		args := []string{"-B", "-m", "unittest", "discover", "-s", suite.dir, "-t", suite.top}
		if pytest {
			args = []string{"-B", "-m", "pytest", "-q", "-p", "no:cacheprovider", suite.dir}
		}
		cmd := exec.Command(python, args...)
		cmd.Dir = sdkDir
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python3 %v in sdk/python: %v\n%s", args, err, out)
		}
		t.Logf("python3 %v: %s", args, bytes.TrimSpace(out))
	}
}
