package typescript

import (
	"testing"

	"github.com/tether-dev/tether/test/example"
	"github.com/tether-dev/tether/test/testenv"
)

// process is a broker or a handler running as a real process, started by
// test/example so that it dies with the test binary however that ends; out
// collects what it printed, stdout and stderr both.
type process struct {
	*example.Process
	out testenv.Lines
}

// start runs bin with args, its output into out and the test log, until
// the test ends (SIGKILL: nothing of it is checked after the test).
func start(t *testing.T, name, bin string, args ...string) *process {
	t.Helper()
	p := &process{}
	p.out.Log = testenv.LogWriter(t, name+": ")
	var err error
	if p.Process, err = example.Start(name, bin, args, &p.out); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

// exited tells whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}
