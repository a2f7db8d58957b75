package controlplane

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// The kernel sends a child its parent-death signal when the *thread* that forked
// it exits, not the process. Go may end idle threads, so every child is forked
// from one goroutine locked to its OS thread that never returns: the thread then
// lives exactly as long as the process, and the children die with the process
// however it ends (panic, test timeout, SIGKILL).
var (
	launchOnce sync.Once
	launchReqs chan launchReq
)

type launchReq struct {
	cmd  *exec.Cmd
	done chan error
}

// startChild starts cmd in its own process group with SIGKILL as its
// parent-death signal.
func startChild(cmd *exec.Cmd) error {
	launchOnce.Do(func() {
		launchReqs = make(chan launchReq)
		go launcher(launchReqs)
	})
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	req := launchReq{cmd: cmd, done: make(chan error, 1)}
	launchReqs <- req
	return <-req.done
}

// launcher forks every child from its own locked thread. It never returns and
// never unlocks: an exiting locked goroutine takes its thread down with it.
func launcher(reqs <-chan launchReq) {
	runtime.LockOSThread()
	for req := range reqs {
		req.done <- req.cmd.Start()
	}
}

// Process is a child started by [StartProcess] and the means to stop it.
type Process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has been waited for
	err  error         // the Wait result, valid once done is closed
}

// StartProcess starts cmd in its own process group, forked so that it dies
// with the calling process however that ends, and waits for it in the
// background. name is what errors call it.
func StartProcess(name string, cmd *exec.Cmd) (*Process, error) {
	if err := startChild(cmd); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Done is closed when the process has ended and been waited for.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the result of waiting for the process, valid once Done is closed.
func (p *Process) Err() error { return p.err }

// Name is the name the process was started with.
func (p *Process) Name() string { return p.name }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM to the process group, waits up to grace, then sends
// SIGKILL and waits for the process to be reaped.
func (p *Process) Stop(grace time.Duration) error {
	if p == nil || p.Exited() {
		return nil
	}
	pgid := p.cmd.Process.Pid // Setpgid: the group id is the child's pid
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("sending SIGTERM to %s (pid %d): %w", p.name, pgid, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("sending SIGKILL to %s (pid %d): %w", p.name, pgid, err)
	}
	kill := time.NewTimer(10 * time.Second)
	defer kill.Stop()
	select {
	case <-p.done:
		return fmt.Errorf("%s (pid %d) ignored SIGTERM for %s and was killed", p.name, pgid, grace)
	case <-kill.C:
		return fmt.Errorf("%s (pid %d) still running 10s after SIGKILL", p.name, pgid)
	}
}

// processAlive reports whether a process with this pid exists (it may be a
// zombie or, after pid reuse, another process).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
