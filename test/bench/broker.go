package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/broker/progress"
	"github.com/tether-dev/tether/test/bench/workload"
)

// handlerName is the bench handler's name; its hold is tether.dev/bench.
const handlerName = "bench"

// binaries are the broker, the bench handler and the raw controller, built
// for this run, and with -baseline the broker of the baseline tree.
type binaries struct{ broker, handler, raw, baseline string }

// buildBinaries builds cmd/broker, the handler package handlerPkg
// (test/bench/handler or test/bench/timerhandler; none when empty, for the
// Python timer handler) and, for the create/delete benchmark, the raw
// controller (test/bench/rawcontroller) into the work folder, without
// -race: this is a benchmark.
func buildBinaries(ctx context.Context, e *env, handlerPkg string) (binaries, error) {
	b := binaries{broker: filepath.Join(e.work, "broker"), handler: filepath.Join(e.work, "bench-handler")}
	rawPkg := ""
	if !e.timers { // the timer benchmark has no raw scenario
		b.raw, rawPkg = filepath.Join(e.work, "rawcontroller"), "./test/bench/rawcontroller"
	}
	basePkg := ""
	if e.baseline != "" {
		b.baseline, basePkg = filepath.Join(e.work, "broker-baseline"), "./cmd/broker"
	}
	for _, t := range []struct{ out, dir, pkg string }{
		{b.broker, e.repo, "./cmd/broker"},
		{b.handler, e.repo, handlerPkg},
		{b.raw, e.repo, rawPkg},
		{b.baseline, e.baseline, basePkg},
	} {
		if t.pkg == "" {
			continue
		}
		e.progressf("building %s in %s", t.pkg, t.dir)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", t.out, t.pkg)
		cmd.Dir = t.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("building %s in %s: %w\n%s", t.pkg, t.dir, err, out)
		}
	}
	return b, nil
}

// process is a child process whose output goes to a log file.
type process struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{} // closed when it exited
	err  error         // its exit status, once done
	anon *peakSampler  // its peak private memory (RssAnon)
}

func startProcess(e *env, name, bin string, args ...string) (*process, error) {
	return startProcessEnv(e, name, bin, nil, args...)
}

// startProcessEnv is startProcess with variables (KEY=VALUE) added to the
// environment the child inherits.
func startProcessEnv(e *env, name, bin string, environ []string, args ...string) (*process, error) {
	p := &process{name: name, log: filepath.Join(e.work, name+".log"), done: make(chan struct{})}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p.cmd = exec.Command(bin, args...)
	if len(environ) > 0 {
		p.cmd.Env = append(os.Environ(), environ...)
	}
	p.cmd.Stdout, p.cmd.Stderr = f, f
	// The child dies with the bench, however the bench ends.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	p.anon = samplePeak(p.cmd.Process.Pid, "RssAnon", memSampleEvery, p.done)
	return p, nil
}

// memory is the process's peak RSS and peak private memory so far.
func (p *process) memory(role string) memPeak {
	m := memPeak{role: role}
	if m.rss, m.err = peakRSS(p.cmd.Process.Pid); m.err == nil {
		m.private, m.err = p.anon.peak()
	}
	return m
}

// exited describes how the process ended, with the tail of its log.
func (p *process) exited() error {
	data, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return fmt.Errorf("%s exited (%v); last lines of %s:\n%s", p.name, p.err, p.log, strings.Join(lines, "\n"))
}

// stop sends SIGTERM, waits up to 15 s, then SIGKILL.
func (p *process) stop() error {
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(15 * time.Second)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within 15s of SIGTERM; killed", p.name)
	}
}

// watchdog ends a scenario's waits when one of its processes dies before
// the scenario stops it.
type watchdog struct{ cancel context.CancelCauseFunc }

// arm returns the context that watch ends.
func (w *watchdog) arm(ctx context.Context) context.Context {
	ctx, w.cancel = context.WithCancelCause(ctx)
	return ctx
}

// watch ends the armed context, with how p ended, when p exits; run it in a
// goroutine of its own (it ends with p).
func (w *watchdog) watch(p *process) {
	<-p.done
	w.cancel(p.exited())
}

// expectExits disarms the watchdog before the processes are stopped; safe
// when it was never armed.
func (w *watchdog) expectExits() {
	if w.cancel != nil {
		w.cancel(context.Canceled)
	}
}

// cause prefers the reason a process died over the wait's own error.
func (w *watchdog) cause(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// brokerController runs the broker and the bench handler as processes.
type brokerController struct {
	e               *env
	bin             binaries
	handlerKind     string // one of allHandlers
	work            string // the workload
	broker, handler *process
	watchdog
	pprofAddr string // with -profile
}

func newBrokerController(e *env, bin binaries, handler, work string) *brokerController {
	return &brokerController{e: e, bin: bin, handlerKind: handler, work: work}
}

func (c *brokerController) done(obj *unstructured.Unstructured) bool {
	return handledFor(obj, c.work)
}

// handledByBench reports whether the bench handler finished creating obj
// on the result workload: its hold is on and its create's result stored.
func handledByBench(obj *unstructured.Unstructured) bool { return handledFor(obj, workload.Result) }

// handledFor reports whether the bench handler finished creating obj on
// workload work: its hold is on and what its create binding writes is
// there.
func handledFor(obj *unstructured.Unstructured, work string) bool {
	if !hold.Has(obj, handlerName) {
		return false
	}
	switch work {
	case workload.Label:
		_, ok := obj.GetLabels()[workload.LabelKey]
		return ok
	case workload.Status:
		handled, _, _ := unstructured.NestedBool(obj.Object, "status", workload.StatusField)
		return handled
	}
	_, stored := obj.GetAnnotations()[progress.ResultKey(handlerName, "create")]
	return stored
}

func (c *brokerController) start(ctx context.Context, ns string) (context.Context, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	qps := strconv.FormatFloat(c.e.qps, 'f', -1, 64)
	var environ []string
	if c.e.profile != "" {
		if c.pprofAddr, err = freeAddr(); err != nil {
			return nil, err
		}
		environ = []string{pprofEnv + "=" + c.pprofAddr,
			cpuProfileEnv + "=" + filepath.Join(c.e.profile, "broker-"+ns+"-cpu.pprof")}
	}
	if c.handlerKind == handlerGoTraced {
		environ = append(environ, c.tracingEnv("tether-broker")...)
	}
	bin := c.bin.broker
	if isBaseline(c.handlerKind) {
		bin = c.bin.baseline
	}
	if c.broker, err = startProcessEnv(c.e, fmt.Sprintf("broker-%s", ns), bin, environ,
		"--insecure", "--listen", addr, "--kubeconfig", c.e.cp.KubeconfigPath(),
		"--kube-api-qps", qps, "--kube-api-burst", strconv.Itoa(c.e.burst), "--log-level", "warn"); err != nil {
		return nil, err
	}
	// Fail fast when a process dies: every wait below watches this context.
	ctx = c.arm(ctx)
	go c.watch(c.broker)
	if err := waitServing(ctx, addr); err != nil {
		return nil, c.cause(ctx, fmt.Errorf("waiting for the broker's gRPC health service: %w", err))
	}
	prog, handlerArgs, handlerEnv := c.handlerCommand(addr, ns)
	if c.handler, err = startProcessEnv(c.e, fmt.Sprintf("handler-%s", ns), prog, handlerEnv, handlerArgs...); err != nil {
		return nil, err
	}
	go c.watch(c.handler)
	if err := probe(ctx, c.e, ns, c.done); err != nil {
		return nil, c.cause(ctx, err)
	}
	return ctx, nil
}

// handlerCommand is how to start the bench handler of the case: the
// program, its arguments and what to add to its environment.
func (c *brokerController) handlerCommand(addr, ns string) (prog string, args, environ []string) {
	if c.handlerKind == handlerPython || c.handlerKind == handlerPythonBaseline {
		tree := c.e.repo
		if c.handlerKind == handlerPythonBaseline {
			tree = c.e.baseline
		}
		args = []string{filepath.Join(tree, benchHandlerPy), "--addr", addr, "--name", handlerName,
			"--namespace", ns, "--window", strconv.Itoa(c.e.window), "--workload", c.work}
		if c.e.profile != "" {
			// cProfile sees the event loop's thread only: the SDK's
			// delivery path, not the plain functions in its workers.
			args = append([]string{"-m", "cProfile", "-o", filepath.Join(c.e.profile, "handler-"+ns+"-cpu.pstats")}, args...)
		}
		return c.e.python, args, pythonEnv(tree)
	}
	args = []string{"-addr", addr, "-name", handlerName, "-namespace", ns, "-window", strconv.Itoa(c.e.window), "-workload", c.work}
	if c.e.profile != "" {
		args = append(args, "-cpuprofile", filepath.Join(c.e.profile, "handler-"+ns+"-cpu.pprof"))
	}
	if c.handlerKind == handlerGoTraced {
		environ = c.tracingEnv("bench-handler")
	}
	return c.bin.handler, args, environ
}

// tracingEnv turns tracing on in a process of the go-traced case: every
// span (the samplers' default for a trace the broker starts, and the
// handler continues the broker's) sent over OTLP to the bench's Jaeger,
// batched as the OpenTelemetry SDK does by default.
func (c *brokerController) tracingEnv(service string) []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + c.e.jaeger.OTLP, "OTEL_SERVICE_NAME=" + service,
		"OTEL_TRACES_SAMPLER=always_on"}
}

func (c *brokerController) cpu() ([]time.Duration, error) {
	b, err := cpuTime(c.broker.cmd.Process.Pid)
	if err != nil {
		return nil, fmt.Errorf("CPU time of the broker: %w", err)
	}
	h, err := cpuTime(c.handler.cmd.Process.Pid)
	if err != nil {
		return nil, fmt.Errorf("CPU time of the handler: %w", err)
	}
	return []time.Duration{b, h}, nil
}

func (c *brokerController) memory() []memPeak {
	return []memPeak{c.broker.memory("broker"), c.handler.memory("handler")}
}

// profile saves the broker's heap (after a GC: what is live) as
// broker-<label>-heap.pprof.
func (c *brokerController) profile(ctx context.Context, label string) error {
	if c.pprofAddr == "" {
		return nil
	}
	path := filepath.Join(c.e.profile, "broker-"+label+"-heap.pprof")
	if err := fetchProfile(ctx, "http://"+c.pprofAddr+"/debug/pprof/heap?gc=1", path); err != nil {
		return err
	}
	c.e.progressf("heap profile of the broker: %s", path)
	return nil
}

func (c *brokerController) stop() {
	c.expectExits() // exits from here on are expected
	if c.pprofAddr != "" {
		if resp, err := http.Get("http://" + c.pprofAddr + cpuProfileStopPath); err != nil {
			c.e.progressf("ending the broker's CPU profile: %v", err)
		} else {
			resp.Body.Close()
		}
	}
	for _, p := range []*process{c.handler, c.broker} {
		if err := p.stop(); err != nil {
			c.e.progressf("%v", err)
		}
	}
}

// waitServing waits until the broker's gRPC health service says SERVING.
func waitServing(ctx context.Context, addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health status %s", resp.GetStatus())
	}
	return nil
}

// freeAddr picks a free loopback port for the broker.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
