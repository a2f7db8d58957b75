package typescript

import (
	"os/exec"
	"syscall"
	"testing"

	"github.com/tether-dev/tether/test/testenv"
)

// process is a broker or a handler running as a real process; out collects
// what it printed, stdout and stderr both.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	out  testenv.Lines
}

// start runs bin with args, its output into out and the test log, until
// the test ends (SIGKILL: nothing of it is checked after the test).
func start(t *testing.T, name, bin string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	p := &process{cmd: cmd, done: make(chan struct{})}
	p.out.Log = testenv.LogWriter(t, name+": ")
	cmd.Stdout = &p.out
	cmd.Stderr = &p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	return p
}

// kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// exited tells whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
