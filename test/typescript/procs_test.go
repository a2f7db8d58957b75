package typescript

import (
	"io"
	"net"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

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

// freeAddr is a loopback address with a port free now, for a process that
// is given its address.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startBalancer listens on a loopback port and spreads the connections it
// accepts over backends in turn, skipping one that refuses: a Service that
// selects every ready replica, whose endpoints lose a replica that died.
// It returns the address it listens on.
func startBalancer(t *testing.T, backends ...string) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var conns sync.Map
	t.Cleanup(func() {
		_ = lis.Close()
		conns.Range(func(c, _ any) bool { _ = c.(net.Conn).Close(); return true })
		wg.Wait()
	})
	var next atomic.Uint32
	wg.Go(func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			start := int(next.Add(1))
			wg.Go(func() { relay(in, backends, start, &conns) })
		}
	})
	return lis.Addr().String()
}

// relay pipes in to the first backend from start on that accepts, until
// either side ends.
func relay(in net.Conn, backends []string, start int, conns *sync.Map) {
	defer in.Close()
	var out net.Conn
	for i := range backends {
		var err error
		if out, err = net.DialTimeout("tcp", backends[(start+i)%len(backends)], time.Second); err == nil {
			break
		}
	}
	if out == nil {
		return
	}
	defer out.Close()
	conns.Store(in, true)
	conns.Store(out, true)
	defer conns.Delete(in)
	defer conns.Delete(out)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src) // ends with either side: close both
		_ = dst.Close()
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
}
