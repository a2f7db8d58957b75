package example

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/tether-dev/tether/test/controlplane"
)

// Binaries are the built broker and example handler.
type Binaries struct {
	Broker  string
	Handler string
}

// Build compiles cmd/broker and cmd/example-handler into dir with go build
// (flags such as -race come first) and returns their paths. It runs in the
// repository root found from the working directory; the Go build cache makes
// later builds quick.
func Build(ctx context.Context, dir string, flags ...string) (Binaries, error) {
	wd, err := os.Getwd()
	if err != nil {
		return Binaries{}, err
	}
	root, err := controlplane.FindRepoRoot(wd)
	if err != nil {
		return Binaries{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Binaries{}, err
	}
	b := Binaries{Broker: filepath.Join(dir, "broker"), Handler: filepath.Join(dir, "example-handler")}
	for pkg, out := range map[string]string{"./cmd/broker": b.Broker, "./cmd/example-handler": b.Handler} {
		args := append(append([]string{"build"}, flags...), "-o", out, pkg)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = root
		if msg, err := cmd.CombinedOutput(); err != nil {
			return Binaries{}, fmt.Errorf("go build %s: %v\n%s", pkg, err, msg)
		}
	}
	return b, nil
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago, for a broker whose handlers must know its address in advance.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Process is a started child process. It runs in its own process group
// and dies with this process however it ends: its parent-death signal is
// SIGKILL, and it is forked from an OS thread that never exits (the kernel
// sends the signal when the forking thread ends, not the process).
type Process struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // valid once done is closed
}

var (
	launchOnce sync.Once
	launches   chan launch
)

type launch struct {
	cmd  *exec.Cmd
	errc chan error
}

// launcher starts every child from its own locked thread; it never returns
// and never unlocks, so the thread lives as long as the process.
func launcher() {
	runtime.LockOSThread()
	for l := range launches {
		l.errc <- l.cmd.Start()
	}
}

// Start runs path with args; its stdout and stderr go to out.
func Start(name, path string, args []string, out io.Writer) (*Process, error) {
	return StartEnv(name, path, args, nil, out)
}

// StartEnv is Start with env (KEY=value) added to the environment.
func StartEnv(name, path string, args, env []string, out io.Writer) (*Process, error) {
	launchOnce.Do(func() {
		launches = make(chan launch)
		go launcher()
	})
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	l := launch{cmd: cmd, errc: make(chan error, 1)}
	launches <- l
	if err := <-l.errc; err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is how the process ended (nil for exit status 0); only valid once
// Done is closed.
func (p *Process) Err() error { return p.err }

// Kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	<-p.done
}

// ErrKilled is returned by Stop when the process ignored SIGTERM.
var ErrKilled = errors.New("ignored SIGTERM and was killed")

// Stop sends SIGTERM and waits up to grace for the process to end, then
// kills it. It returns how the process ended: nil for exit status 0,
// ErrKilled (wrapped) when it had to be killed. Stop may be called again.
func (p *Process) Stop(grace time.Duration) error {
	select {
	case <-p.done:
		return p.exitErr()
	default:
	}
	if err := syscall.Kill(-p.Pid(), syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%s: SIGTERM: %w", p.Name, err)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return p.exitErr()
	case <-t.C:
	}
	p.Kill()
	return fmt.Errorf("%s (pid %d) %w after %v", p.Name, p.Pid(), ErrKilled, grace)
}

func (p *Process) exitErr() error {
	if p.err != nil {
		return fmt.Errorf("%s (pid %d): %w", p.Name, p.Pid(), p.err)
	}
	return nil
}
