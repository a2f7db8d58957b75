package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tether-dev/tether/test/controlplane"
)

// brokerService is the service of the broker's spans in the demo.
const brokerService = "tether-broker"

// startJaeger starts the cached Jaeger, for the broker to send its spans
// to. Without one the demo runs without traces rather than wait for
// Jaeger's first build (about 15 minutes): make test-binaries, or a run of
// test/tracing, builds it once.
func (d *demo) startJaeger(ctx context.Context) error {
	if !controlplane.JaegerCached() {
		d.say("demo: traces: off; Jaeger is not built (make test-binaries builds it once, about 15 minutes; the next make demo starts it)")
		return nil
	}
	path := filepath.Join(d.dir, "jaeger.log")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	d.logs = append(d.logs, path)
	t0 := time.Now()
	j, err := controlplane.StartJaeger(ctx, controlplane.JaegerOptions{Dir: d.dir, Output: f})
	if err != nil {
		f.Close()
		return fmt.Errorf("starting jaeger: %w", err)
	}
	d.jaeger, d.jaegerLog = j, f
	d.say("demo: jaeger started in %s, keeping traces in memory: OTLP on %s, query API on %s", since(t0), j.OTLP, j.Query)
	d.say("demo:   log: %s", rel(path))
	return nil
}

// otelEnv points the broker's spans at the demo's Jaeger; nil without one.
func (d *demo) otelEnv() []string {
	if d.jaeger == nil {
		return nil
	}
	// A short batching delay: the spans are in Jaeger by the time the
	// demo looks.
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + d.jaeger.OTLP, "OTEL_SERVICE_NAME=" + brokerService, "OTEL_BSP_SCHEDULE_DELAY=100"}
}

// showTrace reads back from Jaeger the broker's trace of the copy of the
// source Secret, prints it as a tree with its link, and saves its JSON
// beside the logs, for a Jaeger UI to open after the demo ended (the
// cached Jaeger is built without its UI's assets).
func (d *demo) showTrace(ctx context.Context) error {
	if d.jaeger == nil {
		return nil
	}
	d.next("The broker's trace of the first pass over %s/%s, read back from Jaeger", sourceNS, sourceName)
	var found []*controlplane.Span
	err := d.waitFor(ctx, "the trace of a pass that delivered and added the hold", func(ctx context.Context) (bool, error) {
		all, err := d.jaeger.Traces(ctx, brokerService)
		if err != nil {
			return false, err
		}
		for _, spans := range all {
			if passAddsHold(spans) {
				found = spans
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	id := found[0].TraceID
	for _, l := range strings.Split(strings.TrimRight(controlplane.RenderTrace(found, "tether.binding.id", "tether.hold.add",
		"tether.ack.outcome", "k8s.watch.event_type"), "\n"), "\n") {
		d.say("      %s", l)
	}
	data, err := d.jaeger.TraceJSON(ctx, id)
	if err != nil {
		return err
	}
	path := filepath.Join(d.dir, "trace-"+id+".json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("saving the trace: %w", err)
	}
	d.say("    the trace: %s/api/traces/%s (Jaeger's query API, while the demo runs; Jaeger stops with it)", d.jaeger.Query, id)
	d.say("    saved as %s: a Jaeger UI opens it (Search, JSON File); the Jaeger built from source has no UI of its own", rel(path))
	return nil
}

// passAddsHold tells whether the trace is the handler's pass over the
// source Secret that delivered to it and added its hold.
func passAddsHold(spans []*controlplane.Span) bool {
	var pass, deliver, write bool
	for _, s := range spans {
		switch {
		case s.Name == "tether.pass" && s.Tags["tether.handler"] == handlerName && s.Tags["k8s.namespace.name"] == sourceNS &&
			s.Tags["k8s.object.name"] == sourceName:
			pass = true
		case s.Name == "tether.deliver":
			deliver = true
		case s.Name == "tether.write" && s.Tags["tether.hold.add"] == "true":
			write = true
		}
	}
	return pass && deliver && write
}

// stopJaeger stops the demo's Jaeger, after the broker sent its last spans.
func (d *demo) stopJaeger() {
	if d.jaeger == nil {
		return
	}
	if err := d.jaeger.Stop(); err != nil {
		d.say("demo: stopping jaeger: %v", err)
	} else {
		d.say("demo: stopped jaeger")
	}
	d.jaegerLog.Close()
}
