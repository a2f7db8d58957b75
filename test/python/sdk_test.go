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

// TestPythonSDKUnitTests runs the SDK's own tests (unittest; pytest runs
// them too), which need no cluster.
func TestPythonSDKUnitTests(t *testing.T) {
	needPython(t)
	cmd := exec.Command(python, "-B", "-m", "unittest", "discover", "-s", "tests")
	cmd.Dir = sdkDir
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest discover -s tests in sdk/python: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}
