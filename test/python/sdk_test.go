package pyhandler

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// sdkDir is the Python SDK's source tree.
const sdkDir = "../../sdk/python"

// TestSDKStubsAreTheCommittedOnes: the SDK carries the same generated stubs
// as test/python/gen, which TestStubsAreWhatGenShWrites and
// TestStubsMatchTheGoCode check against proto/ (make proto-python writes
// both).
func TestSDKStubsAreTheCommittedOnes(t *testing.T) {
	for _, name := range []string{"broker_pb2.py", "broker_pb2_grpc.py"} {
		want, err := os.ReadFile(filepath.Join("gen", "tether", "v1", name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(sdkDir, "tether", "v1", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("sdk/python/tether/v1/%s differs from test/python/gen: run make proto-python and commit both", name)
		}
	}
}

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
