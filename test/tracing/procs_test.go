package tracing

import (
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/tether-dev/tether/test/testenv"
)

// process is the broker or the handler running as a real process; out
// collects what it printed on stdout.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	out  testenv.Lines
}

// start runs bin with args and env added to the test's environment,
// stdout into out and the test log, stderr into the test log. The test's
// cleanup stops it.
func start(t *testing.T, name, bin string, env []string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	p := &process{cmd: cmd, done: make(chan struct{})}
	log := testenv.LogWriter(t, name+": ")
	cmd.Stdout = io.MultiWriter(&p.out, log)
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.stop)
	return p
}

// stop ends the process with SIGTERM, so that it sends its last spans,
// and with SIGKILL when it has not ended within stopGrace.
func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(stopGrace):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stopGrace bounds a graceful stop: the handler drains for up to 10 s and
// each process flushes its spans for up to 5 s.
const stopGrace = 20 * time.Second
