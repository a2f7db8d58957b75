package lifecycle

import (
	"bufio"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/tether-dev/tether/test/gobin"
	"github.com/tether-dev/tether/test/testenv"
)

// handlerProcess is the test handler running as a real process; lines
// collects what it printed on stdout.
type handlerProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error

	mu    sync.Mutex
	lines []string
}

func startHandlerProcess(t *testing.T, addr, name, ns string, extra ...string) *handlerProcess {
	t.Helper()
	args := append([]string{"--broker", addr, "--name", name, "--namespace", ns}, extra...)
	cmd := exec.Command(gobin.Build(t, "github.com/tether-dev/tether/test/lifecycle/testhandler"), args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = testenv.LogWriter(t, "")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the test handler: %v", err)
	}
	p := &handlerProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.scan(stdout)
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	return p
}

func (p *handlerProcess) scan(r io.Reader) {
	s := bufio.NewScanner(r)
	for s.Scan() {
		p.mu.Lock()
		p.lines = append(p.lines, s.Text())
		p.mu.Unlock()
	}
}

// saw reports whether the process printed line.
func (p *handlerProcess) saw(line string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lines {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}

// kill ends the process with SIGKILL and waits for it.
func (p *handlerProcess) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// terminate ends the process with SIGTERM (a graceful stop) and waits.
func (p *handlerProcess) terminate() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	return p.err
}
