package chaos

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one real process of the run (a broker replica or a handler
// instance) that faults kill, stop and start again. Its stderr goes to a
// log file in the run's folder; each line of its stdout goes to onLine.
type proc struct {
	name string
	bin  string
	// lead comes before args, which a rollout changes: a script to run.
	lead []string
	args []string
	env  []string // added to this process's environment
	dir  string
	// onLine sees every stdout line; generation counts the starts, so
	// that a report can tell one process from the one restarted after it.
	onLine func(generation int, line string)
	// supervise starts the process again when it exits by itself, a
	// second later, as the kubelet restarts a container (a broker that
	// loses its leader Lease exits); restarted is told when it does.
	supervise bool
	restarted func(name string)

	mu         sync.Mutex
	cmd        *exec.Cmd
	done       chan struct{}
	generation int
	// down: a fault or the end of the run holds the process down, so its
	// exit is not a crash to restart.
	down bool
}

// restartDelay is how long a supervised process that exited stays down.
const restartDelay = time.Second

// start runs the process (again); nothing when it is running.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !p.exited() {
		return nil
	}
	p.down = false
	p.generation++
	gen := p.generation
	logf, err := os.OpenFile(filepath.Join(p.dir, p.name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("opening the log of %s: %w", p.name, err)
	}
	argv := append(slices.Clone(p.lead), p.args...)
	fmt.Fprintf(logf, "---- start %d: %s %s\n", gen, p.bin, strings.Join(argv, " "))
	cmd := exec.Command(p.bin, argv...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	// Killed with the run, however it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if p.onLine != nil {
				p.onLine(gen, sc.Text())
			}
			fmt.Fprintln(logf, sc.Text())
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		logf.Close()
		close(done)
		if p.supervise {
			time.AfterFunc(restartDelay, func() { p.restartUnlessDown(gen) })
		}
	}()
	return nil
}

// restartUnlessDown starts the process again after start gen exited by
// itself: not when a fault or the run's end holds it down, nor when it was
// started again meanwhile (a rollout).
func (p *proc) restartUnlessDown(gen int) {
	p.mu.Lock()
	again := !p.down && p.generation == gen
	p.mu.Unlock()
	if !again {
		return
	}
	if err := p.start(); err == nil && p.restarted != nil {
		p.restarted(p.name)
	}
}

// signal sends sig to the running process; nil when it is not running.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("sending %v to %s: %w", sig, p.name, err)
	}
	return nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill ends the process with SIGKILL, continuing it first if it was
// stopped, and waits for it to be reaped.
func (p *proc) kill() {
	p.mu.Lock()
	p.down = true
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// terminate asks the process to stop (SIGTERM) and waits for it.
func (p *proc) terminate() {
	p.mu.Lock()
	p.down = true
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	<-done
}

// running reports whether the process has been started and not ended.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !p.exited()
}
