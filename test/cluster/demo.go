package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/example"
)

// demoConfig is what the demo needs from its caller.
type demoConfig struct {
	// kubeconfig reaches a running control plane as admin.
	kubeconfig string
	// dir receives the process logs and, under bin/, the binaries.
	dir string
	// out receives the narration.
	out io.Writer
	// wait bounds every wait (default 30s).
	wait time.Duration
	// extraLogs are more log files to point at when the demo fails (the
	// control plane's).
	extraLogs []string
	// absentFor is how long the last step watches a held object while the
	// handler is gone (default 3s).
	absentFor time.Duration
}

// errInterrupted is runDemo's error when its context ended (Ctrl-C).
var errInterrupted = errors.New("demo interrupted")

// handlerName is the example handler's name in the demo; its hold is the
// finalizer tether.dev/example.
const handlerName = "example"

// demo is one run of the demo: its clients, processes and narration.
type demo struct {
	demoConfig
	// kube is the kubeconfig's user, which the broker uses too: the
	// webhooks let its requests through unreviewed.
	kube kubernetes.Interface
	// asUser impersonates demoUser, whose requests the webhooks review.
	asUser        kubernetes.Interface
	bins          example.Binaries
	addr          string
	admissionAddr string
	broker        *example.Process
	handler       *example.Process
	handlerLog    string
	jaeger        *controlplane.Jaeger // nil: not cached, no traces
	jaegerLog     *os.File
	logs          []string // every log file, for the failure message
	step          int
	started       time.Time
}

// runDemo tells the example handler's stories on the control plane that
// kubeconfig names: it builds and starts the broker and the example handler
// as processes, creates objects and narrates what happens, confirming each
// step by reading the cluster. Every process it starts is stopped before it
// returns, also when ctx ends (Ctrl-C).
func runDemo(ctx context.Context, c demoConfig) (err error) {
	if c.wait <= 0 {
		c.wait = 30 * time.Second
	}
	if c.absentFor <= 0 {
		c.absentFor = 3 * time.Second
	}
	d := &demo{demoConfig: c, started: time.Now(), logs: slices.Clone(c.extraLogs)}
	defer d.stopAll()
	defer func() {
		if err != nil {
			d.failed(ctx, err)
			if ctx.Err() != nil {
				err = errInterrupted
			}
		}
	}()
	if err := d.setUp(ctx); err != nil {
		return err
	}
	for _, step := range []func(context.Context) error{
		d.connected, d.replicate, d.update, d.ttl, d.badTTL, d.deleteSource, d.handlerAbsent, d.showTrace,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	d.say("demo: done in %s: %d steps, each confirmed by reading the cluster: replicated, updated, reaped, refused a bad ttl,"+
		" cleaned up, waited for a killed handler within its grace and released after it. Stopping the handler and the broker.",
		time.Since(d.started).Round(100*time.Millisecond), d.step)
	return nil
}

// setUp builds the binaries, starts the broker and the handler and
// creates the demo namespaces.
func (d *demo) setUp(ctx context.Context) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", d.kubeconfig)
	if err != nil {
		return fmt.Errorf("reading the kubeconfig: %w", err)
	}
	if d.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	cfg.Impersonate = rest.ImpersonationConfig{UserName: demoUser, Groups: []string{"system:masters", "system:authenticated"}}
	if d.asUser, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return err
	}
	binDir := filepath.Join(d.dir, "bin")
	d.say("demo: building the broker and the example handler into %s (go build; the first time takes a minute or two)", rel(binDir))
	t0 := time.Now()
	stopTicker := d.ticker("demo:   still building", 15*time.Second)
	d.bins, err = example.Build(ctx, binDir)
	stopTicker()
	if err != nil {
		return err
	}
	d.say("demo: built in %s", since(t0))
	if d.addr, err = example.FreeAddr(); err != nil {
		return err
	}
	if d.admissionAddr, err = example.FreeAddr(); err != nil {
		return err
	}
	if err := d.createNamespaces(ctx, brokerNS, sourceNS, targets[0], targets[1], excluded); err != nil {
		return err
	}
	if err := d.startJaeger(ctx); err != nil {
		return err
	}
	if err := d.startBroker(); err != nil {
		return err
	}
	return d.startHandler()
}

func (d *demo) startBroker() error {
	path := filepath.Join(d.dir, "broker.log")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	d.logs = append(d.logs, path)
	args := []string{"--kubeconfig", d.kubeconfig, "--listen", d.addr, "--insecure",
		"--namespace", brokerNS, "--grace", grace.String(), "--admission-listen", d.admissionAddr}
	if d.broker, err = example.StartEnv("broker", d.bins.Broker, args, d.otelEnv(), f); err != nil {
		f.Close()
		return err
	}
	go closeWhenDone(d.broker, f)
	d.say("demo: broker started, pid %d: %s %s", d.broker.Pid(), rel(d.bins.Broker), strings.Join(args, " "))
	d.say("demo:   log: %s", rel(path))
	return nil
}

// startHandler starts (or starts again) the example handler; its output
// is appended to handler.log.
func (d *demo) startHandler() error {
	d.handlerLog = filepath.Join(d.dir, "handler.log")
	f, err := os.OpenFile(d.handlerLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if d.handler == nil {
		if err := f.Truncate(0); err != nil {
			f.Close()
			return err
		}
		d.logs = append(d.logs, d.handlerLog)
	}
	args := []string{"--broker", d.addr, "--insecure", "--kubeconfig", d.kubeconfig, "--name", handlerName,
		"--ttl-interval", "1s"}
	if d.handler, err = example.Start("example-handler", d.bins.Handler, args, f); err != nil {
		f.Close()
		return err
	}
	go closeWhenDone(d.handler, f)
	d.say("demo: example handler started, pid %d: %s %s", d.handler.Pid(), rel(d.bins.Handler), strings.Join(args, " "))
	d.say("demo:   log: %s", rel(d.handlerLog))
	return nil
}

func closeWhenDone(p *example.Process, f *os.File) {
	<-p.Done()
	f.Close()
}

// stopAll stops the handler, then the broker: SIGTERM, SIGKILL after 10s.
// A process that already ended (the handler the demo killed) is left out.
func (d *demo) stopAll() {
	var stopped []string
	for _, p := range []*example.Process{d.handler, d.broker} {
		if p == nil || ended(p) {
			continue
		}
		if err := p.Stop(10 * time.Second); err != nil && !terminated(p) {
			d.say("demo: stopping: %v", err)
		}
		stopped = append(stopped, fmt.Sprintf("%s (pid %d)", p.Name, p.Pid()))
	}
	if len(stopped) > 0 {
		d.say("demo: stopped %s", strings.Join(stopped, " and "))
	}
	d.stopJaeger()
}

func ended(p *example.Process) bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

// terminated reports whether p ended by SIGTERM itself, before it had set up
// its own handling of the signal: a clean stop too.
func terminated(p *example.Process) bool {
	var exit *exec.ExitError
	if !ended(p) || !errors.As(p.Err(), &exit) {
		return false
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM
}

// failed prints why the demo stopped and where the logs are, with their
// last lines unless the demo was interrupted.
func (d *demo) failed(ctx context.Context, err error) {
	interrupted := ctx.Err() != nil
	if interrupted {
		d.say("demo: interrupted; stopping everything")
	} else {
		d.say("demo: FAILED: %v", err)
	}
	for _, p := range d.logs {
		if interrupted {
			d.say("demo: log %s", rel(p))
			continue
		}
		d.say("demo: log %s; last lines:", rel(p))
		lines := tail(p, 15)
		if len(lines) == 1 && lines[0] == "" {
			lines = []string{"(empty)"}
		}
		for _, l := range lines {
			d.say("demo:   | %s", l)
		}
	}
}

// tail returns the last n lines of a file.
func tail(path string, n int) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return []string{err.Error()}
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

// say prints one line of narration.
func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, format+"\n", args...)
}

// next starts a numbered step.
func (d *demo) next(format string, args ...any) {
	d.step++
	d.say("%2d. %s", d.step, fmt.Sprintf(format, args...))
}

// waitFor polls cond until it holds, announcing what it waits for and how
// long it took. The error names what did not happen in time.
func (d *demo) waitFor(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	fmt.Fprintf(d.out, "    waiting up to %s for %s ... ", d.wait, what)
	t0 := time.Now()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, d.wait, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		last = err // API errors are retried: the cluster may be busy
		return ok && err == nil, nil
	})
	if err != nil {
		fmt.Fprintln(d.out, "no")
		if last != nil {
			return fmt.Errorf("%s: %w (last error: %v)", what, err, last)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	fmt.Fprintf(d.out, "ok after %s\n", since(t0))
	return nil
}

// ticker prints prefix and the elapsed time every interval until stopped.
func (d *demo) ticker(prefix string, every time.Duration) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	t0 := time.Now()
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				d.say("%s (%s)", prefix, since(t0))
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

func since(t time.Time) string { return time.Since(t).Round(100 * time.Millisecond).String() }

// demoFolder returns the folder of the demo's logs and binaries, creating
// it: "demo" next to the kubeconfig the user asked for (.dev/demo for make
// demo), else a new temporary folder.
func demoFolder(kubeconfig string) (string, error) {
	if kubeconfig == "" {
		return os.MkdirTemp("", "tether-demo-")
	}
	abs, err := filepath.Abs(kubeconfig)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(filepath.Dir(abs), "demo")
	return dir, os.MkdirAll(dir, 0o755)
}

// rel shortens a path to be relative to the working directory when it is
// inside it.
func rel(p string) string {
	wd, err := os.Getwd()
	if err != nil {
		return p
	}
	r, err := filepath.Rel(wd, p)
	if err != nil || strings.HasPrefix(r, "..") {
		return p
	}
	return r
}
