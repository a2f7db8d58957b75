package typescript

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestTheSDKsUnitTests runs the TypeScript SDK's unit tests (sdk/typescript/test,
// through its test kit) with Node's test runner on the tsc output.
func TestTheSDKsUnitTests(t *testing.T) {
	Build(t)
	files, err := filepath.Glob(filepath.Join(SDKDir, "build", "test", "*.test.js"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no tests in %s/build/test (%v)", SDKDir, err)
	}
	cmd := exec.Command("node", append([]string{"--test"}, files...)...)
	cmd.Dir = SDKDir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("node --test: %v\n%s", err, out.Bytes())
	}
	t.Logf("%s", lastLines(out.Bytes(), 9))
}

// lastLines is node --test's summary: the counts of tests, passes and failures.
func lastLines(b []byte, n int) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return bytes.Join(lines, []byte("\n"))
}
