package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/test/bench/raw"
)

// rawController is the limit: what a perfect hand-written operator does for
// the same work (package test/bench/raw), one guarded JSON patch per object
// and phase (and a status write on create for the status workload), with the broker's client QPS and burst. It runs as a process of
// its own (test/bench/rawcontroller), measured as the broker is.
type rawController struct {
	e    *env
	bin  string
	work string // the workload
	proc *process
	watchdog
}

func newRawController(e *env, bin binaries, work string) *rawController {
	return &rawController{e: e, bin: bin.raw, work: work}
}

func (c *rawController) done(obj *unstructured.Unstructured) bool { return raw.Done(obj, c.work) }

func (c *rawController) start(ctx context.Context, ns string) (context.Context, error) {
	var err error
	if c.proc, err = startProcess(c.e, "raw-"+ns, c.bin,
		"-kubeconfig", c.e.cp.KubeconfigPath(), "-namespace", ns,
		"-qps", strconv.FormatFloat(c.e.qps, 'f', -1, 64), "-burst", strconv.Itoa(c.e.burst),
		"-workers", strconv.Itoa(c.e.rawWorkers), "-workload", c.work); err != nil {
		return nil, err
	}
	// Fail fast when it dies: every wait below watches this context.
	ctx = c.arm(ctx)
	go c.watch(c.proc)
	if err := probe(ctx, c.e, ns, c.done); err != nil {
		return nil, c.cause(ctx, fmt.Errorf("raw controller: %w", err))
	}
	return ctx, nil
}

func (c *rawController) cpu() ([]time.Duration, error) {
	t, err := cpuTime(c.proc.cmd.Process.Pid)
	return []time.Duration{t}, err
}

func (c *rawController) memory() []memPeak { return []memPeak{c.proc.memory("raw")} }

// profile does nothing: -profile is about the broker.
func (c *rawController) profile(context.Context, string) error { return nil }

func (c *rawController) stop() {
	c.expectExits()
	if err := c.proc.stop(); err != nil {
		c.e.progressf("%v", err)
	}
}
