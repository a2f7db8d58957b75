package pyhandler

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

// sdkDir is the Python SDK's source tree.
const sdkDir = "../../sdk/python"

// TestPythonSDKUnitTests runs the SDK's own tests and its examples' tests
// (unittest; pytest runs them too), which need no cluster: the examples'
// go through tether.testing.
func TestPythonSDKUnitTests(t *testing.T) {
	needPython(t)
	for _, args := range [][]string{
		{"discover", "-s", "tests"},
		{"discover", "-s", "examples/tests", "-t", "examples"},
	} {
		cmd := exec.Command(python, append([]string{"-B", "-m", "unittest"}, args...)...)
		cmd.Dir = sdkDir
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python3 -m unittest %v in sdk/python: %v\n%s", args, err, out)
		}
		t.Logf("unittest %v: %s", args, bytes.TrimSpace(out))
	}
}
