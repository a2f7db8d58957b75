package lifecycle

import (
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"k8s.io/client-go/dynamic"

	"github.com/tether-dev/tether/test/gobin"
	"github.com/tether-dev/tether/test/testenv"
)

// handlerProcess is the test handler running as a real process; out
// collects what it printed on stdout, log what it logged on stderr.
type handlerProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	out  testenv.Lines
	log  testenv.Lines
}

func startHandlerProcess(t *testing.T, addr, name, ns string, extra ...string) *handlerProcess {
	t.Helper()
	args := append([]string{"--broker", addr, "--name", name, "--namespace", ns}, extra...)
	cmd := exec.Command(gobin.Build(t, "github.com/tether-dev/tether/test/lifecycle/testhandler"), args...)
	p := &handlerProcess{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout = &p.out
	cmd.Stderr = io.MultiWriter(testenv.LogWriter(t, ""), &p.log)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the test handler: %v", err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	return p
}

// saw reports whether the process printed line.
func (p *handlerProcess) saw(line string) bool {
	return p.out.Any(func(l string) bool { return strings.TrimSpace(l) == line })
}

// deleteRunsItsDelete deletes the widget ns/name, waits until it is gone
// and fails the test when the handler's delete did not run first.
func (p *handlerProcess) deleteRunsItsDelete(t *testing.T, dyn dynamic.Interface, ns, name string) {
	t.Helper()
	del(t, dyn, widgetGVR, ns, name)
	waitObject(t, dyn, widgetGVR, ns, name, "gone", gone)
	if !p.saw("DELETE " + ns + "/" + name) {
		t.Errorf("%s went without its delete handler", name)
	}
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
