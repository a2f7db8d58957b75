package controlplane

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// JaegerVersion is the Jaeger that the trace tests send spans to and read
// them back from. It must match test/tools/jaeger/go.mod.
const JaegerVersion = "v1.75.0"

const jaegerStampName = "stamp-jaeger"

// jaegerSet is what [EnsureJaeger] builds: Jaeger (its collector-based
// all-in-one, cmd/jaeger) from a module of its own, told its version as
// Jaeger's Makefile tells it (its source says none).
var jaegerSet = binarySet{
	stamp:    jaegerStampName,
	versions: []string{"jaeger " + JaegerVersion},
	targets: []target{{name: "jaeger", version: JaegerVersion, pkg: "github.com/jaegertracing/jaeger/cmd/jaeger", module: "jaeger",
		ldflags: "-X github.com/jaegertracing/jaeger/internal/version.latestVersion=" + JaegerVersion,
		want:    `"gitVersion":"` + JaegerVersion + `"`, versionArgs: []string{"version"}, hint: "about 15 minutes on 2 cores"}},
}

// EnsureJaeger returns the path of the cached jaeger, building it first
// when it is missing, as [Ensure] does for the control plane's binaries
// (same cache folder, own stamp).
func EnsureJaeger(ctx context.Context, opts EnsureOptions) (string, error) {
	return ensureOne(ctx, opts, jaegerSet)
}

// JaegerCached tells whether the cache holds the pinned jaeger, for a
// caller that goes without traces rather than wait for its first build
// (make demo).
func JaegerCached() bool {
	opts := EnsureOptions{}
	if err := opts.setDefaults(); err != nil {
		return false
	}
	return jaegerSet.ready(opts.Dir)
}

// JaegerOptions configures [StartJaeger].
type JaegerOptions struct {
	// Dir holds its configuration file; a test's temporary folder.
	Dir string
	// Output receives what it prints; nil: discarded.
	Output io.Writer
	// Progress receives the progress of a first build of jaeger; nil:
	// discarded.
	Progress io.Writer
}

// Jaeger is a running Jaeger that keeps the traces it receives in memory.
type Jaeger struct {
	// OTLP is the HOST:PORT of its OTLP/gRPC receiver.
	OTLP string
	// Query is the URL of its HTTP query API (/api/traces, /api/services).
	Query string
	proc  *Process
}

// StartJaeger starts the cached jaeger (building it first when it is
// missing) on free loopback ports, with an OTLP/gRPC receiver and the query
// API only, and waits until both answer; ctx bounds the build and the wait.
func StartJaeger(ctx context.Context, opts JaegerOptions) (*Jaeger, error) {
	path, err := EnsureJaeger(ctx, EnsureOptions{Progress: opts.Progress})
	if err != nil {
		return nil, err
	}
	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	j := &Jaeger{OTLP: fmt.Sprintf("127.0.0.1:%d", ports[0]), Query: fmt.Sprintf("http://127.0.0.1:%d", ports[1])}
	config := filepath.Join(opts.Dir, "jaeger.yaml")
	if err := os.WriteFile(config, []byte(jaegerConfig(j.OTLP, ports[1], ports[2])), 0o644); err != nil {
		return nil, fmt.Errorf("writing the jaeger configuration: %w", err)
	}
	cmd := exec.Command(path, "--config", "file:"+config)
	if opts.Output != nil {
		cmd.Stdout, cmd.Stderr = opts.Output, opts.Output
	}
	if j.proc, err = StartProcess("jaeger", cmd); err != nil {
		return nil, err
	}
	if err := j.waitReady(ctx); err != nil {
		_ = j.Stop()
		return nil, err
	}
	return j, nil
}

// jaegerConfig is a configuration with the OTLP/gRPC receiver on otlp, the
// query API's HTTP on port httpPort and its gRPC on grpcPort (which cannot
// be turned off), the traces in memory, and neither a metrics endpoint nor
// traces of its own (which it would send to an OTLP collector on
// 127.0.0.1:4317, not there).
func jaegerConfig(otlp string, httpPort, grpcPort int) string {
	return fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    enable_tracing: false
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`, httpPort, grpcPort, otlp)
}

// waitReady polls until the query API answers and the receiver accepts
// connections, or jaeger exits, or ctx ends.
func (j *Jaeger) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if j.ready(ctx) {
			return nil
		}
		select {
		case <-j.proc.Done():
			return fmt.Errorf("jaeger exited before it was ready: %v", j.proc.Err())
		case <-ctx.Done():
			return fmt.Errorf("waiting for jaeger on %s and %s: %w", j.OTLP, j.Query, ctx.Err())
		case <-tick.C:
		}
	}
}

func (j *Jaeger) ready(ctx context.Context) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.Query+"/api/services", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", j.OTLP)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// Stop ends jaeger, and with it the traces it kept.
func (j *Jaeger) Stop() error {
	return j.proc.Stop(10 * time.Second)
}
